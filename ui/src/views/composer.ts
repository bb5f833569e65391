/** Where the user writes: text, image attachments, Send / Stop. */
import type { PendingAttachment } from "../api";
import { el, iconButton } from "../dom";
import { formatBytes, formatInteger } from "../format";
import { icon } from "../icons";

/** Typing pauses this long before the draft's tokens are counted again. */
export const COUNT_DELAY_MS = 150;

export interface ComposerHandlers {
  send(text: string): void;
  stop(): void;
  attach(): void;
  pasteImages(files: File[]): void;
  /** A paste that brought neither text nor a file: the backend reads the OS clipboard. */
  pasteFromClipboard(): void;
  removeAttachment(attachment: PendingAttachment): void;
  /** The draft's tokens by the loaded model's tokenizer. */
  countTokens(text: string): Promise<number>;
}

export interface ComposerState {
  /** An answer is being generated: Send gives way to Stop. */
  generating: boolean;
  /** Why nothing can be sent right now (no model, loading…), or null when it can. */
  blockedReason: string | null;
  /** The model reads images. */
  vision: boolean;
  /**
   * Tokens the conversation can still take (the context window less what it already holds);
   * null hides the draft's count (no model loaded).
   */
  room: number | null;
}

export class Composer {
  readonly element: HTMLElement;
  readonly textarea: HTMLTextAreaElement;
  private readonly sendButton: HTMLButtonElement;
  private readonly stopButton: HTMLButtonElement;
  private readonly attachButton: HTMLButtonElement;
  private readonly tray = el("ul", { class: "pending-attachments", "aria-label": "Attached images" });
  private readonly hint = el("p", { class: "composer-hint", id: "composer-hint" });
  private readonly count = el("p", {
    class: "composer-count",
    "data-testid": "token-count",
    title: "Tokens in this message, and how many the context window has left after it",
    hidden: true,
  });
  private attachments: PendingAttachment[] = [];
  private state: ComposerState = { generating: false, blockedReason: null, vision: true, room: null };
  /** The draft's token count last received; null when there is none to show. */
  private draftTokens: number | null = null;
  private countTimer: ReturnType<typeof setTimeout> | undefined;
  /** Bumped by every change of the draft: a count that comes back for an older one is dropped. */
  private countSerial = 0;

  constructor(private readonly handlers: ComposerHandlers) {
    this.textarea = el("textarea", {
      class: "composer-input",
      rows: "1",
      placeholder: "Message Gemma…",
      "aria-label": "Message",
      "aria-describedby": "composer-hint",
      "data-testid": "composer",
      spellcheck: "true",
    });
    this.sendButton = iconButton("Send message", icon("send"), { class: "icon-button send", "data-testid": "send" });
    this.stopButton = iconButton("Stop generating", icon("stop"), {
      class: "icon-button stop",
      "data-testid": "stop",
      hidden: true,
    });
    this.attachButton = iconButton("Attach images", icon("paperclip"), { "data-testid": "attach" });

    this.textarea.addEventListener("keydown", (event) => this.onKeyDown(event));
    this.textarea.addEventListener("input", () => {
      this.autosize();
      this.refresh();
      this.scheduleCount();
    });
    this.textarea.addEventListener("paste", (event) => this.onPaste(event));
    this.sendButton.addEventListener("click", () => this.submit());
    this.stopButton.addEventListener("click", () => handlers.stop());
    this.attachButton.addEventListener("click", () => handlers.attach());

    this.element = el(
      "div",
      { class: "composer" },
      this.tray,
      el("div", { class: "composer-row" }, this.attachButton, this.textarea, this.sendButton, this.stopButton),
      el("div", { class: "composer-foot" }, this.hint, this.count),
    );
    this.refresh();
  }

  setState(state: ComposerState): void {
    const counting = this.state.room !== null;
    this.state = state;
    this.refresh();
    if (!counting && state.room !== null) this.scheduleCount();
    else this.showCount();
  }

  setAttachments(attachments: PendingAttachment[]): void {
    this.attachments = attachments;
    this.tray.replaceChildren(
      ...attachments.map((attachment) => {
        const remove = iconButton(`Remove ${attachment.name}`, icon("close"), {
          class: "icon-button remove-attachment",
        });
        remove.addEventListener("click", () => {
          this.handlers.removeAttachment(attachment);
          this.textarea.focus();
        });
        const size = `${attachment.width} × ${attachment.height}, ${formatBytes(attachment.byteSize)}`;
        return el(
          "li",
          {
            class: "pending-attachment",
            "data-testid": "pending-attachment",
            title: `${attachment.name} — ${size}`,
          },
          el("img", { src: attachment.thumbnail, alt: attachment.name }),
          remove,
        );
      }),
    );
    this.tray.hidden = attachments.length === 0;
    this.refresh();
  }

  pendingAttachments(): PendingAttachment[] {
    return this.attachments;
  }

  text(): string {
    return this.textarea.value;
  }

  setText(text: string): void {
    this.textarea.value = text;
    this.autosize();
    this.refresh();
    this.scheduleCount();
  }

  focus(): void {
    this.textarea.focus();
  }

  private canSend(): boolean {
    const { generating, blockedReason } = this.state;
    const hasContent = this.textarea.value.trim().length > 0 || this.attachments.length > 0;
    return !generating && blockedReason === null && hasContent;
  }

  private submit(): void {
    if (!this.canSend()) return;
    this.handlers.send(this.textarea.value);
  }

  private onKeyDown(event: KeyboardEvent): void {
    // Enter while an input method is composing (Japanese, Chinese…) confirms the composition.
    if (event.isComposing || event.keyCode === 229) return;
    if (event.key === "Enter" && !event.shiftKey && !event.altKey && !event.metaKey && !event.ctrlKey) {
      event.preventDefault();
      this.submit();
    } else if (event.key === "Escape" && this.state.generating) {
      event.preventDefault();
      event.stopPropagation();
      this.handlers.stop();
    }
  }

  private onPaste(event: ClipboardEvent): void {
    const data = event.clipboardData;
    const files = [...(data?.files ?? [])].filter((file) => file.type.startsWith("image/"));
    if (files.length > 0) {
      event.preventDefault();
      this.handlers.pasteImages(files);
      return;
    }
    // Text pastes as usual. WebKitGTK gives a pasted image neither as a file nor as text.
    if ((data?.getData("text/plain") ?? "") !== "") return;
    event.preventDefault();
    this.handlers.pasteFromClipboard();
  }

  /** Counts the draft once typing pauses; never waits on the answer, never blocks typing. */
  private scheduleCount(): void {
    clearTimeout(this.countTimer);
    this.countSerial += 1;
    const serial = this.countSerial;
    const text = this.textarea.value;
    if (this.state.room === null || text.trim() === "") {
      this.draftTokens = null;
      this.showCount();
      return;
    }
    this.countTimer = setTimeout(() => {
      this.handlers.countTokens(text).then(
        (tokens) => {
          if (serial !== this.countSerial) return;
          this.draftTokens = tokens;
          this.showCount();
        },
        () => {
          if (serial !== this.countSerial) return;
          this.draftTokens = null;
          this.showCount();
        },
      );
    }, COUNT_DELAY_MS);
  }

  /** "42 tokens · 7,900 left", or how far over the window the draft goes. */
  private showCount(): void {
    const { room } = this.state;
    const tokens = this.draftTokens;
    this.count.hidden = room === null || tokens === null;
    if (room === null || tokens === null) return;
    const left = room - tokens;
    const size = `${formatInteger(tokens)} ${tokens === 1 ? "token" : "tokens"}`;
    this.count.textContent =
      left >= 0 ? `${size} · ${formatInteger(left)} left` : `${size} · ${formatInteger(-left)} over`;
    this.count.classList.toggle("over", left < 0);
  }

  private autosize(): void {
    this.textarea.style.height = "auto";
    this.textarea.style.height = `${Math.min(this.textarea.scrollHeight, 240)}px`;
  }

  private refresh(): void {
    const { generating, blockedReason, vision } = this.state;
    this.sendButton.hidden = generating;
    this.stopButton.hidden = !generating;
    this.sendButton.disabled = !this.canSend();
    this.attachButton.disabled = blockedReason !== null || !vision;
    this.attachButton.title = vision ? "Attach images" : "This model does not read images";
    this.hint.textContent =
      blockedReason ?? (generating ? "Esc stops the answer" : "Enter to send · Shift+Enter for a new line");
  }
}
