/**
 * The window: wires the views to the backend (through `api`) and keeps the state they show.
 * Data flows one way: commands and events update the state here, then the views are told.
 */
import * as api from "./api";
import type {
  AppStatus,
  Attachment,
  ConversationSummary,
  GenerationEvent,
  Message,
  ModelState,
  PendingAttachment,
  Sent,
  Settings,
  UnlistenFn,
} from "./api";
import { ApiError, errorMessage } from "./api";
import { el } from "./dom";
import { thisMachine } from "./format";
import { announce } from "./live";
import { externalUrl } from "./markdown/sanitize";
import { FrameScheduler, Generations, type LiveGeneration } from "./stream";
import { ChatView } from "./views/chat";
import { Composer } from "./views/composer";
import { confirmDialog } from "./views/dialogs";
import { SettingsDialog } from "./views/settings";
import { setupView } from "./views/setup";
import { Sidebar } from "./views/sidebar";
import { startupErrorView } from "./views/startup-error";
import { StatusBar } from "./views/status-bar";
import { Toasts } from "./views/toasts";

const MEMORY_POLL_MS = 3000;
const PENDING_PREFIX = "pending:";

/** How a finished answer ended, kept for answers whose command reply comes after the end event. */
type FinishedAnswer = Pick<Message, "text" | "status" | "usage" | "error">;

export class App {
  private status: AppStatus | null = null;
  private model: ModelState = { state: "none" };
  private settings: Settings | null = null;
  private conversations: ConversationSummary[] = [];
  private openId: string | null = null;
  private messages: Message[] = [];
  /** Changes whenever the main area switches conversation; stale replies compare against it. */
  private viewSerial = 0;
  private pending: PendingAttachment[] = [];
  private sending = false;
  private loadingConversation = false;
  private readonly generations = new Generations();
  private readonly finished = new Map<string, FinishedAnswer>();
  private readonly contextWindows = new Map<string, number>();
  private readonly thumbnails = new Map<string, Promise<string>>();
  /** The conversation (null: the new chat) that no longer fits, with the message to show. */
  private contextFull: { conversationId: string | null; message: string } | null = null;
  private setupBusy = false;
  private setupError: string | null = null;
  private generatingKey = "";
  private memoryTimer: number | undefined;
  private readonly unlisteners: UnlistenFn[] = [];
  private readonly cleanups: (() => void)[] = [];

  private readonly main = el(
    "main",
    { class: "content", "aria-busy": "true" },
    el("p", { class: "loading" }, "Loading…"),
  );
  private readonly sidebar: Sidebar;
  private readonly composer: Composer;
  private readonly chat: ChatView;
  private readonly statusBar = new StatusBar();
  private readonly toasts = new Toasts();
  private readonly settingsDialog: SettingsDialog;
  private readonly dropOverlay = el(
    "div",
    { class: "drop-overlay", "data-testid": "drop-overlay", hidden: true, "aria-hidden": "true" },
    el("div", { class: "drop-target" }, el("p", {}, "Drop images to attach them")),
  );
  private readonly emptyTitle = el("h2", { class: "empty-title" }, "How can I help?");
  private readonly emptyNote = el("p", { class: "empty-note" });
  private readonly scheduler = new FrameScheduler<string>((ids) => this.renderStreams(ids));

  constructor(private readonly root: HTMLElement) {
    this.sidebar = new Sidebar({
      newChat: () => this.newChat(),
      open: (id, messageId) => void this.openConversation(id, messageId),
      rename: (conversation, title) => this.rename(conversation, title),
      delete: (conversation) => void this.deleteConversation(conversation),
      search: (query) => api.searchConversations(query),
      openSettings: () => void this.settingsDialog.open(),
    });
    this.composer = new Composer({
      send: (text) => void this.send(text),
      stop: () => void this.stop(),
      attach: () => void this.pickImages(),
      pasteImages: (files) => void this.pasteImages(files),
      removeAttachment: (attachment) => this.removeAttachment(attachment),
    });
    this.chat = new ChatView(
      this.composer.element,
      {
        regenerate: () => void this.regenerate(),
        edit: (message, text) => void this.edit(message, text),
        stop: () => void this.stop(),
        thumbnail: (attachment) => this.thumbnail(attachment),
      },
      el(
        "div",
        { class: "chat-empty" },
        el("div", { class: "mark", "aria-hidden": "true" }, "G"),
        this.emptyTitle,
        this.emptyNote,
      ),
    );
    this.settingsDialog = new SettingsDialog({
      load: () => api.getSettings(),
      save: (settings) => this.saveSettings(settings),
    });
  }

  /** Draws the window, subscribes to backend events and loads the first state. */
  async start(): Promise<void> {
    this.root.replaceChildren(
      this.sidebar.element,
      el("div", { class: "main-column" }, this.main, this.statusBar.element),
      this.dropOverlay,
      this.toasts.element,
      this.settingsDialog.element,
    );
    this.installGlobalHandlers();
    try {
      this.unlisteners.push(
        await api.onModelState((state) => this.applyModelState(state)),
        await api.onGeneration((event) => this.onGeneration(event)),
        await api.onDrop((event) => this.onDrop(event)),
      );
    } catch (error) {
      this.toasts.show(`Live updates are unavailable: ${errorMessage(error)}`);
    }

    let status: AppStatus;
    try {
      status = await api.appStatus();
    } catch (error) {
      this.main.removeAttribute("aria-busy");
      this.main.replaceChildren(startupErrorView(error));
      return;
    }
    this.status = status;
    this.sidebar.setVersion(status.version);
    this.emptyNote.textContent = `Gemma runs entirely on ${thisMachine(status.platform)}. Nothing you write leaves it.`;
    this.main.removeAttribute("aria-busy");
    this.applyModelState(status.model);
    void this.refreshConversations();
    api.getSettings().then(
      (settings) => {
        this.settings = settings;
        this.renderChat();
      },
      () => {},
    );
    this.pollMemory();
  }

  /** Stops listening and polling (tests, hot reload). */
  destroy(): void {
    for (const unlisten of this.unlisteners.splice(0)) unlisten();
    for (const cleanup of this.cleanups.splice(0)) cleanup();
    window.clearTimeout(this.memoryTimer);
  }

  // Model

  private applyModelState(state: ModelState): void {
    const wasReady = this.model.state === "ready";
    this.model = state;
    if (state.state === "ready" || state.state === "downloading" || state.state === "loading") this.setupError = null;
    this.statusBar.setModel(state);
    if (state.state === "ready" && !wasReady) void this.refreshMemory();
    this.renderMain();
  }

  private async chooseFolder(): Promise<void> {
    this.setupBusy = true;
    this.renderMain();
    try {
      this.setupError = null;
      this.applyModelState(await api.chooseModelFolder());
    } catch (error) {
      this.setupError = errorMessage(error);
    } finally {
      this.setupBusy = false;
      this.renderMain();
    }
  }

  private async download(): Promise<void> {
    this.setupBusy = true;
    this.setupError = null;
    this.renderMain();
    try {
      await api.downloadModel();
    } catch (error) {
      this.setupError = errorMessage(error);
    } finally {
      this.setupBusy = false;
      this.renderMain();
    }
  }

  private async cancelDownload(): Promise<void> {
    try {
      await api.cancelDownload();
    } catch (error) {
      this.toasts.show(`Could not cancel the download: ${errorMessage(error)}`);
    }
  }

  private pollMemory(): void {
    const tick = () => {
      if (document.visibilityState !== "hidden") void this.refreshMemory();
      this.memoryTimer = window.setTimeout(tick, MEMORY_POLL_MS);
    };
    tick();
  }

  private async refreshMemory(): Promise<void> {
    try {
      this.statusBar.setMemory(await api.memoryUsage());
    } catch {
      this.statusBar.setMemory(null);
    }
  }

  // Conversations

  private async refreshConversations(): Promise<void> {
    try {
      this.conversations = await api.listConversations();
      this.sidebar.setConversations(this.conversations);
      const open = this.conversations.find((c) => c.id === this.openId);
      if (open) this.chat.setTitle(open.title);
      this.sidebar.setActive(this.openId);
      this.sidebar.setGenerating(this.generations.conversationIds());
    } catch (error) {
      this.toasts.show(`Could not load your chats: ${errorMessage(error)}`);
    }
  }

  private newChat(): void {
    this.viewSerial += 1;
    this.openId = null;
    this.loadingConversation = false;
    this.messages = [];
    if (this.contextFull?.conversationId === null) this.contextFull = null;
    this.sidebar.setActive(null);
    this.renderMain();
    this.composer.focus();
  }

  private async openConversation(id: string, messageId?: string): Promise<void> {
    const serial = ++this.viewSerial;
    this.openId = id;
    this.messages = [];
    this.loadingConversation = true;
    this.sidebar.setActive(id);
    this.renderMain();
    this.chat.setTitle(this.conversations.find((c) => c.id === id)?.title ?? null);
    try {
      const conversation = await api.getConversation(id);
      if (serial !== this.viewSerial) return;
      this.loadingConversation = false;
      this.messages = conversation.messages.map((message) => this.withLiveState(message));
      const last = [...this.messages].reverse().find((message) => message.role === "assistant");
      if (last?.usage?.stopReason === "contextFull" && !this.contextFull)
        this.contextFull = {
          conversationId: id,
          message: "Its last answer was cut off because the context window filled up.",
        };
      this.renderMain();
      this.chat.setTitle(conversation.title);
      if (messageId) this.chat.reveal(messageId);
      else this.chat.scrollToBottom(false);
      this.composer.focus();
    } catch (error) {
      if (serial !== this.viewSerial) return;
      this.loadingConversation = false;
      this.toasts.show(`Could not open the chat: ${errorMessage(error)}`);
      if (error instanceof ApiError && error.kind === "notFound") void this.refreshConversations();
      this.newChat();
    }
  }

  private async rename(conversation: ConversationSummary, title: string): Promise<void> {
    try {
      await api.renameConversation(conversation.id, title);
      this.conversations = this.conversations.map((c) => (c.id === conversation.id ? { ...c, title } : c));
      if (this.openId === conversation.id) this.chat.setTitle(title);
      this.sidebar.refreshSearch();
    } catch (error) {
      this.toasts.show(`Could not rename the chat: ${errorMessage(error)}`);
      throw error;
    }
  }

  private async deleteConversation(conversation: ConversationSummary): Promise<void> {
    const confirmed = await confirmDialog(this.root, {
      title: `Delete “${conversation.title || "New Chat"}”?`,
      message: "Its messages and attached images are removed from this computer. This cannot be undone.",
      confirm: "Delete",
      destructive: true,
      testId: "delete-dialog",
    });
    if (!confirmed) return;
    try {
      await api.deleteConversation(conversation.id);
      this.conversations = this.conversations.filter((c) => c.id !== conversation.id);
      this.sidebar.setConversations(this.conversations);
      this.sidebar.refreshSearch();
      if (this.openId === conversation.id) this.newChat();
    } catch (error) {
      this.toasts.show(`Could not delete the chat: ${errorMessage(error)}`);
    }
  }

  // Sending and generation

  private async send(text: string): Promise<void> {
    if (this.sending || this.generations.current() || this.model.state !== "ready") return;
    const attachments = this.pending;
    const conversationId = this.openId;
    const serial = this.viewSerial;
    const optimistic: Message = {
      id: `${PENDING_PREFIX}message`,
      conversationId: conversationId ?? "",
      position: this.messages.length,
      role: "user",
      text,
      status: "complete",
      error: null,
      usage: null,
      createdAt: Date.now(),
      attachments: attachments.map((attachment) => {
        const id = `${PENDING_PREFIX}${attachment.id}`;
        this.thumbnails.set(id, Promise.resolve(attachment.thumbnail));
        return {
          id,
          hash: "",
          mime: attachment.mime,
          width: attachment.width,
          height: attachment.height,
          byteSize: attachment.byteSize,
          fileName: attachment.name,
        };
      }),
    };
    this.sending = true;
    this.messages = [...this.messages, optimistic];
    this.pending = [];
    this.composer.setText("");
    this.composer.setAttachments([]);
    this.renderChat();
    this.chat.scrollToBottom(false);
    try {
      const sent = await api.sendMessage({ conversationId, text, attachmentIds: attachments.map((a) => a.id) });
      this.accept(sent, serial);
    } catch (error) {
      if (serial === this.viewSerial) this.messages = this.messages.filter((message) => message !== optimistic);
      if (!this.composer.text()) this.composer.setText(text);
      if (this.pending.length === 0) this.pending = attachments;
      this.composer.setAttachments(this.pending);
      this.failed(error, "Could not send the message", conversationId);
    } finally {
      this.sending = false;
      this.renderChat();
      this.composer.focus();
    }
  }

  private async regenerate(): Promise<void> {
    const conversationId = this.openId;
    if (!conversationId || this.generations.current() || this.sending) return;
    const serial = this.viewSerial;
    this.sending = true;
    this.renderChat();
    try {
      this.accept(await api.regenerate(conversationId), serial);
    } catch (error) {
      this.failed(error, "Could not regenerate the answer", conversationId);
    } finally {
      this.sending = false;
      this.renderChat();
    }
  }

  private async edit(message: Message, text: string): Promise<void> {
    const conversationId = this.openId;
    if (!conversationId || this.generations.current() || this.sending) return;
    const serial = this.viewSerial;
    const before = this.messages;
    this.messages = [...this.messages.filter((m) => m.position < message.position), { ...message, text }];
    this.sending = true;
    this.renderChat();
    try {
      this.accept(await api.editMessage(conversationId, message.id, text), serial);
    } catch (error) {
      if (serial === this.viewSerial) this.messages = before;
      this.failed(error, "Could not resend the message", conversationId);
    } finally {
      this.sending = false;
      this.renderChat();
    }
  }

  /** A generation has started: show the user's message and the answer taking shape. */
  private accept(sent: Sent, serial: number): void {
    const live = this.generations.start(sent);
    this.upsertConversation(sent.conversation);
    const stillHere = serial === this.viewSerial && (this.openId === null || this.openId === sent.conversation.id);
    if (stillHere) {
      if (this.contextFull?.conversationId === this.openId) this.contextFull = null;
      this.openId = sent.conversation.id;
      this.sidebar.setActive(this.openId);
      this.chat.setTitle(sent.conversation.title);
      const earlier = this.messages.filter(
        (message) => message.position < sent.userMessage.position && !message.id.startsWith(PENDING_PREFIX),
      );
      this.messages = [...earlier, sent.userMessage, this.answerFor(sent, live)];
      announce("Gemma is answering");
    }
    this.updateGenerating();
    this.renderChat();
  }

  private answerFor(sent: Sent, live: LiveGeneration | null): Message {
    const finished = this.finished.get(sent.assistantMessageId);
    return {
      id: sent.assistantMessageId,
      conversationId: sent.conversation.id,
      position: sent.userMessage.position + 1,
      role: "assistant",
      text: live?.text ?? finished?.text ?? "",
      status: finished?.status ?? "streaming",
      error: finished?.error ?? null,
      usage: finished?.usage ?? null,
      createdAt: Date.now(),
      attachments: [],
    };
  }

  /** A loaded message with what this window knows that the store may not have yet. */
  private withLiveState(message: Message): Message {
    const live = this.generations.forMessage(message.id);
    if (live) return { ...message, text: live.text, status: "streaming" };
    const finished = this.finished.get(message.id);
    return finished ? { ...message, ...finished } : message;
  }

  private async stop(): Promise<void> {
    const live = (this.openId && this.generations.forConversation(this.openId)) || this.generations.current();
    if (!live) return;
    try {
      await api.stopGeneration(live.generationId);
    } catch (error) {
      this.toasts.show(`Could not stop the answer: ${errorMessage(error)}`);
    }
  }

  private onGeneration(event: GenerationEvent): void {
    const live = this.generations.apply(event);
    if (!live) return;
    if (event.type === "delta") {
      if (event.conversationId === this.openId) this.scheduler.mark(event.messageId);
      this.updateGenerating();
      return;
    }
    this.scheduler.flush();
    let answer: FinishedAnswer;
    if (event.type === "done") {
      this.contextWindows.set(event.messageId, event.contextWindow);
      const stopped = event.usage.stopReason === "cancelled";
      answer = { text: live.text, status: stopped ? "stopped" : "complete", usage: event.usage, error: null };
      if (event.usage.stopReason === "contextFull")
        this.contextFull = {
          conversationId: event.conversationId,
          message: `The answer was cut off at ${event.contextWindow.toLocaleString("en-US")} tokens.`,
        };
    } else {
      answer = { text: live.text, status: "error", usage: null, error: event.error.message };
      if (event.error.kind === "contextFull")
        this.contextFull = { conversationId: event.conversationId, message: event.error.message };
    }
    this.remember(event.messageId, answer);
    if (event.conversationId === this.openId) {
      this.messages = this.messages.map((message) =>
        message.id === event.messageId ? { ...message, ...answer } : message,
      );
      announce(
        answer.status === "complete"
          ? "Answer complete"
          : answer.status === "stopped"
            ? "Answer stopped"
            : "The answer failed",
      );
    }
    this.updateGenerating();
    this.renderChat();
    void this.refreshConversations();
  }

  private remember(messageId: string, answer: FinishedAnswer): void {
    this.finished.set(messageId, answer);
    if (this.finished.size > 20) this.finished.delete(this.finished.keys().next().value ?? "");
  }

  private renderStreams(messageIds: string[]): void {
    for (const messageId of messageIds) {
      const live = this.generations.forMessage(messageId);
      if (!live || live.conversationId !== this.openId) continue;
      this.chat.stream(messageId, live.text, live.tokenCount);
    }
  }

  private updateGenerating(): void {
    const ids = this.generations.conversationIds();
    const key = [...ids].sort().join(",");
    if (key === this.generatingKey) return;
    this.generatingKey = key;
    this.sidebar.setGenerating(ids);
    this.renderComposer();
  }

  private upsertConversation(summary: ConversationSummary): void {
    this.conversations = [summary, ...this.conversations.filter((c) => c.id !== summary.id)];
    this.sidebar.setConversations(this.conversations);
    this.sidebar.setActive(this.openId);
  }

  /** Shows an error where it belongs: the context notice for a full context, a toast otherwise. */
  private failed(error: unknown, what: string, conversationId: string | null): void {
    if (error instanceof ApiError && error.kind === "contextFull") {
      this.contextFull = { conversationId, message: error.message };
      this.renderChat();
    } else {
      this.toasts.show(`${what}: ${errorMessage(error)}`);
    }
  }

  // Attachments

  private async pickImages(): Promise<void> {
    try {
      this.addAttachments(await api.pickImages());
    } catch (error) {
      this.toasts.show(`Could not attach the images: ${errorMessage(error)}`);
    }
  }

  private async pasteImages(files: File[]): Promise<void> {
    for (const file of files) {
      try {
        const bytes = new Uint8Array(await file.arrayBuffer());
        this.addAttachments([await api.addPastedImage(bytes, file.name || "pasted-image.png")]);
      } catch (error) {
        this.toasts.show(`Could not paste the image: ${errorMessage(error)}`);
      }
    }
  }

  private addAttachments(attachments: PendingAttachment[]): void {
    if (attachments.length === 0) return;
    this.pending = [...this.pending, ...attachments];
    this.composer.setAttachments(this.pending);
    if (this.model.state === "ready" && !this.model.vision)
      this.toasts.show("This model does not read images; they will be ignored.");
  }

  private removeAttachment(attachment: PendingAttachment): void {
    this.pending = this.pending.filter((a) => a.id !== attachment.id);
    this.composer.setAttachments(this.pending);
    api.removePendingAttachment(attachment.id).catch(() => {});
  }

  private thumbnail(attachment: Attachment): Promise<string> {
    let url = this.thumbnails.get(attachment.id);
    if (!url) {
      url = api.attachmentThumbnail(attachment.id);
      this.thumbnails.set(attachment.id, url);
      url.catch(() => this.thumbnails.delete(attachment.id));
    }
    return url;
  }

  private onDrop(event: api.DropEvent): void {
    if (event.type === "hover") {
      this.dropOverlay.hidden = !event.active;
      return;
    }
    this.dropOverlay.hidden = true;
    this.addAttachments(event.attachments);
    for (const error of event.errors) this.toasts.show(error);
  }

  // Settings

  private async saveSettings(settings: Settings): Promise<Settings> {
    const stored = await api.saveSettings(settings);
    this.settings = stored;
    if (this.contextFull && settings.contextLength > (this.contextWindow() ?? 0)) this.contextFull = null;
    this.renderChat();
    return stored;
  }

  /** The tokens a conversation can hold now: the configured length, within the model's limit. */
  private contextWindow(): number | null {
    const model = this.model.state === "ready" ? this.model.contextWindow : null;
    const configured = this.settings?.contextLength ?? null;
    if (model && configured) return Math.min(model, configured);
    return model ?? configured;
  }

  // Rendering

  private renderMain(): void {
    const showSetup = this.model.state !== "ready" && this.openId === null;
    if (showSetup && this.model.state !== "ready") {
      const focused = document.activeElement instanceof HTMLElement ? document.activeElement.dataset.testid : undefined;
      this.main.replaceChildren(
        setupView(
          this.model,
          {
            modelsDir: this.status?.modelsDir ?? "",
            platform: this.status?.platform ?? "",
            busy: this.setupBusy,
            error: this.setupError,
          },
          {
            download: () => void this.download(),
            cancelDownload: () => void this.cancelDownload(),
            chooseFolder: () => void this.chooseFolder(),
          },
        ),
      );
      this.main.classList.add("centered");
      if (focused) this.main.querySelector<HTMLElement>(`[data-testid="${focused}"]`)?.focus();
    } else {
      this.main.classList.remove("centered");
      if (this.chat.element.parentElement !== this.main) this.main.replaceChildren(this.chat.element);
      if (this.openId === null) this.chat.setTitle(null);
    }
    this.renderChat();
  }

  private renderChat(): void {
    const idle = !this.generations.current() && !this.sending;
    const counts = new Map<string, number>();
    for (const message of this.messages) {
      const live = this.generations.forMessage(message.id);
      if (live) counts.set(message.id, live.tokenCount);
    }
    const windowSize = this.contextWindow();
    this.chat.setMessages(this.messages, {
      idle,
      contextWindow: windowSize,
      tokenCounts: counts,
      loading: this.loadingConversation,
    });
    if (this.model.state === "ready") this.emptyTitle.textContent = `Chat with ${this.model.name}`;
    const notice = this.contextFull && this.contextFull.conversationId === this.openId ? this.contextFull : null;
    this.chat.setNotice(
      notice && {
        message: `${notice.message} Start a new chat, or raise the context length in Settings.`,
        newChat: () => this.newChat(),
        openSettings: () => void this.settingsDialog.open(),
      },
    );
    this.renderComposer();
  }

  private renderComposer(): void {
    const generating = this.generations.current() !== undefined;
    this.composer.setState({
      generating,
      blockedReason: this.blockedReason(),
      vision: this.model.state === "ready" ? this.model.vision : true,
    });
  }

  private blockedReason(): string | null {
    if (this.sending) return "Sending…";
    switch (this.model.state) {
      case "ready":
        return null;
      case "loading":
        return `Loading the model: ${this.model.stage}`;
      case "downloading":
        return "The model is downloading…";
      case "failed":
        return "The model could not be loaded. Start a new chat to fix it.";
      case "none":
        return "No model yet. Start a new chat to download or choose one.";
    }
  }

  // Window-wide behaviour

  private installGlobalHandlers(): void {
    const onKey = (event: KeyboardEvent) => this.onKeyDown(event);
    const onClick = (event: MouseEvent) => this.onLinkClick(event);
    const onContextMenu = (event: MouseEvent) => {
      const target = event.target instanceof Element ? event.target : null;
      const editable = target?.closest("input, textarea, [contenteditable]");
      const selection = window.getSelection();
      if (!editable && (!selection || selection.isCollapsed)) event.preventDefault();
    };
    // A file dropped on the page must never navigate the webview away from the app.
    const onDragOver = (event: DragEvent) => event.preventDefault();
    document.addEventListener("keydown", onKey);
    document.addEventListener("click", onClick, true);
    document.addEventListener("auxclick", onClick, true);
    document.addEventListener("contextmenu", onContextMenu);
    window.addEventListener("dragover", onDragOver);
    window.addEventListener("drop", onDragOver);
    this.cleanups.push(() => {
      document.removeEventListener("keydown", onKey);
      document.removeEventListener("click", onClick, true);
      document.removeEventListener("auxclick", onClick, true);
      document.removeEventListener("contextmenu", onContextMenu);
      window.removeEventListener("dragover", onDragOver);
      window.removeEventListener("drop", onDragOver);
    });
  }

  private onKeyDown(event: KeyboardEvent): void {
    const command = event.metaKey || event.ctrlKey;
    const dialogOpen = this.root.querySelector("dialog[open]") !== null;
    if (command && !event.shiftKey && !event.altKey) {
      const key = event.key.toLowerCase();
      if (key === "n" && !dialogOpen) {
        event.preventDefault();
        this.newChat();
      } else if (key === ",") {
        event.preventDefault();
        void this.settingsDialog.open();
      } else if (key === "f" && !dialogOpen) {
        event.preventDefault();
        this.sidebar.focusSearch();
      }
      return;
    }
    if (event.key === "Escape" && !dialogOpen && !event.defaultPrevented && this.generations.current()) {
      event.preventDefault();
      void this.stop();
    }
  }

  /** Links never navigate the webview: ask, then open http(s) in the system browser. */
  private onLinkClick(event: MouseEvent): void {
    const target = event.target instanceof Element ? event.target : null;
    const link = target?.closest("a[href]");
    if (!link) return;
    event.preventDefault();
    if (event.type === "auxclick" && event.button !== 1) return;
    const url = externalUrl(link.getAttribute("href"));
    if (!url) return;
    void this.confirmOpen(url);
  }

  private async confirmOpen(url: string): Promise<void> {
    const confirmed = await confirmDialog(this.root, {
      title: "Open this link in your browser?",
      message: "The link comes from the model’s answer. Check that it goes where you expect.",
      detail: url,
      confirm: "Open Link",
      testId: "link-dialog",
    });
    if (!confirmed) return;
    try {
      await api.openLink(url);
    } catch (error) {
      this.toasts.show(`Could not open the link: ${errorMessage(error)}`);
    }
  }
}

/** Renders the app into `root` and starts it. */
export async function mountApp(root: HTMLElement): Promise<App> {
  const app = new App(root);
  await app.start();
  return app;
}
