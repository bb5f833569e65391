/** Where the user writes: text, image attachments, Send / Stop. */
import type { PendingAttachment } from "../api";
import { el, iconButton } from "../dom";
import { formatBytes } from "../format";
import { icon } from "../icons";

export interface ComposerHandlers {
  send(text: string): void;
  stop(): void;
  attach(): void;
  pasteImages(files: File[]): void;
  /** A paste that brought neither text nor a file: the backend reads the OS clipboard. */
  pasteFromClipboard(): void;
  removeAttachment(attachment: PendingAttachment): void;
}

export interface ComposerState {
  /** An answer is being generated: Send gives way to Stop. */
  generating: boolean;
  /** Why nothing can be sent right now (no model, loading…), or null when it can. */
  blockedReason: string | null;
  /** The model reads images. */
  vision: boolean;
}

export class Composer {
  readonly element: HTMLElement;
  readonly textarea: HTMLTextAreaElement;
  private readonly sendButton: HTMLButtonElement;
  private readonly stopButton: HTMLButtonElement;
  private readonly attachButton: HTMLButtonElement;
  private readonly tray = el("ul", { class: "pending-attachments", "aria-label": "Attached images" });
  private readonly hint = el("p", { class: "composer-hint", id: "composer-hint" });
  private attachments: PendingAttachment[] = [];
  private state: ComposerState = { generating: false, blockedReason: null, vision: true };

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
      this.hint,
    );
    this.refresh();
  }

  setState(state: ComposerState): void {
    this.state = state;
    this.refresh();
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
