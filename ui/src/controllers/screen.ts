/** The views follow the state: data flows one way, a command or an event changes a store and every view showing it refreshes. */
import { el } from "../dom";
import { thisMachine } from "../format";
import type { ContextFull } from "../state";
import { watch } from "../store";
import type { StreamProgress } from "../stream";
import type { ChatView } from "../views/chat";
import type { Composer } from "../views/composer";
import { setupView } from "../views/setup";
import type { Sidebar } from "../views/sidebar";
import type { StatusBar } from "../views/status-bar";
import type { GenerationController } from "./generation";
import type { ModelController } from "./model";
import { contextNoticeText, contextRoom, contextWindow, type Shared } from "./shared";

export interface ScreenViews {
  sidebar: Sidebar;
  composer: Composer;
  chat: ChatView;
  statusBar: StatusBar;
}

export interface ScreenActions {
  newChat(): void;
  openContextLength(): void;
}

/** What an empty chat shows: its title names the model once one is loaded. */
export function emptyChat(): { element: HTMLElement; title: HTMLElement; note: HTMLElement } {
  const title = el("h2", { class: "empty-title" }, "How can I help?");
  const note = el("p", { class: "empty-note" });
  const element = el(
    "div",
    { class: "chat-empty" },
    el("div", { class: "mark", "aria-hidden": "true" }, "G"),
    title,
    note,
  );
  return { element, title, note };
}

export class ScreenController {
  /** The first-run screen, or the chat. */
  readonly main = el("main", { class: "content", "aria-busy": "true" }, el("p", { class: "loading" }, "Loading…"));
  /** The context notice on screen, so an unchanged one is not announced again. */
  private shownNotice: ContextFull | null = null;
  private readonly stops: (() => void)[] = [];

  constructor(
    private readonly shared: Shared,
    private readonly views: ScreenViews,
    private readonly empty: { title: HTMLElement; note: HTMLElement },
    private readonly generation: GenerationController,
    private readonly model: ModelController,
    private readonly actions: ScreenActions,
  ) {}

  follow(): void {
    const { status, model, setup, settings, conversations, chat, sending, pending, generating, contextFull } =
      this.shared.state;
    const { sidebar, composer, statusBar } = this.views;
    this.stops.push(
      status.subscribe((status) => {
        if (!status) return;
        sidebar.setVersion(status.version);
        sidebar.setPlatform(status.platform);
        const machine = thisMachine(status.platform);
        this.empty.note.textContent = `Gemma runs entirely on ${machine}. Nothing you write leaves it.`;
      }),
      model.subscribe((model) => statusBar.setModel(model)),
      conversations.subscribe((list) => sidebar.setConversations(list)),
      chat.subscribe((open, before) => {
        if (open.id !== before.id) sidebar.setActive(open.id);
      }),
      generating.subscribe((ids) => sidebar.setGenerating(ids)),
      pending.subscribe((attachments) => composer.setAttachments(attachments)),
      watch([status, model, setup, chat, this.shared.state.recentModels], () => this.refreshMain()),
      watch([conversations, chat], () => this.refreshTitle()),
      watch([settings, chat], () => this.refreshSystemPrompt()),
      watch([model, settings, chat, sending, generating, contextFull], () => this.refreshChat()),
      watch([contextFull, chat], () => this.refreshNotice()),
      watch([model, settings, sending, generating, chat], () => this.refreshComposer()),
    );
  }

  destroy(): void {
    for (const stop of this.stops.splice(0)) stop();
  }

  /** The first-run screen until a model is ready or a chat is open; the chat otherwise. */
  private refreshMain(): void {
    const { state } = this.shared;
    const status = state.status.get();
    if (!status) return; // still starting, or the start failed and says so
    const model = state.model.get();
    if (model.state !== "ready" && state.chat.get().id === null) {
      const focused = document.activeElement instanceof HTMLElement ? document.activeElement.dataset.testid : undefined;
      const { busy, error } = state.setup.get();
      this.main.replaceChildren(
        setupView(
          model,
          { modelsDir: status.modelsDir, platform: status.platform, busy, error, recent: state.recentModels.get() },
          {
            download: () => void this.model.download(),
            cancelDownload: () => void this.model.cancelDownload(),
            chooseFolder: () => void this.model.chooseFolder(),
            openRecent: (dir) => void this.model.openRecent(dir),
          },
        ),
      );
      this.main.classList.add("centered");
      if (focused) this.main.querySelector<HTMLElement>(`[data-testid="${focused}"]`)?.focus();
    } else {
      this.main.classList.remove("centered");
      if (this.views.chat.element.parentElement !== this.main) this.main.replaceChildren(this.views.chat.element);
    }
  }

  private refreshTitle(): void {
    const { state } = this.shared;
    const open = state.chat.get();
    const listed = open.id === null ? undefined : state.conversations.get().find((c) => c.id === open.id);
    this.views.chat.setTitle(listed?.title ?? open.title);
    this.views.chat.setMenuEnabled(open.id !== null);
  }

  private refreshChat(): void {
    const { state, generations } = this.shared;
    const open = state.chat.get();
    const model = state.model.get();
    const idle = !generations.current() && !state.sending.get();
    const progress = new Map<string, StreamProgress>();
    for (const message of open.messages) {
      const live = generations.forMessage(message.id);
      if (live) progress.set(message.id, { tokenCount: live.tokenCount, reading: live.reading });
    }
    const full = state.contextFull.get();
    this.views.chat.setMessages(open.messages, {
      idle,
      noticeShown: full !== null && full.conversationId === open.id,
      contextWindow: contextWindow(state),
      audioHeardMs: state.settingsLimits.get()?.audioHeardMs ?? null,
      progress,
      loading: open.loading,
    });
    if (model.state === "ready") this.empty.title.textContent = `Chat with ${model.name}`;
  }

  private refreshNotice(): void {
    const { state } = this.shared;
    const full = state.contextFull.get();
    const notice = full && full.conversationId === state.chat.get().id ? full : null;
    if (notice === this.shownNotice) return;
    this.shownNotice = notice;
    this.views.chat.setNotice(
      notice && {
        ...contextNoticeText(notice),
        newChat: notice.reason === "message" ? null : () => this.actions.newChat(),
        openSettings: () => this.actions.openContextLength(),
      },
    );
  }

  private refreshComposer(): void {
    const { state } = this.shared;
    const model = state.model.get();
    this.views.composer.setState({
      generating: this.generation.openGeneration() !== undefined,
      blockedReason: this.generation.blockedReason(),
      vision: model.state === "ready" ? model.vision : true,
      audio: model.state === "ready" ? model.audio : true,
      room: contextRoom(state),
    });
  }

  private refreshSystemPrompt(): void {
    const { state } = this.shared;
    this.views.chat.setSystemPrompt(state.chat.get().systemPrompt, state.settings.get()?.systemPrompt ?? "");
  }
}
