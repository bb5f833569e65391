/**
 * The window: wires commands and backend events to the state (`state.ts`) and the views to it.
 * Data flows one way: a command or an event changes a store; every view showing it refreshes.
 */
import * as api from "./api";
import type {
  AppStatus,
  ContextNeed,
  Attachment,
  ConversationSummary,
  GenerationEvent,
  ImportReport,
  Message,
  ModelState,
  PendingAttachment,
  Sent,
  Settings,
  UnlistenFn,
} from "./api";
import { ApiError, errorMessage } from "./api";
import { startRecording } from "./audio/recorder";
import { copyText } from "./clipboard";
import { el } from "./dom";
import { thisMachine } from "./format";
import { announce } from "./live";
import { externalUrl } from "./markdown/sanitize";
import { createState, type ContextFull } from "./state";
import { watch } from "./store";
import { FrameScheduler, Generations, type LiveGeneration, type StreamProgress } from "./stream";
import { ChatView } from "./views/chat";
import { Composer } from "./views/composer";
import { confirmDialog } from "./views/dialogs";
import { ModelPanel } from "./views/model-settings";
import { FasterPanel } from "./views/faster-answers";
import { LocalApiPanel } from "./views/local-api";
import { SettingsDialog } from "./views/settings";
import { openSystemPromptEditor } from "./views/system-prompt";
import { setupView } from "./views/setup";
import { Sidebar } from "./views/sidebar";
import { startupErrorView } from "./views/startup-error";
import { StatusBar } from "./views/status-bar";
import { Toasts } from "./views/toasts";

const MEMORY_POLL_MS = 3000;
/** Audio files kept in memory after being played. */
const AUDIO_FILES_KEPT = 8;
const PENDING_PREFIX = "pending:";
/** How many finished answers are remembered for command replies that come after the end event. */
const FINISHED_ANSWERS_KEPT = 20;

/** How a finished answer ended, kept for answers whose command reply comes after the end event. */
type FinishedAnswer = Pick<Message, "text" | "status" | "usage" | "error">;
/** A message being written and not sent: its text and attached files. */
type Draft = { text: string; pending: PendingAttachment[] };

export class App {
  private readonly state = createState();
  private readonly generations = new Generations();
  private readonly finished = new Map<string, FinishedAnswer>();
  private readonly thumbnails = new Map<string, Promise<string>>();
  /** Audio files of messages, fetched when first played. */
  private readonly audioFiles = new Map<string, Promise<Blob>>();
  /** The context notice on screen, so an unchanged one is not announced again. */
  private shownNotice: ContextFull | null = null;
  /** What was being written in each chat left for another ("" is the new chat), kept until it is opened again. */
  private readonly drafts = new Map<string, Draft>();
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
  private readonly fasterPanel: FasterPanel;
  private readonly localApiPanel: LocalApiPanel;
  private readonly dropOverlay = el(
    "div",
    { class: "drop-overlay", "data-testid": "drop-overlay", hidden: true, "aria-hidden": "true" },
    el("div", { class: "drop-target" }, el("p", {}, "Drop images or audio to attach them")),
  );
  private readonly emptyTitle = el("h2", { class: "empty-title" }, "How can I help?");
  private readonly emptyNote = el("p", { class: "empty-note" });
  private readonly scheduler = new FrameScheduler<string>((ids) => this.renderStreams(ids));

  constructor(private readonly root: HTMLElement) {
    this.sidebar = new Sidebar({
      newChat: () => this.newChat(),
      open: (id, messageId) => void this.openConversation(id, messageId),
      rename: (conversation, title) => this.rename(conversation, title),
      pin: (conversation, pinned) => void this.pin(conversation, pinned),
      delete: (conversation) => void this.deleteConversation(conversation),
      search: (query) => api.searchConversations(query),
      openSettings: () => void this.settingsDialog.open(),
      exportAll: () => void this.exportAll(),
      importChats: () => void this.importChats(),
    });
    this.composer = new Composer({
      send: (text) => void this.send(text),
      stop: () => void this.stop(),
      attach: () => void this.pickFiles(),
      pasteFiles: (files) => void this.pasteFiles(files),
      pasteFromClipboard: () => void this.pasteFromClipboard(),
      removeAttachment: (attachment) => this.removeAttachment(attachment),
      countTokens: (text) => api.countTokens(text),
      audioFile: (attachment) => api.pendingAudio(attachment.id),
      record: () => startRecording(),
      recorded: (wav) => void this.attachRecording(wav),
      recordingFailed: (message) => this.toasts.show(message),
    });
    this.chat = new ChatView(
      this.composer.element,
      {
        regenerate: () => void this.regenerate(),
        edit: (message, text) => void this.edit(message, text),
        stop: () => void this.stop(),
        selectVersion: (message, version) => void this.selectVersion(message, version),
        thumbnail: (attachment) => this.thumbnail(attachment),
        audioFile: (attachment) => this.audioFile(attachment),
        view: (attachment) => void this.viewImage(attachment),
      },
      el(
        "div",
        { class: "chat-empty" },
        el("div", { class: "mark", "aria-hidden": "true" }, "G"),
        this.emptyTitle,
        this.emptyNote,
      ),
      {
        exportMarkdown: () => void this.exportChat("markdown"),
        exportJson: () => void this.exportChat("json"),
        copyConversation: () => void this.copyConversation(),
      },
      () => void this.editSystemPrompt(),
    );
    const modelPanel = new ModelPanel(
      this.state.model,
      () => this.state.status.get()?.downloads ?? [],
      () => this.generations.current() !== undefined,
      {
        chooseFolder: async () => this.applyModelState(await api.chooseModelFolder()),
        download: (repo) => api.downloadModel(repo),
        cancelDownload: () => api.cancelDownload(),
        forget: () => this.forgetModel(),
      },
    );
    const fasterPanel = new FasterPanel({
      load: () => api.fasterAnswers(),
      set: (on) => api.setFasterAnswers(on),
      download: () => api.downloadDrafter(),
      cancelDownload: () => api.cancelDrafterDownload(),
    });
    this.fasterPanel = fasterPanel;
    const localApiPanel = new LocalApiPanel({
      load: () => api.localApi(),
      set: (change) => api.setLocalApi(change),
      regenerateKey: () => api.regenerateApiKey(),
      log: () => api.apiLog(),
      copy: (text) => copyText(text),
    });
    this.localApiPanel = localApiPanel;
    this.settingsDialog = new SettingsDialog(
      {
        load: () => api.getSettings(),
        save: (settings) => this.saveSettings(settings),
      },
      this.state.settingsLimits,
      {
        element: el("div", {}, modelPanel.element, fasterPanel.element, localApiPanel.element),
        refresh: () => {
          modelPanel.refresh();
          fasterPanel.refresh();
          localApiPanel.refresh();
        },
      },
    );
    this.followState();
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
        await api.onFasterAnswers((state) => this.fasterPanel.show(state)),
        await api.onLocalApi((status) => {
          this.localApiPanel.show(status);
          this.statusBar.setApi(status.running, status.answering);
        }),
        await api.onApiRequest((entry) => this.localApiPanel.logged(entry)),
        await api.onApiActivity(({ answering }) => {
          this.localApiPanel.activity(answering);
          this.statusBar.setApiAnswering(answering);
        }),
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
    this.main.removeAttribute("aria-busy");
    this.state.status.set(status);
    this.state.settingsLimits.set(status.settingsLimits);
    this.applyModelState(status.model);
    void this.refreshConversations();
    api.localApi().then(
      (local) => {
        this.localApiPanel.show(local);
        this.statusBar.setApi(local.running, local.answering);
      },
      () => {},
    );
    api.getSettings().then(
      (settings) => this.state.settings.set(settings),
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

  // The views follow the state

  private followState(): void {
    const { status, model, setup, settings, conversations, chat, sending, pending, generating, contextFull } =
      this.state;
    const stops = [
      status.subscribe((status) => {
        if (!status) return;
        this.sidebar.setVersion(status.version);
        this.sidebar.setPlatform(status.platform);
        const machine = thisMachine(status.platform);
        this.emptyNote.textContent = `Gemma runs entirely on ${machine}. Nothing you write leaves it.`;
      }),
      model.subscribe((model) => this.statusBar.setModel(model)),
      conversations.subscribe((list) => this.sidebar.setConversations(list)),
      chat.subscribe((open, before) => {
        if (open.id !== before.id) this.sidebar.setActive(open.id);
      }),
      generating.subscribe((ids) => this.sidebar.setGenerating(ids)),
      pending.subscribe((attachments) => this.composer.setAttachments(attachments)),
      watch([status, model, setup, chat], () => this.refreshMain()),
      watch([conversations, chat], () => this.refreshTitle()),
      watch([settings, chat], () => this.refreshSystemPrompt()),
      watch([model, settings, chat, sending, generating, contextFull], () => this.refreshChat()),
      watch([contextFull, chat], () => this.refreshNotice()),
      watch([model, settings, sending, generating, chat], () => this.refreshComposer()),
    ];
    this.cleanups.push(() => {
      for (const stop of stops) stop();
    });
  }

  /** The first-run screen until a model is ready or a chat is open; the chat otherwise. */
  private refreshMain(): void {
    const status = this.state.status.get();
    if (!status) return; // still starting, or the start failed and says so
    const model = this.state.model.get();
    if (model.state !== "ready" && this.state.chat.get().id === null) {
      const focused = document.activeElement instanceof HTMLElement ? document.activeElement.dataset.testid : undefined;
      const { busy, error } = this.state.setup.get();
      this.main.replaceChildren(
        setupView(
          model,
          { modelsDir: status.modelsDir, platform: status.platform, busy, error },
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
    }
  }

  private refreshTitle(): void {
    const open = this.state.chat.get();
    const listed = open.id === null ? undefined : this.state.conversations.get().find((c) => c.id === open.id);
    this.chat.setTitle(listed?.title ?? open.title);
    this.chat.setMenuEnabled(open.id !== null);
  }

  private refreshChat(): void {
    const open = this.state.chat.get();
    const model = this.state.model.get();
    const idle = !this.generations.current() && !this.state.sending.get();
    const progress = new Map<string, StreamProgress>();
    for (const message of open.messages) {
      const live = this.generations.forMessage(message.id);
      if (live) progress.set(message.id, { tokenCount: live.tokenCount, reading: live.reading });
    }
    const full = this.state.contextFull.get();
    this.chat.setMessages(open.messages, {
      idle,
      noticeShown: full !== null && full.conversationId === open.id,
      contextWindow: this.contextWindow(),
      audioHeardMs: this.state.settingsLimits.get()?.audioHeardMs ?? null,
      progress,
      loading: open.loading,
    });
    if (model.state === "ready") this.emptyTitle.textContent = `Chat with ${model.name}`;
  }

  private refreshNotice(): void {
    const full = this.state.contextFull.get();
    const notice = full && full.conversationId === this.state.chat.get().id ? full : null;
    if (notice === this.shownNotice) return;
    this.shownNotice = notice;
    this.chat.setNotice(
      notice && {
        ...contextNoticeText(notice),
        newChat: notice.reason === "message" ? null : () => this.newChat(),
        openSettings: () => void this.settingsDialog.open("contextLength"),
      },
    );
  }

  private refreshComposer(): void {
    const model = this.state.model.get();
    this.composer.setState({
      generating: this.openGeneration() !== undefined,
      blockedReason: this.blockedReason(),
      vision: model.state === "ready" ? model.vision : true,
      audio: model.state === "ready" ? model.audio : true,
      room: this.contextRoom(),
    });
  }

  private refreshSystemPrompt(): void {
    this.chat.setSystemPrompt(this.state.chat.get().systemPrompt, this.state.settings.get()?.systemPrompt ?? "");
  }

  /** Tokens the open chat can still take: the context window less what its last answer left in it. */
  private contextRoom(): number | null {
    const window = this.contextWindow();
    if (this.state.model.get().state !== "ready" || window === null) return null;
    const last = [...this.state.chat.get().messages].reverse().find((message) => message.usage);
    const used = last?.usage ? last.usage.promptTokens + last.usage.generatedTokens : 0;
    return window - used;
  }

  /** Opens the open chat's system prompt editor; a new chat keeps the choice until it is sent. */
  private async editSystemPrompt(): Promise<void> {
    const { chat } = this.state;
    const { id, serial, systemPrompt } = chat.get();
    await openSystemPromptEditor(this.root, {
      own: systemPrompt,
      defaultPrompt: this.state.settings.get()?.systemPrompt ?? "",
      maxChars: this.state.settingsLimits.get()?.systemPromptChars ?? Number.POSITIVE_INFINITY,
      save: async (prompt) => {
        if (id !== null) await api.setSystemPrompt(id, prompt);
        if (chat.get().serial === serial) chat.patch({ systemPrompt: prompt });
      },
    });
  }

  /** The answer being written in the open chat, if any. */
  private openGeneration() {
    const openId = this.state.chat.get().id;
    return openId === null ? undefined : this.generations.forConversation(openId);
  }

  private blockedReason(): string | null {
    if (this.state.sending.get()) return "Sending…";
    const model = this.state.model.get();
    const elsewhere = this.generations.current();
    switch (model.state) {
      case "ready":
        if (elsewhere && !this.openGeneration()) {
          const title = this.state.conversations.get().find((c) => c.id === elsewhere.conversationId)?.title;
          return `Another chat${title ? ` (“${title}”)` : ""} is answering: send once it is done, or stop it there.`;
        }
        return null;
      case "loading":
        return `Loading the model: ${model.stage}`;
      case "downloading":
        return "The model is downloading…";
      case "failed":
        return "The model could not be loaded. Start a new chat to fix it.";
      case "none":
        return "No model yet. Start a new chat to download or choose one.";
    }
  }

  /** The tokens a conversation can hold now: the configured length, within the model's limit. */
  private contextWindow(): number | null {
    const model = this.state.model.get();
    const limit = model.state === "ready" ? model.contextWindow : null;
    const configured = this.state.settings.get()?.contextLength ?? null;
    if (limit && configured) return Math.min(limit, configured);
    return limit ?? configured;
  }

  // Model

  private applyModelState(state: ModelState): void {
    const wasReady = this.state.model.get().state === "ready";
    this.state.model.set(state);
    if (state.state === "ready" || state.state === "downloading" || state.state === "loading")
      this.state.setup.patch({ error: null });
    if (state.state === "ready" && !wasReady) void this.refreshMemory();
  }

  private async chooseFolder(): Promise<void> {
    this.state.setup.patch({ busy: true, error: null });
    try {
      this.applyModelState(await api.chooseModelFolder());
    } catch (error) {
      this.state.setup.patch({ error: errorMessage(error) });
    } finally {
      this.state.setup.patch({ busy: false });
    }
  }

  /** Unloads the model and goes back to the model picker, on a new chat. */
  private async forgetModel(): Promise<void> {
    this.applyModelState(await api.forgetModel());
    this.settingsDialog.close();
    this.newChat();
  }

  private async download(): Promise<void> {
    this.state.setup.patch({ busy: true, error: null });
    try {
      await api.downloadModel();
    } catch (error) {
      this.state.setup.patch({ error: errorMessage(error) });
    } finally {
      this.state.setup.patch({ busy: false });
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
      this.state.conversations.set(await api.listConversations());
    } catch (error) {
      this.toasts.show(`Could not load your chats: ${errorMessage(error)}`);
    }
  }

  /** Keeps the composer's text and images with the chat being left, and brings back those of `next`. */
  private switchDraft(next: string | null): void {
    const current = this.state.chat.get().id;
    if (current === next) return;
    const text = this.composer.text();
    const pending = this.state.pending.get();
    if (text.trim() || pending.length > 0) this.drafts.set(current ?? "", { text, pending });
    else this.drafts.delete(current ?? "");
    const draft = this.drafts.get(next ?? "");
    this.drafts.delete(next ?? "");
    this.composer.setText(draft?.text ?? "");
    this.state.pending.set(draft?.pending ?? []);
  }

  private newChat(): void {
    if (this.state.contextFull.get()?.conversationId === null) this.state.contextFull.set(null);
    this.switchDraft(null);
    const serial = this.state.chat.get().serial + 1;
    this.state.chat.set({ id: null, messages: [], loading: false, title: null, serial, systemPrompt: null });
    this.composer.focus();
  }

  private async openConversation(id: string, messageId?: string): Promise<void> {
    this.switchDraft(id);
    const chat = this.state.chat;
    const serial = chat.get().serial + 1;
    const title = this.state.conversations.get().find((c) => c.id === id)?.title ?? null;
    chat.set({ id, messages: [], loading: true, title, serial, systemPrompt: null });
    try {
      const conversation = messageId ? await api.openMessage(id, messageId) : await api.getConversation(id);
      if (serial !== chat.get().serial) return;
      const messages = conversation.messages.map((message) => this.withLiveState(message));
      const last = [...messages].reverse().find((message) => message.role === "assistant");
      if (last?.usage?.stopReason === "contextFull" && !this.state.contextFull.get())
        this.state.contextFull.set({ conversationId: id, reason: "cutOff", needed: null, window: null });
      chat.patch({ messages, loading: false, title: conversation.title, systemPrompt: conversation.systemPrompt });
      if (messageId) this.chat.reveal(messageId);
      else this.chat.scrollToBottom(false);
      this.composer.focus();
    } catch (error) {
      if (serial !== chat.get().serial) return;
      chat.patch({ loading: false });
      this.toasts.show(`Could not open the chat: ${errorMessage(error)}`);
      if (error instanceof ApiError && error.kind === "notFound") void this.refreshConversations();
      this.newChat();
    }
  }

  private async rename(conversation: ConversationSummary, title: string): Promise<void> {
    try {
      await api.renameConversation(conversation.id, title);
      this.state.conversations.update((list) => list.map((c) => (c.id === conversation.id ? { ...c, title } : c)));
      this.sidebar.refreshSearch();
    } catch (error) {
      this.toasts.show(`Could not rename the chat: ${errorMessage(error)}`);
      throw error;
    }
  }

  private async pin(conversation: ConversationSummary, pinned: boolean): Promise<void> {
    try {
      await api.setPinned(conversation.id, pinned);
      this.state.conversations.update((list) => list.map((c) => (c.id === conversation.id ? { ...c, pinned } : c)));
    } catch (error) {
      this.toasts.show(`Could not ${pinned ? "pin" : "unpin"} the chat: ${errorMessage(error)}`);
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
      this.state.conversations.update((list) => list.filter((c) => c.id !== conversation.id));
      this.sidebar.refreshSearch();
      if (this.state.chat.get().id === conversation.id) this.newChat();
    } catch (error) {
      this.toasts.show(`Could not delete the chat: ${errorMessage(error)}`);
    }
  }

  /** Shows an attached image full size in a dialog; Esc, Close or a click outside it closes it. */
  private async viewImage(attachment: Attachment): Promise<void> {
    const image = el("img", { class: "image-viewer-image", alt: attachment.fileName || "Attached image" });
    const close = el("button", { type: "button", "data-testid": "image-viewer-close" }, "Close");
    const dialog = el(
      "dialog",
      { class: "image-viewer", "aria-label": "Attached image", "data-testid": "image-viewer" },
      image,
      el("div", { class: "dialog-actions" }, close),
    );
    close.addEventListener("click", () => dialog.close());
    dialog.addEventListener("click", (event) => {
      if (event.target === dialog) dialog.close();
    });
    dialog.addEventListener("close", () => dialog.remove());
    this.root.append(dialog);
    dialog.showModal();
    close.focus();
    try {
      image.src = await api.attachmentView(attachment.id);
    } catch (error) {
      dialog.close();
      this.toasts.show(`Could not show the image: ${errorMessage(error)}`);
    }
  }

  // Sending and generation

  private async send(text: string): Promise<void> {
    const { chat, pending, sending } = this.state;
    if (sending.get() || this.generations.current() || this.state.model.get().state !== "ready") return;
    const attachments = pending.get();
    const { id: conversationId, serial, messages, systemPrompt } = chat.get();
    const optimistic: Message = {
      id: `${PENDING_PREFIX}message`,
      conversationId: conversationId ?? "",
      position: messages.length,
      version: 1,
      versions: 1,
      role: "user",
      text,
      status: "complete",
      error: null,
      usage: null,
      createdAt: Date.now(),
      attachments: attachments.map((attachment) => {
        const id = `${PENDING_PREFIX}${attachment.id}`;
        if (attachment.thumbnail !== null) this.thumbnails.set(id, Promise.resolve(attachment.thumbnail));
        return {
          id,
          hash: "",
          kind: attachment.kind,
          mime: attachment.mime,
          width: attachment.width,
          height: attachment.height,
          durationMs: attachment.durationMs,
          byteSize: attachment.byteSize,
          fileName: attachment.name,
          name: attachment.name,
        };
      }),
    };
    sending.set(true);
    this.clearNotice(conversationId);
    chat.patch({ messages: [...messages, optimistic] });
    pending.set([]);
    this.composer.setText("");
    this.chat.scrollToBottom(false);
    try {
      const request: api.SendRequest = { conversationId, text, attachmentIds: attachments.map((a) => a.id) };
      // A new chat takes the prompt chosen for it; a saved one already has its own.
      if (conversationId === null && systemPrompt !== null) request.systemPrompt = systemPrompt;
      const sent = await api.sendMessage(request);
      this.accept(sent, serial);
    } catch (error) {
      if (serial === chat.get().serial)
        chat.update((open) => ({ ...open, messages: open.messages.filter((message) => message !== optimistic) }));
      if (!this.composer.text()) this.composer.setText(text);
      if (pending.get().length === 0) pending.set(attachments);
      this.failed(error, "Could not send the message", conversationId);
    } finally {
      sending.set(false);
      this.composer.focus();
    }
  }

  private async regenerate(): Promise<void> {
    const { id: conversationId, serial } = this.state.chat.get();
    if (!conversationId || this.generations.current() || this.state.sending.get()) return;
    this.state.sending.set(true);
    this.clearNotice(conversationId);
    try {
      this.accept(await api.regenerate(conversationId), serial);
    } catch (error) {
      this.failed(error, "Could not regenerate the answer", conversationId);
    } finally {
      this.state.sending.set(false);
    }
  }

  private async edit(message: Message, text: string): Promise<void> {
    const { chat, sending } = this.state;
    const { id: conversationId, serial, messages: before } = chat.get();
    if (!conversationId || this.generations.current() || sending.get()) return;
    chat.patch({ messages: [...before.filter((m) => m.position < message.position), { ...message, text }] });
    sending.set(true);
    this.clearNotice(conversationId);
    try {
      this.accept(await api.editMessage(conversationId, message.id, text), serial);
    } catch (error) {
      if (serial === chat.get().serial) chat.patch({ messages: before });
      this.failed(error, "Could not resend the message", conversationId);
    } finally {
      sending.set(false);
    }
  }

  /** Saves the open chat as Markdown or JSON where the person picks. */
  private async exportChat(format: "markdown" | "json"): Promise<void> {
    const id = this.state.chat.get().id;
    if (!id) return;
    try {
      const path = format === "markdown" ? await api.exportMarkdown(id) : await api.exportJson(id);
      if (path) this.toasts.show(`Exported to ${path}`);
    } catch (error) {
      this.toasts.show(`Could not export the chat: ${errorMessage(error)}`);
    }
  }

  /** Copies the open chat (the versions shown) to the clipboard as Markdown. */
  private async copyConversation(): Promise<void> {
    const id = this.state.chat.get().id;
    if (!id) return;
    try {
      const ok = await copyText(await api.conversationMarkdown(id));
      this.toasts.show(ok ? "Conversation copied as Markdown" : "Could not copy the conversation");
    } catch (error) {
      this.toasts.show(`Could not copy the conversation: ${errorMessage(error)}`);
    }
  }

  /** Saves every chat as one JSON file. */
  private async exportAll(): Promise<void> {
    try {
      const path = await api.exportJson(null);
      if (path) this.toasts.show(`Every chat exported to ${path}`);
    } catch (error) {
      this.toasts.show(`Could not export the chats: ${errorMessage(error)}`);
    }
  }

  /** Imports a JSON export and says what it added and what it skipped. */
  private async importChats(): Promise<void> {
    try {
      const { report } = await api.importJson();
      if (!report) return;
      this.toasts.show(importSummary(report));
      await this.refreshConversations();
      const open = this.state.chat.get().id;
      if (open && report.messagesAdded > 0) void this.openConversation(open);
    } catch (error) {
      this.toasts.show(`Could not import: ${errorMessage(error)}`);
    }
  }

  /** Shows another version of a turn, with what followed it. */
  private async selectVersion(message: Message, version: number): Promise<void> {
    const { chat } = this.state;
    const { id: conversationId, serial } = chat.get();
    if (!conversationId || this.generations.current() || this.state.sending.get()) return;
    try {
      const conversation = await api.selectVersion(conversationId, message.id, version);
      if (serial !== chat.get().serial) return;
      chat.patch({ messages: conversation.messages.map((m) => this.withLiveState(m)) });
      announce(`Version ${version} of ${message.versions}`);
    } catch (error) {
      this.failed(error, "Could not show that version", conversationId);
    }
  }

  /**
   * Takes down the context notice of `conversationId` as a new answer is asked for — before the
   * command, so that a failure arriving (as an event) before its reply is shown, not cleared.
   */
  private clearNotice(conversationId: string | null): void {
    if (this.state.contextFull.get()?.conversationId === conversationId) this.state.contextFull.set(null);
  }

  /** A generation has started: show the user's message and the answer taking shape. */
  private accept(sent: Sent, serial: number): void {
    const live = this.generations.start(sent);
    this.upsertConversation(sent.conversation);
    const open = this.state.chat.get();
    const stillHere = serial === open.serial && (open.id === null || open.id === sent.conversation.id);
    if (stillHere) {
      const earlier = open.messages.filter(
        (message) => message.position < sent.userMessage.position && !message.id.startsWith(PENDING_PREFIX),
      );
      this.state.chat.patch({
        id: sent.conversation.id,
        title: sent.conversation.title,
        messages: [...earlier, sent.userMessage, this.answerFor(sent, live, this.replacedAnswer(open.messages, sent))],
      });
      announce("Gemma is answering");
    }
    this.updateGenerating();
  }

  /** For a regenerated answer: the answer it is a new version of (shown until now). */
  private replacedAnswer(shown: Message[], sent: Sent): Message | undefined {
    const question = shown[sent.userMessage.position];
    if (question?.id !== sent.userMessage.id) return undefined;
    const answer = shown[sent.userMessage.position + 1];
    return answer?.role === "assistant" ? answer : undefined;
  }

  private answerFor(sent: Sent, live: LiveGeneration | null, replaced?: Message): Message {
    const finished = this.finished.get(sent.assistantMessageId);
    const versions = (replaced?.versions ?? 0) + 1;
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
      version: versions,
      versions,
    };
  }

  /** A loaded message with what this window knows that the store may not have yet. */
  private withLiveState(message: Message): Message {
    const live = this.generations.forMessage(message.id);
    if (live) return { ...message, text: live.text, status: "streaming" };
    const finished = this.finished.get(message.id);
    return finished ? { ...message, ...finished } : message;
  }

  /** Stops the answer on screen (an answer in another chat is stopped there). */
  private async stop(): Promise<void> {
    const live = this.openGeneration();
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
    const isOpen = event.conversationId === this.state.chat.get().id;
    if (event.type === "delta" || event.type === "prefill") {
      if (isOpen) this.scheduler.mark(event.messageId);
      this.updateGenerating();
      return;
    }
    this.scheduler.flush();
    let answer: FinishedAnswer;
    if (event.type === "done") {
      const stopped = event.usage.stopReason === "cancelled";
      answer = { text: live.text, status: stopped ? "stopped" : "complete", usage: event.usage, error: null };
      if (event.usage.stopReason === "contextFull")
        this.state.contextFull.set({
          conversationId: event.conversationId,
          reason: "cutOff",
          needed: null,
          window: event.contextWindow,
        });
    } else {
      answer = { text: live.text, status: "error", usage: null, error: event.error.message };
      if (event.error.kind === "contextFull")
        this.state.contextFull.set(contextFullOf(event.conversationId, event.error.context ?? null));
    }
    this.remember(event.messageId, answer);
    if (isOpen) {
      this.state.chat.update((open) => ({
        ...open,
        messages: open.messages.map((message) =>
          message.id === event.messageId ? { ...message, ...answer } : message,
        ),
      }));
      announce(
        answer.status === "complete"
          ? "Answer complete"
          : answer.status === "stopped"
            ? "Answer stopped"
            : "The answer failed",
      );
    }
    this.updateGenerating();
    void this.refreshConversations();
  }

  private remember(messageId: string, answer: FinishedAnswer): void {
    this.finished.set(messageId, answer);
    if (this.finished.size > FINISHED_ANSWERS_KEPT) this.finished.delete(this.finished.keys().next().value ?? "");
  }

  private renderStreams(messageIds: string[]): void {
    const openId = this.state.chat.get().id;
    for (const messageId of messageIds) {
      const live = this.generations.forMessage(messageId);
      if (!live || live.conversationId !== openId) continue;
      this.chat.stream(messageId, live.text, { tokenCount: live.tokenCount, reading: live.reading });
    }
  }

  private updateGenerating(): void {
    this.state.generating.set(this.generations.conversationIds());
  }

  private upsertConversation(summary: ConversationSummary): void {
    this.state.conversations.update((list) => [summary, ...list.filter((c) => c.id !== summary.id)]);
  }

  /** Shows an error where it belongs: the context notice for a full context, a toast otherwise. */
  private failed(error: unknown, what: string, conversationId: string | null): void {
    if (error instanceof ApiError && error.kind === "contextFull")
      this.state.contextFull.set(contextFullOf(conversationId, error.context));
    else this.toasts.show(`${what}: ${errorMessage(error)}`);
  }

  // Attachments

  private async pickFiles(): Promise<void> {
    try {
      this.addAttachments(await api.pickFiles());
    } catch (error) {
      this.toasts.show(`Could not attach the files: ${errorMessage(error)}`);
    }
  }

  private async pasteFiles(files: File[]): Promise<void> {
    for (const file of files) {
      const audio = file.type.startsWith("audio/");
      try {
        const bytes = new Uint8Array(await file.arrayBuffer());
        const name = file.name || (audio ? "pasted audio" : "pasted-image.png");
        this.addAttachments([await api.addPastedFile(bytes, name)]);
      } catch (error) {
        this.toasts.show(`Could not paste the ${audio ? "audio" : "image"}: ${errorMessage(error)}`);
      }
    }
  }

  /** A recording from the microphone, attached like a dropped WAV file. */
  private async attachRecording(wav: Uint8Array): Promise<void> {
    const now = new Date();
    const time = `${String(now.getHours()).padStart(2, "0")}.${String(now.getMinutes()).padStart(2, "0")}`;
    try {
      this.addAttachments([await api.addPastedFile(wav, `Recording ${time}.wav`)]);
    } catch (error) {
      this.toasts.show(`Could not attach the recording: ${errorMessage(error)}`);
    }
  }

  /** A paste the webview gave no file or text for: the image on the OS clipboard, if any. */
  private async pasteFromClipboard(): Promise<void> {
    try {
      const attachment = await api.pasteClipboardImage();
      if (attachment) this.addAttachments([attachment]);
      else this.toasts.show("Nothing to paste: the clipboard holds neither text nor an image.");
    } catch (error) {
      this.toasts.show(`Could not paste the image: ${errorMessage(error)}`);
    }
  }

  private addAttachments(attachments: PendingAttachment[]): void {
    if (attachments.length === 0) return;
    this.state.pending.update((pending) => [...pending, ...attachments]);
    const model = this.state.model.get();
    if (model.state !== "ready") return;
    if (!model.vision && attachments.some((a) => a.kind === "image"))
      this.toasts.show("This model does not read images; remove them to send.");
    if (!model.audio && attachments.some((a) => a.kind === "audio"))
      this.toasts.show("This model does not hear audio; remove it to send.");
  }

  private removeAttachment(attachment: PendingAttachment): void {
    this.state.pending.update((pending) => pending.filter((a) => a.id !== attachment.id));
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

  private audioFile(attachment: Attachment): Promise<Blob> {
    let file = this.audioFiles.get(attachment.id);
    if (!file) {
      // Each is a whole file in memory: keep the few played last.
      const oldest = this.audioFiles.keys().next();
      if (this.audioFiles.size >= AUDIO_FILES_KEPT && !oldest.done) this.audioFiles.delete(oldest.value);
      // A message still being sent plays its file from the composer's.
      file = attachment.id.startsWith(PENDING_PREFIX)
        ? api.pendingAudio(attachment.id.slice(PENDING_PREFIX.length))
        : api.attachmentAudio(attachment.id);
      this.audioFiles.set(attachment.id, file);
      file.catch(() => this.audioFiles.delete(attachment.id));
    }
    return file;
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
    const before = this.contextWindow() ?? 0;
    const stored = await api.saveSettings(settings);
    this.state.settings.set(stored);
    const full = this.state.contextFull.get();
    const now = this.contextWindow() ?? 0;
    // The notice goes once the window grew past the one it was about, or holds what it needed.
    if (full && (now > (full.window ?? before) || (full.needed !== null && full.needed < now)))
      this.state.contextFull.set(null);
    return stored;
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
    if (event.key === "Escape" && !dialogOpen && !event.defaultPrevented && this.openGeneration()) {
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

/** The context notice's state for a `contextFull` error of `conversationId`. */
function contextFullOf(conversationId: string | null, need: ContextNeed | null): ContextFull {
  return {
    conversationId,
    reason: need?.alone ? "message" : "conversation",
    needed: need?.needed ?? null,
    window: need?.window ?? null,
  };
}

/** One wording per case, numbers grouped; advice only for what helps. */
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

export function contextNoticeText(full: ContextFull): { title: string; detail: string } {
  const n = (value: number) => value.toLocaleString("en-US");
  const holds = full.window === null ? null : `The context window holds ${n(full.window)} tokens.`;
  const sentences = (...parts: (string | null)[]) => parts.filter((p) => p !== null).join(" ");
  switch (full.reason) {
    case "message":
      return {
        title: "This message is too long for the context window.",
        detail: sentences(
          full.needed === null ? null : `It is ${n(full.needed)} tokens on its own.`,
          holds,
          "Shorten it, or raise the context length.",
        ),
      };
    case "conversation":
      return {
        title: "This conversation no longer fits in the context window.",
        detail: sentences(
          full.needed === null ? null : `It needs ${n(full.needed)} tokens.`,
          holds,
          "Start a new chat, or raise the context length.",
        ),
      };
    case "cutOff":
      return {
        title: "The answer was cut off: the context window is full.",
        detail: sentences(
          full.window === null
            ? "The conversation filled the context window."
            : `The conversation reached ${n(full.window)} tokens.`,
          "Start a new chat, or raise the context length.",
        ),
      };
  }
}
