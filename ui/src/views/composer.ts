/** Where the user writes: text, image and audio attachments, the microphone, Send / Stop. */
import type { PendingAttachment } from "../api";
import { MAX_RECORDING_SECONDS, type Recording } from "../audio/recorder";
import { el, iconButton } from "../dom";
import { formatBytes, formatDuration, formatInteger } from "../format";
import { icon } from "../icons";
import { audioChip } from "./audio-chip";

/** Typing pauses this long before the draft's tokens are counted again. */
export const COUNT_DELAY_MS = 150;
/** How often the recording's time and level meter are redrawn. */
export const RECORDING_TICK_MS = 100;

export interface ComposerHandlers {
  send(text: string): void;
  stop(): void;
  attach(): void;
  /** Image or audio files pasted into the text field. */
  pasteFiles(files: File[]): void;
  /** A paste that brought neither text nor a file: the backend reads the OS clipboard. */
  pasteFromClipboard(): void;
  removeAttachment(attachment: PendingAttachment): void;
  /** The draft's tokens: its text by the loaded model's tokenizer, and its attachments as the prompt holds them. */
  countTokens(text: string, attachments: PendingAttachment[]): Promise<number>;
  /** The person changed the draft's text (typing, pasting, cutting): `text` is all of it now. */
  edited?(text: string): void;
  /** A pending audio file's bytes, to play it. */
  audioFile(attachment: PendingAttachment): Promise<Blob>;
  /** Opens the microphone and starts recording; rejects with a message in words. */
  record(): Promise<Recording>;
  /** A finished recording, as a WAV file, to attach. */
  recorded(wav: Uint8Array): void;
  /** The microphone could not be used; `message` says why. */
  recordingFailed(message: string): void;
  /** Send was asked for a draft of `tokens` tokens, more than the context has room for: say so. */
  tooLong(tokens: number): void;
}

export interface ComposerState {
  /** An answer is being generated: Send gives way to Stop. */
  generating: boolean;
  /** Why nothing can be sent right now (no model, loading…), or null when it can. */
  blockedReason: string | null;
  /** The model reads images. */
  vision: boolean;
  /** The model hears audio. */
  audio: boolean;
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
  private readonly recordButton: HTMLButtonElement;
  private readonly tray = el("ul", { class: "pending-attachments", "aria-label": "Attachments" });
  private readonly recordingTime = el("span", { class: "recording-time", "data-testid": "recording-time" }, "0:00");
  private readonly recordingLevel = el("span", { class: "recording-level-fill" });
  private readonly recordingBar = el(
    "div",
    { class: "recording", "data-testid": "recording", role: "status", hidden: true },
    el("span", { class: "recording-dot", "aria-hidden": "true" }),
    el("span", { class: "recording-label" }, "Recording"),
    this.recordingTime,
    el(
      "span",
      { class: "recording-level", "data-testid": "recording-level", "aria-hidden": "true" },
      this.recordingLevel,
    ),
  );
  private readonly hint = el("p", { class: "composer-hint", id: "composer-hint" });
  private readonly count = el("p", {
    class: "composer-count",
    "data-testid": "token-count",
    title: "Tokens in this message, and how many the context window has left after it",
    hidden: true,
  });
  private attachments: PendingAttachment[] = [];
  private state: ComposerState = { generating: false, blockedReason: null, vision: true, audio: true, room: null };
  /** The recording in progress; "starting" while the microphone is being opened. */
  private recording: Recording | "starting" | null = null;
  private recordingTimer: ReturnType<typeof setInterval> | undefined;
  private readonly onRecordingKey = (event: KeyboardEvent) => {
    if (event.key !== "Escape" || !this.recording) return;
    event.preventDefault();
    event.stopPropagation();
    void this.stopRecording();
  };
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
    // Stop sits where Send was, labelled in words with its key: the same place for every answer.
    this.stopButton = el(
      "button",
      {
        type: "button",
        class: "stop",
        "aria-label": "Stop generating (Esc)",
        "aria-keyshortcuts": "Escape",
        "data-testid": "stop",
        hidden: true,
      },
      icon("stop"),
      el("span", { class: "stop-label" }, "Stop"),
      el("kbd", { class: "stop-key", "aria-hidden": "true" }, "Esc"),
    );
    this.attachButton = iconButton("Attach images or audio", icon("paperclip"), { "data-testid": "attach" });
    this.recordButton = iconButton("Record audio", icon("microphone"), {
      class: "icon-button record",
      "data-testid": "record",
      "aria-pressed": "false",
    });

    this.textarea.addEventListener("keydown", (event) => this.onKeyDown(event));
    this.textarea.addEventListener("input", () => {
      this.autosize();
      this.refresh();
      this.scheduleCount();
      handlers.edited?.(this.textarea.value);
    });
    this.textarea.addEventListener("paste", (event) => this.onPaste(event));
    this.sendButton.addEventListener("click", () => this.submit());
    this.stopButton.addEventListener("click", () => handlers.stop());
    this.attachButton.addEventListener("click", () => handlers.attach());
    this.recordButton.addEventListener("click", () => {
      if (this.recording) void this.stopRecording();
      else void this.startRecording();
    });

    this.element = el(
      "div",
      { class: "composer" },
      this.tray,
      this.recordingBar,
      el(
        "div",
        { class: "composer-row" },
        this.attachButton,
        this.recordButton,
        this.textarea,
        this.sendButton,
        this.stopButton,
      ),
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
    this.tray.replaceChildren(...attachments.map((attachment) => this.pendingChip(attachment)));
    this.tray.hidden = attachments.length === 0;
    this.refresh();
    this.scheduleCount();
  }

  /** An image's thumbnail, or an audio file's chip, with a button that removes it. */
  private pendingChip(attachment: PendingAttachment): HTMLElement {
    const remove = iconButton(`Remove ${attachment.name}`, icon("close"), {
      class: "icon-button remove-attachment",
    });
    remove.addEventListener("click", () => {
      this.handlers.removeAttachment(attachment);
      this.textarea.focus();
    });
    if (attachment.kind === "audio")
      return el(
        "li",
        { class: "pending-attachment audio", "data-testid": "pending-attachment", "data-attachment-id": attachment.id },
        audioChip({
          name: attachment.name,
          durationMs: attachment.durationMs,
          notice: attachment.notice,
          load: () => this.handlers.audioFile(attachment),
          testId: "pending-audio",
        }),
        remove,
      );
    const size = `${attachment.width ?? "?"} × ${attachment.height ?? "?"}, ${formatBytes(attachment.byteSize)}`;
    return el(
      "li",
      {
        class: "pending-attachment",
        "data-testid": "pending-attachment",
        title: `${attachment.name} — ${size}`,
      },
      el("img", { src: attachment.thumbnail ?? "", alt: attachment.name }),
      remove,
    );
  }

  /** Whether the microphone is recording (or being opened). */
  isRecording(): boolean {
    return this.recording !== null;
  }

  private async startRecording(): Promise<void> {
    if (this.recording || this.recordButton.disabled) return;
    this.recording = "starting";
    document.addEventListener("keydown", this.onRecordingKey, true);
    this.refresh();
    let recording: Recording;
    try {
      recording = await this.handlers.record();
    } catch (error) {
      this.endRecording();
      this.handlers.recordingFailed(error instanceof Error ? error.message : String(error));
      return;
    }
    if (this.recording !== "starting") {
      recording.cancel(); // stopped (Esc) while the microphone was being opened
      return;
    }
    this.recording = recording;
    this.showRecording(recording);
    this.recordingTimer = setInterval(() => {
      this.showRecording(recording);
      if (recording.elapsedSeconds() >= MAX_RECORDING_SECONDS) void this.stopRecording();
    }, RECORDING_TICK_MS);
    this.refresh();
  }

  /** Stops the recording and hands it over as a WAV file. */
  private async stopRecording(): Promise<void> {
    const recording = this.recording;
    this.endRecording();
    if (!recording || recording === "starting") return;
    try {
      this.handlers.recorded(await recording.stop());
    } catch (error) {
      this.handlers.recordingFailed(error instanceof Error ? error.message : String(error));
    }
    this.textarea.focus();
  }

  /** Stops a recording without keeping it (the composer goes away). */
  cancelRecording(): void {
    const recording = this.recording;
    this.endRecording();
    if (recording && recording !== "starting") recording.cancel();
  }

  private endRecording(): void {
    clearInterval(this.recordingTimer);
    this.recordingTimer = undefined;
    this.recording = null;
    document.removeEventListener("keydown", this.onRecordingKey, true);
    this.refresh();
  }

  private showRecording(recording: Recording): void {
    this.recordingTime.textContent = formatDuration(Math.floor(recording.elapsedSeconds()) * 1000);
    const level = Math.max(0, Math.min(1, recording.level()));
    this.recordingLevel.style.transform = `scaleX(${level.toFixed(3)})`;
    this.recordingBar.dataset.level = level.toFixed(2);
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
    return !generating && blockedReason === null && hasContent && this.recording === null && this.overBy() === null;
  }

  /** Tokens the draft (as last counted) goes past what the context has room for; null when it fits. */
  private overBy(): number | null {
    const { room } = this.state;
    const tokens = this.draftTokens;
    return room === null || tokens === null || tokens <= room ? null : tokens - room;
  }

  private submit(): void {
    if (this.canSend()) this.handlers.send(this.textarea.value);
    else if (this.overBy() !== null && this.draftTokens !== null) this.handlers.tooLong(this.draftTokens);
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
    const files = [...(data?.files ?? [])].filter(
      (file) => file.type.startsWith("image/") || file.type.startsWith("audio/"),
    );
    if (files.length > 0) {
      event.preventDefault();
      this.handlers.pasteFiles(files);
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
    const attachments = this.attachments;
    if (this.state.room === null || (text.trim() === "" && attachments.length === 0)) {
      this.draftTokens = null;
      this.showCount();
      this.refresh();
      return;
    }
    this.countTimer = setTimeout(() => {
      this.handlers.countTokens(text, attachments).then(
        (tokens) => {
          if (serial !== this.countSerial) return;
          this.draftTokens = tokens;
          this.showCount();
          this.refresh();
        },
        () => {
          if (serial !== this.countSerial) return;
          this.draftTokens = null;
          this.showCount();
          this.refresh();
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
    const { generating, blockedReason, vision, audio } = this.state;
    this.sendButton.hidden = generating;
    this.stopButton.hidden = !generating;
    this.sendButton.disabled = !this.canSend();
    this.attachButton.disabled = blockedReason !== null || (!vision && !audio);
    const attachLabel =
      vision && audio
        ? "Attach images or audio"
        : vision
          ? "Attach images (this model does not hear audio)"
          : audio
            ? "Attach audio (this model does not read images)"
            : "This model reads neither images nor audio";
    this.attachButton.title = attachLabel;
    this.attachButton.setAttribute("aria-label", attachLabel);

    const recording = this.recording !== null;
    this.recordButton.disabled = !recording && (blockedReason !== null || !audio);
    const recordLabel = recording ? "Stop recording" : audio ? "Record audio" : "This model does not hear audio";
    this.recordButton.title = recordLabel;
    this.recordButton.setAttribute("aria-label", recordLabel);
    this.recordButton.setAttribute("aria-pressed", String(recording));
    this.recordButton.classList.toggle("active", recording);
    this.recordButton.replaceChildren(icon(recording ? "stop" : "microphone"));
    this.recordingBar.hidden = !(this.recording && this.recording !== "starting");
    this.element.classList.toggle("is-recording", recording);

    const over = this.overBy();
    this.hint.textContent =
      blockedReason ??
      (recording
        ? "Recording… Esc or the microphone button stops it"
        : generating
          ? "Esc stops the answer"
          : over !== null
            ? `Too long to send: ${formatInteger(over)} ${over === 1 ? "token" : "tokens"} more than the context has room for. Shorten it, or raise the context length.`
            : "Enter to send · Shift+Enter for a new line");
    this.hint.classList.toggle("over", over !== null && !generating && blockedReason === null && !recording);
  }
}
