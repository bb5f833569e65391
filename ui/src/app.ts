/**
 * The window: builds the views and the controllers (one per domain, in `controllers/`) and wires
 * them together. The state lives in `state.ts`; data flows one way: a command or an event
 * changes a store, and every view showing it refreshes (`controllers/screen.ts`).
 */
import * as api from "./api";
import type { AppStatus, UnlistenFn } from "./api";
import { errorMessage } from "./api";
import { startRecording } from "./audio/recorder";
import { AttachmentsController } from "./controllers/attachments";
import { ConversationsController } from "./controllers/conversations";
import { GenerationController } from "./controllers/generation";
import { ModelController } from "./controllers/model";
import { emptyChat, ScreenController } from "./controllers/screen";
import { SettingsController } from "./controllers/settings";
import type { Shared } from "./controllers/shared";
import { ShortcutsController } from "./controllers/shortcuts";
import { el } from "./dom";
import { createState } from "./state";
import { Generations } from "./stream";
import { ChatView } from "./views/chat";
import { Composer } from "./views/composer";
import { Sidebar } from "./views/sidebar";
import { startupErrorView } from "./views/startup-error";
import { StatusBar } from "./views/status-bar";
import { readAloud } from "./views/read-aloud";
import { Toasts } from "./views/toasts";

export class App {
  private readonly shared: Shared;
  private readonly unlisteners: UnlistenFn[] = [];
  private readonly statusBar = new StatusBar();
  private readonly sidebar: Sidebar;
  private readonly composer: Composer;
  private readonly chat: ChatView;
  private readonly attachments: AttachmentsController;
  private readonly generation: GenerationController;
  private readonly conversations: ConversationsController;
  private readonly model: ModelController;
  private readonly settings: SettingsController;
  private readonly shortcuts: ShortcutsController;
  private readonly screen: ScreenController;

  constructor(private readonly root: HTMLElement) {
    const shared = { root, state: createState(), generations: new Generations(), toasts: new Toasts() };
    this.shared = shared;
    const attachments = new AttachmentsController(shared);
    this.attachments = attachments;
    this.sidebar = new Sidebar({
      newChat: () => this.conversations.newChat(),
      open: (id, messageId) => void this.conversations.open(id, messageId),
      rename: (conversation, title) => this.conversations.rename(conversation, title),
      pin: (conversation, pinned) => void this.conversations.pin(conversation, pinned),
      delete: (conversation) => void this.conversations.delete(conversation),
      search: (query) => api.searchConversations(query),
      openSettings: () => void this.settings.dialog.open(),
      exportAll: () => void this.conversations.exportAll(),
      importChats: () => void this.conversations.importChats(),
    });
    this.composer = new Composer({
      send: (text) => {
        this.conversations.draftSent();
        void this.generation.send(text);
      },
      stop: () => void this.generation.stop(),
      attach: () => void attachments.pickFiles(),
      pasteFiles: (files) => void attachments.pasteFiles(files),
      pasteFromClipboard: () => void attachments.pasteFromClipboard(),
      removeAttachment: (attachment) => attachments.remove(attachment),
      countTokens: (text, attachments) =>
        api.countTokens(
          text,
          attachments.map((attachment) => attachment.id),
        ),
      edited: () => this.conversations.draftEdited(),
      audioFile: (attachment) => api.pendingAudio(attachment.id),
      record: () => startRecording(),
      recorded: (wav) => void attachments.attachRecording(wav),
      recordingFailed: (message) => shared.toasts.show(message),
      tooLong: (tokens) => this.generation.tooLong(tokens),
    });
    const empty = emptyChat();
    this.chat = new ChatView(
      this.composer.element,
      {
        regenerate: () => void this.generation.regenerate(),
        edit: (message, text) => void this.generation.edit(message, text),
        selectVersion: (message, version) => void this.generation.selectVersion(message, version),
        thumbnail: (attachment) => attachments.thumbnail(attachment),
        audioFile: (attachment) => attachments.audioFile(attachment),
        view: (attachment) => void attachments.viewImage(attachment),
      },
      empty.element,
      {
        exportMarkdown: () => void this.conversations.exportChat("markdown"),
        exportJson: () => void this.conversations.exportChat("json"),
        copyConversation: () => void this.conversations.copy(),
      },
      () => void this.conversations.editSystemPrompt(),
    );
    const views = { sidebar: this.sidebar, composer: this.composer, chat: this.chat, statusBar: this.statusBar };
    this.generation = new GenerationController(shared, views, attachments, () => void this.conversations.refresh());
    this.conversations = new ConversationsController(shared, views, (message) =>
      this.generation.withLiveState(message),
    );
    this.model = new ModelController(shared, this.statusBar, {
      forgotten: () => {
        this.settings.dialog.close();
        this.conversations.newChat();
      },
    });
    this.settings = new SettingsController(shared, this.statusBar, this.model);
    this.shortcuts = new ShortcutsController(shared, {
      newChat: () => this.conversations.newChat(),
      openSettings: () => void this.settings.dialog.open(),
      focusSearch: () => this.sidebar.focusSearch(),
      answering: () => this.generation.openGeneration() !== undefined,
      stop: () => void this.generation.stop(),
      quit: () => void this.conversations.flushDraft().finally(() => void api.quit()),
    });
    this.screen = new ScreenController(shared, views, empty, this.generation, this.model, {
      newChat: () => this.conversations.newChat(),
      openContextLength: () => void this.settings.dialog.open("contextLength"),
    });
    this.screen.follow();
  }

  /** Draws the window, subscribes to backend events and loads the first state. */
  async start(): Promise<void> {
    const { state, toasts } = this.shared;
    const main = this.screen.main;
    this.root.replaceChildren(
      this.sidebar.element,
      el("div", { class: "main-column" }, main, this.statusBar.element),
      this.attachments.dropOverlay,
      toasts.element,
      this.settings.dialog.element,
    );
    this.shortcuts.install();
    try {
      this.unlisteners.push(
        await api.onModelState((model) => this.model.apply(model)),
        await api.onGeneration((event) => this.generation.onGeneration(event)),
        await api.onDrop((event) => this.attachments.onDrop(event)),
        ...(await this.settings.listen()),
      );
      this.unlisteners.push(
        await api.onOpenConversation((id) => {
          void this.conversations.refresh();
          void this.conversations.open(id);
        }),
      );
      await readAloud.start((message) => toasts.show(message));
      this.unlisteners.push(() => readAloud.stopListening());
    } catch (error) {
      toasts.show(`Live updates are unavailable: ${errorMessage(error)}`);
    }

    let status: AppStatus;
    try {
      status = await api.appStatus();
    } catch (error) {
      main.removeAttribute("aria-busy");
      main.replaceChildren(startupErrorView(error));
      return;
    }
    main.removeAttribute("aria-busy");
    state.status.set(status);
    state.settingsLimits.set(status.settingsLimits);
    this.model.apply(status.model);
    void this.conversations.refresh().then(() => this.conversations.restore());
    this.settings.load();
    this.model.pollMemory();
  }

  /** Stops listening and polling (tests, hot reload). */
  destroy(): void {
    for (const unlisten of this.unlisteners.splice(0)) unlisten();
    this.screen.destroy();
    this.shortcuts.destroy();
    this.model.destroy();
  }
}

/** Renders the app into `root` and starts it. */
export async function mountApp(root: HTMLElement): Promise<App> {
  const app = new App(root);
  await app.start();
  return app;
}
