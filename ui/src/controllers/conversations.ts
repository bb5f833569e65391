/** Conversations: the list, opening and starting chats (each keeps its draft), renaming, pinning, deleting, exporting, importing, copying. */
import * as api from "../api";
import type { ConversationSummary, ImportReport, Message, PendingAttachment } from "../api";
import { ApiError, errorMessage } from "../api";
import type { ChatView } from "../views/chat";
import type { Composer } from "../views/composer";
import { confirmDialog } from "../views/dialogs";
import type { Sidebar } from "../views/sidebar";
import { openSystemPromptEditor } from "../views/system-prompt";
import type { Shared } from "./shared";

/** A message being written and not sent: its text and attached files. */
type Draft = { text: string; pending: PendingAttachment[] };

/** Typing pauses this long before the draft is saved (a restart loses no more than that). */
export const DRAFT_SAVE_DELAY_MS = 400;

export interface ConversationViews {
  sidebar: Sidebar;
  composer: Composer;
  chat: ChatView;
}

export class ConversationsController {
  /** What was being written in each chat left for another ("" is the new chat), kept until it is opened again. */
  private readonly drafts = new Map<string, Draft>();
  /** Each chat's draft text as saved in the database ("" is the new chat): what a restart brings back. */
  private readonly saved = new Map<string, string>();
  /** The draft save waiting for typing to pause, and the chat it is for. */
  private pendingSave: { timer: ReturnType<typeof setTimeout>; id: string | null } | null = null;
  private stopFollowing: (() => void) | null = null;

  constructor(
    private readonly shared: Shared,
    private readonly views: ConversationViews,
    /** A stored message with what this window knows that the store may not have yet (an answer being written). */
    private readonly withLiveState: (message: Message) => Message,
  ) {}

  async refresh(): Promise<void> {
    try {
      this.shared.state.conversations.set(await api.listConversations());
    } catch (error) {
      this.shared.toasts.show(`Could not load your chats: ${errorMessage(error)}`);
    }
  }

  /**
   * Comes back as the window was left: the chat open last (else the new chat), each chat's
   * unsent text, and from now on remembers which chat is open.
   */
  async restore(): Promise<void> {
    const { state } = this.shared;
    try {
      const { drafts, lastOpen } = await api.drafts();
      for (const [id, text] of Object.entries(drafts)) if (text !== undefined) this.saved.set(id, text);
      const open = state.chat.get();
      const untouched = open.id === null && open.messages.length === 0 && this.views.composer.text() === "";
      if (untouched) {
        // The new chat's text first: opening the chat left last keeps it for the new chat.
        this.views.composer.setText(this.saved.get("") ?? "");
        if (lastOpen && state.conversations.get().some((c) => c.id === lastOpen)) await this.open(lastOpen);
      }
    } catch (error) {
      this.shared.toasts.show(`Could not bring back your unsent drafts: ${errorMessage(error)}`);
    }
    this.stopFollowing?.();
    this.stopFollowing = state.chat.subscribe((chat, previous) => {
      if (chat.id !== previous.id) void api.setLastOpen(chat.id).catch(() => {});
    });
  }

  /** The open chat's draft changed by typing: saved once typing pauses. */
  draftEdited(): void {
    const id = this.shared.state.chat.get().id;
    if (this.pendingSave) clearTimeout(this.pendingSave.timer);
    const timer = setTimeout(() => {
      this.pendingSave = null;
      // Sent or left meanwhile: sending cleared it, leaving saved it.
      if (this.shared.state.chat.get().id === id) void this.saveDraft(id, this.views.composer.text());
    }, DRAFT_SAVE_DELAY_MS);
    this.pendingSave = { timer, id };
  }

  /** The open chat's draft is being sent: the backend forgets it once the message is saved. */
  draftSent(): void {
    if (this.pendingSave) clearTimeout(this.pendingSave.timer);
    this.pendingSave = null;
    this.saved.delete(this.shared.state.chat.get().id ?? "");
  }

  /** Saves the open chat's draft now if typing left it unsaved (before quitting). */
  async flushDraft(): Promise<void> {
    const pending = this.pendingSave;
    if (!pending) return;
    clearTimeout(pending.timer);
    this.pendingSave = null;
    if (this.shared.state.chat.get().id === pending.id) await this.saveDraft(pending.id, this.views.composer.text());
  }

  private async saveDraft(id: string | null, text: string): Promise<void> {
    const key = id ?? "";
    // A chat deleted (or not listed yet) has no draft to keep.
    if (id !== null && !this.shared.state.conversations.get().some((c) => c.id === id)) {
      this.saved.delete(key);
      return;
    }
    if ((this.saved.get(key) ?? "") === (text.trim() ? text : "")) return;
    if (text.trim()) this.saved.set(key, text);
    else this.saved.delete(key);
    try {
      await api.saveDraft(id, text);
    } catch (error) {
      this.shared.toasts.show(`Could not save the draft: ${errorMessage(error)}`);
    }
  }

  newChat(): void {
    const { state } = this.shared;
    if (state.contextFull.get()?.conversationId === null) state.contextFull.set(null);
    this.switchDraft(null);
    const serial = state.chat.get().serial + 1;
    state.chat.set({ id: null, messages: [], loading: false, title: null, serial, systemPrompt: null });
    this.views.composer.focus();
  }

  async open(id: string, messageId?: string): Promise<void> {
    const { state, toasts } = this.shared;
    this.switchDraft(id);
    const chat = state.chat;
    const serial = chat.get().serial + 1;
    const title = state.conversations.get().find((c) => c.id === id)?.title ?? null;
    chat.set({ id, messages: [], loading: true, title, serial, systemPrompt: null });
    try {
      const conversation = messageId ? await api.openMessage(id, messageId) : await api.getConversation(id);
      if (serial !== chat.get().serial) return;
      const messages = conversation.messages.map((message) => this.withLiveState(message));
      const last = [...messages].reverse().find((message) => message.role === "assistant");
      if (last?.usage?.stopReason === "contextFull" && !state.contextFull.get())
        state.contextFull.set({ conversationId: id, reason: "cutOff", needed: null, window: null });
      chat.patch({ messages, loading: false, title: conversation.title, systemPrompt: conversation.systemPrompt });
      if (messageId) this.views.chat.reveal(messageId);
      else this.views.chat.scrollToBottom(false);
      this.views.composer.focus();
    } catch (error) {
      if (serial !== chat.get().serial) return;
      chat.patch({ loading: false });
      toasts.show(`Could not open the chat: ${errorMessage(error)}`);
      if (error instanceof ApiError && error.kind === "notFound") void this.refresh();
      this.newChat();
    }
  }

  async rename(conversation: ConversationSummary, title: string): Promise<void> {
    try {
      await api.renameConversation(conversation.id, title);
      this.shared.state.conversations.update((list) =>
        list.map((c) => (c.id === conversation.id ? { ...c, title } : c)),
      );
      this.views.sidebar.refreshSearch();
    } catch (error) {
      this.shared.toasts.show(`Could not rename the chat: ${errorMessage(error)}`);
      throw error;
    }
  }

  async pin(conversation: ConversationSummary, pinned: boolean): Promise<void> {
    try {
      await api.setPinned(conversation.id, pinned);
      this.shared.state.conversations.update((list) =>
        list.map((c) => (c.id === conversation.id ? { ...c, pinned } : c)),
      );
    } catch (error) {
      this.shared.toasts.show(`Could not ${pinned ? "pin" : "unpin"} the chat: ${errorMessage(error)}`);
    }
  }

  async delete(conversation: ConversationSummary): Promise<void> {
    const { root, state, toasts } = this.shared;
    const confirmed = await confirmDialog(root, {
      title: `Delete “${conversation.title || "New Chat"}”?`,
      message: "Its messages and attached images are removed from this computer. This cannot be undone.",
      confirm: "Delete",
      destructive: true,
      testId: "delete-dialog",
    });
    if (!confirmed) return;
    try {
      await api.deleteConversation(conversation.id);
      state.conversations.update((list) => list.filter((c) => c.id !== conversation.id));
      this.views.sidebar.refreshSearch();
      if (state.chat.get().id === conversation.id) this.newChat();
    } catch (error) {
      toasts.show(`Could not delete the chat: ${errorMessage(error)}`);
    }
  }

  /** Saves the open chat as Markdown or JSON where the person picks. */
  async exportChat(format: "markdown" | "json"): Promise<void> {
    const id = this.shared.state.chat.get().id;
    if (!id) return;
    try {
      const path = format === "markdown" ? await api.exportMarkdown(id) : await api.exportJson(id);
      if (path) this.shared.toasts.show(`Exported to ${path}`);
    } catch (error) {
      this.shared.toasts.show(`Could not export the chat: ${errorMessage(error)}`);
    }
  }

  /** Copies the open chat (the versions shown) to the clipboard as Markdown. */
  async copy(): Promise<void> {
    const id = this.shared.state.chat.get().id;
    if (!id) return;
    try {
      await api.copyText(await api.conversationMarkdown(id));
      this.shared.toasts.show("Conversation copied as Markdown");
    } catch (error) {
      this.shared.toasts.show(`Could not copy the conversation: ${errorMessage(error)}`);
    }
  }

  /** Saves every chat as one JSON file. */
  async exportAll(): Promise<void> {
    try {
      const path = await api.exportJson(null);
      if (path) this.shared.toasts.show(`Every chat exported to ${path}`);
    } catch (error) {
      this.shared.toasts.show(`Could not export the chats: ${errorMessage(error)}`);
    }
  }

  /** Imports a JSON export and says what it added and what it skipped. */
  async importChats(): Promise<void> {
    try {
      const { report } = await api.importJson();
      if (!report) return;
      this.shared.toasts.show(importSummary(report));
      await this.refresh();
      const open = this.shared.state.chat.get().id;
      if (open && report.messagesAdded > 0) void this.open(open);
    } catch (error) {
      this.shared.toasts.show(`Could not import: ${errorMessage(error)}`);
    }
  }

  /** Opens the open chat's system prompt editor; a new chat keeps the choice until it is sent. */
  async editSystemPrompt(): Promise<void> {
    const { root, state } = this.shared;
    const { chat } = state;
    const { id, serial, systemPrompt } = chat.get();
    await openSystemPromptEditor(root, {
      own: systemPrompt,
      defaultPrompt: state.settings.get()?.systemPrompt ?? "",
      maxChars: state.settingsLimits.get()?.systemPromptChars ?? Number.POSITIVE_INFINITY,
      save: async (prompt) => {
        if (id !== null) await api.setSystemPrompt(id, prompt);
        if (chat.get().serial === serial) chat.patch({ systemPrompt: prompt });
      },
    });
  }

  /** Keeps the composer's text and images with the chat being left, and brings back those of `next`. */
  private switchDraft(next: string | null): void {
    const { state } = this.shared;
    const { composer } = this.views;
    const current = state.chat.get().id;
    if (current === next) return;
    const text = composer.text();
    const pending = state.pending.get();
    if (text.trim() || pending.length > 0) this.drafts.set(current ?? "", { text, pending });
    else this.drafts.delete(current ?? "");
    if (this.pendingSave) clearTimeout(this.pendingSave.timer);
    this.pendingSave = null;
    void this.saveDraft(current, text);
    const draft = this.drafts.get(next ?? "");
    this.drafts.delete(next ?? "");
    composer.setText(draft?.text ?? this.saved.get(next ?? "") ?? "");
    state.pending.set(draft?.pending ?? []);
  }
}

/** What an import did, in a sentence. */
export function importSummary(report: ImportReport): string {
  const count = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;
  const parts: string[] = [];
  if (report.conversationsAdded) parts.push(`${count(report.conversationsAdded, "chat", "chats")} added`);
  if (report.conversationsUpdated) parts.push(`${count(report.conversationsUpdated, "chat", "chats")} updated`);
  const added = `Imported ${count(report.messagesAdded, "message", "messages")}`;
  const what = parts.length ? `${added} (${parts.join(", ")})` : added;
  if (!report.messagesSkipped) return `${what}.`;
  return `${what}; skipped ${count(report.messagesSkipped, "message", "messages")} already here.`;
}
