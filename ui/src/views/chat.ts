/** The open conversation: its title, messages, the context notice and the composer. */
import type { Message } from "../api";
import { el } from "../dom";
import { icon } from "../icons";
import { ChatMenu, type ChatMenuActions } from "./chat-menu";
import { MessageView, type MessageActions, type MessageFlags } from "./message";
import { describeSystemPrompt } from "./system-prompt";
import type { StreamProgress } from "../stream";

const NO_PROGRESS: StreamProgress = { tokenCount: 0, reading: null };

export interface ChatContext {
  /** No answer is being generated anywhere. */
  idle: boolean;
  contextWindow: number | null;
  /** How much of a recording the model hears, in ms (null: not known yet). */
  audioHeardMs: number | null;
  /** The context notice is shown for this conversation (it says why the last answer failed). */
  noticeShown: boolean;
  /** Where each streaming answer stands, by message id. */
  progress: Map<string, StreamProgress>;
  /** The conversation's messages are still being read: show nothing rather than the empty state. */
  loading: boolean;
}

export interface ContextNotice {
  title: string;
  detail: string;
  /** Offered only where a new chat helps. */
  newChat: (() => void) | null;
  openSettings(): void;
}

export class ChatView {
  readonly element: HTMLElement;
  private readonly title = el("h1", { class: "chat-title", id: "chat-title" });
  private readonly scroller = el("div", { class: "chat-scroll", tabindex: "-1" });
  private readonly list = el("div", { class: "messages" });
  private readonly empty: HTMLElement;
  private readonly notice = el("div", { class: "context-notice-slot" });
  private readonly jump = el(
    "button",
    { type: "button", class: "jump-to-latest", hidden: true },
    icon("chevronDown"),
    "Latest",
  );
  private readonly views = new Map<string, MessageView>();
  private messages: Message[] = [];
  private stickToBottom = true;
  private lastScrollTop = 0;

  private readonly menu: ChatMenu;
  private readonly systemPromptLabel = el("span", { class: "system-prompt-label" });
  private readonly systemPromptButton = el(
    "button",
    { type: "button", class: "system-prompt-button", "aria-haspopup": "dialog", "data-testid": "system-prompt-button" },
    el("span", { class: "system-prompt-kind" }, "System prompt"),
    this.systemPromptLabel,
  );

  constructor(
    composer: HTMLElement,
    private readonly actions: MessageActions,
    emptyState: HTMLElement,
    menuActions: ChatMenuActions,
    editSystemPrompt: () => void = () => {},
  ) {
    this.empty = emptyState;
    this.systemPromptButton.addEventListener("click", () => editSystemPrompt());
    this.setSystemPrompt(null, "");
    this.menu = new ChatMenu(menuActions);
    this.menu.setEnabled(false);
    this.scroller.append(this.list);
    // Follow new text while the view is at the bottom; scrolling up (and only that) stops
    // following, so content that grows late (math, images) never unsticks it by itself.
    this.scroller.addEventListener("scroll", () => {
      const top = this.scroller.scrollTop;
      if (this.distanceFromBottom() < 40) this.stickToBottom = true;
      else if (top < this.lastScrollTop) this.stickToBottom = false;
      this.lastScrollTop = top;
      this.jump.hidden = this.stickToBottom;
    });
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(() => {
        if (this.stickToBottom) this.scroller.scrollTop = this.scroller.scrollHeight;
      }).observe(this.list);
    }
    this.jump.addEventListener("click", () => this.scrollToBottom(true));
    this.element = el(
      "section",
      { class: "chat", "aria-labelledby": "chat-title" },
      el(
        "header",
        { class: "chat-header" },
        this.title,
        el("div", { class: "chat-header-actions" }, this.systemPromptButton, this.menu.element),
      ),
      this.scroller,
      el("div", { class: "chat-bottom" }, this.jump, this.notice, composer),
    );
  }

  setTitle(title: string | null): void {
    this.title.textContent = title ?? "New Chat";
  }

  /** Says which system prompt the chat uses: its own (`own`), or the default from Settings. */
  setSystemPrompt(own: string | null, defaultPrompt: string): void {
    const { label, detail } = describeSystemPrompt(own, defaultPrompt);
    this.systemPromptLabel.textContent = label;
    this.systemPromptButton.title = detail;
    this.systemPromptButton.setAttribute("aria-label", `System prompt: ${label}. ${detail}`);
    this.systemPromptButton.classList.toggle("own", own !== null);
  }

  /** Offers the chat menu (export, copy) while a saved chat is open. */
  setMenuEnabled(enabled: boolean): void {
    this.menu.setEnabled(enabled);
  }

  /** Shows `messages`, reusing the views of messages already on screen. */
  setMessages(messages: Message[], context: ChatContext): void {
    this.messages = messages;
    const visible = messages.filter((message) => message.role !== "system");
    const lastAnswer = [...visible].reverse().find((message) => message.role === "assistant");
    const keep = new Set(visible.map((message) => message.id));
    for (const [id, view] of this.views) {
      if (!keep.has(id)) {
        view.element.remove();
        this.views.delete(id);
      }
    }
    const wasAtBottom = this.stickToBottom;
    let previous: Element | null = null;
    for (const message of visible) {
      const flags: MessageFlags = {
        idle: context.idle,
        lastAnswer: message === lastAnswer && message === visible[visible.length - 1],
        errorInNotice: context.noticeShown && message === visible[visible.length - 1],
        contextWindow: context.contextWindow,
        audioHeardMs: context.audioHeardMs,
        progress: context.progress.get(message.id) ?? NO_PROGRESS,
      };
      let view = this.views.get(message.id);
      if (view) view.update(message, flags);
      else {
        view = new MessageView(message, flags, this.actions);
        this.views.set(message.id, view);
      }
      const expected: Element | null = previous ? previous.nextElementSibling : this.list.firstElementChild;
      if (expected !== view.element) {
        if (previous) previous.after(view.element);
        else this.list.prepend(view.element);
      }
      previous = view.element;
    }
    if (visible.length === 0) this.list.replaceChildren(...(context.loading ? [] : [this.empty]));
    else this.empty.remove();
    this.scroller.setAttribute("aria-busy", String(context.loading));
    if (wasAtBottom) this.scrollToBottom(false);
  }

  /** Shows streamed text for one message; false when that message is not on screen. */
  stream(messageId: string, text: string, progress: StreamProgress): boolean {
    const view = this.views.get(messageId);
    if (!view) return false;
    const wasAtBottom = this.stickToBottom;
    view.stream(text, progress);
    if (wasAtBottom) this.scrollToBottom(false);
    return true;
  }

  has(messageId: string): boolean {
    return this.views.has(messageId);
  }

  current(): Message[] {
    return this.messages;
  }

  setNotice(notice: ContextNotice | null): void {
    if (!notice) {
      this.notice.replaceChildren();
      return;
    }
    const buttons: HTMLElement[] = [];
    const { newChat } = notice;
    if (newChat) {
      const button = el("button", { type: "button", class: "primary" }, "New Chat");
      button.addEventListener("click", () => newChat());
      buttons.push(button);
    }
    const settings = el("button", { type: "button", class: newChat ? "" : "primary" }, "Context Length…");
    settings.addEventListener("click", () => notice.openSettings());
    buttons.push(settings);
    this.notice.replaceChildren(
      el(
        "div",
        { class: "context-notice", role: "alert", "data-testid": "context-notice" },
        icon("warning"),
        el("div", { class: "context-notice-text" }, el("strong", {}, notice.title), el("p", {}, notice.detail)),
        el("div", { class: "context-notice-actions" }, ...buttons),
      ),
    );
  }

  /** Scrolls a message into view and highlights it briefly (search results). */
  reveal(messageId: string): void {
    const view = this.views.get(messageId);
    if (!view) return;
    this.stickToBottom = false;
    view.element.scrollIntoView?.({ block: "center" });
    view.element.classList.add("found");
    window.setTimeout(() => view.element.classList.remove("found"), 2000);
  }

  scrollToBottom(smooth: boolean): void {
    this.stickToBottom = true;
    this.jump.hidden = true;
    this.scroller.scrollTo?.({ top: this.scroller.scrollHeight, behavior: smooth ? "smooth" : "auto" });
  }

  private distanceFromBottom(): number {
    return this.scroller.scrollHeight - this.scroller.scrollTop - this.scroller.clientHeight;
  }
}
