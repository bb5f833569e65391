/** One message in the conversation: its text, attachments, stats and actions. */
import type { Attachment, Message, Usage } from "../api";
import { copyText } from "../clipboard";
import { el, iconButton } from "../dom";
import { formatDuration, formatInteger, formatMilliseconds, formatRate } from "../format";
import { icon } from "../icons";
import { announce } from "../live";
import { audioChip } from "./audio-chip";
import { readAloudButton } from "./read-aloud";
import { loadMath } from "../markdown/math";
import { needsMath, renderMarkdown } from "../markdown/render";
import { splitThinking } from "../markdown/thinking";
import type { StreamProgress } from "../stream";

export interface MessageActions {
  regenerate(message: Message): void;
  /** Sends an edited user message as a new version of its turn and answers it. */
  edit(message: Message, text: string): void;
  /** Shows version `version` (from 1) of the message's turn. */
  selectVersion(message: Message, version: number): void;
  /** A `data:` URL for an attachment's thumbnail. */
  thumbnail(attachment: Attachment): Promise<string>;
  /** An audio attachment's file, to play it. */
  audioFile(attachment: Attachment): Promise<Blob>;
  /** Shows an attachment full size. */
  view(attachment: Attachment): void;
}

/** What a message shows beyond its own data. */
export interface MessageFlags {
  /** No answer is being generated: edit and regenerate are possible. */
  idle: boolean;
  /** This is the conversation's last answer (the one regenerate writes a new version of). */
  lastAnswer: boolean;
  /** Tokens the model can hold, for "context used". */
  contextWindow: number | null;
  /** How much of a recording the model hears, in ms: a longer one's chip says so. */
  audioHeardMs: number | null;
  /** The context notice says why this answer failed: its own line does not say it again. */
  errorInNotice: boolean;
  /** Where the answer stands while streaming. */
  progress: StreamProgress;
}

const ROLE_LABEL = { user: "You", assistant: "Gemma", system: "System" } as const;

export class MessageView {
  readonly element: HTMLElement;
  private message: Message;
  private flags: MessageFlags;
  private readonly bubble = el("div", { class: "bubble" });
  private readonly body = el("div", { class: "message-body" });
  private readonly footer = el("div", { class: "message-footer" });
  private thinking: HTMLDetailsElement | null = null;
  private editing = false;

  constructor(
    message: Message,
    flags: MessageFlags,
    private readonly actions: MessageActions,
  ) {
    this.message = message;
    this.flags = flags;
    this.element = el(
      "article",
      { class: `message ${message.role}`, "data-testid": "message", "aria-label": ROLE_LABEL[message.role] },
      el("h3", { class: "visually-hidden" }, ROLE_LABEL[message.role]),
      this.bubble,
      this.footer,
    );
    this.element.dataset.messageId = message.id;
    this.renderAll();
  }

  get id(): string {
    return this.message.id;
  }

  /** Re-renders when the message or what it shows has changed. */
  update(message: Message, flags: MessageFlags): void {
    const textChanged = message.text !== this.message.text || message.status !== this.message.status;
    const changed =
      message !== this.message ||
      flags.idle !== this.flags.idle ||
      flags.lastAnswer !== this.flags.lastAnswer ||
      flags.contextWindow !== this.flags.contextWindow ||
      flags.errorInNotice !== this.flags.errorInNotice;
    this.message = message;
    this.flags = flags;
    if (!changed || this.editing) return;
    const shown = this.bubble.querySelector(".message-attachments")?.childElementCount ?? 0;
    if (textChanged || message.attachments.length !== shown) this.renderAll();
    else this.renderFooter();
  }

  /** Shows streamed text; called at most once per frame. */
  stream(text: string, progress: StreamProgress): void {
    this.message = { ...this.message, text, status: "streaming" };
    this.flags = { ...this.flags, progress };
    this.renderContent();
    this.renderFooter();
  }

  private renderAll(): void {
    this.element.dataset.role = this.message.role;
    this.element.dataset.status = this.message.status;
    this.bubble.replaceChildren();
    if (this.message.attachments.length > 0) this.bubble.append(this.attachments());
    this.bubble.append(this.body);
    this.renderContent();
    this.renderFooter();
  }

  private attachments(): HTMLElement {
    const list = el("div", { class: "message-attachments" });
    for (const attachment of this.message.attachments) {
      if (attachment.kind === "audio") {
        list.append(
          audioChip({
            name: attachment.name ?? "Audio",
            durationMs: attachment.durationMs,
            notice: heardNotice(attachment.durationMs, this.flags.audioHeardMs),
            load: () => this.actions.audioFile(attachment),
            testId: "message-audio",
          }),
        );
        continue;
      }
      const size = attachment.width && attachment.height ? `, ${attachment.width} × ${attachment.height}` : "";
      const image = el("img", {
        class: "message-attachment",
        "data-testid": "message-attachment",
        alt: `Attached image${size}`,
      });
      if (attachment.width && attachment.height) {
        image.width = Math.min(160, attachment.width);
        image.height = Math.round((image.width / attachment.width) * attachment.height);
      }
      void this.actions.thumbnail(attachment).then(
        (url) => {
          image.src = url;
        },
        () => {
          image.alt = "Image unavailable";
          image.classList.add("missing");
        },
      );
      const open = el(
        "button",
        { type: "button", class: "attachment-open", "aria-label": "View the image full size", title: "View full size" },
        image,
      );
      open.addEventListener("click", () => this.actions.view(attachment));
      list.append(open);
    }
    return list;
  }

  private renderContent(): void {
    const { role, text, status } = this.message;
    this.element.dataset.status = status;
    this.element.setAttribute("aria-busy", String(status === "streaming"));
    if (role !== "assistant") {
      this.body.className = "message-body plain";
      this.body.textContent = text;
      return;
    }
    const streaming = status === "streaming";
    const { thinking, thinkingDone, answer } = splitThinking(text, streaming);
    this.renderThinking(thinking, thinkingDone);
    this.body.className = "message-body markdown";
    if (streaming && !answer && !(thinking && !thinkingDone)) {
      this.body.replaceChildren(
        el("span", { class: "typing", "aria-label": "Gemma is writing" }, el("span"), el("span"), el("span")),
      );
      return;
    }
    const rendered = renderMarkdown(answer);
    this.body.replaceChildren(rendered.fragment);
    if (needsMath(rendered)) {
      void loadMath().then(() => {
        if (this.element.isConnected && !this.editing) this.renderContent();
      });
    }
  }

  private renderThinking(thinking: string | null, done: boolean): void {
    if (thinking === null || (done && !thinking)) {
      this.thinking?.remove();
      this.thinking = null;
      return;
    }
    if (!this.thinking) {
      this.thinking = el(
        "details",
        { class: "thinking" },
        el("summary"),
        el("div", { class: "thinking-body markdown" }),
      );
      this.bubble.insertBefore(this.thinking, this.body);
    }
    const summary = this.thinking.querySelector("summary");
    if (summary) summary.textContent = done ? "Thought process" : "Thinking…";
    this.thinking.classList.toggle("active", !done);
    this.thinking.querySelector(".thinking-body")?.replaceChildren(renderMarkdown(thinking).fragment);
  }

  /**
   * Two rows that keep their places: the answer's info line (or its progress while streaming)
   * on its own row, then "‹ 1/2 ›" and the actions together on the next, however long the info
   * line is. Stop is the composer's (one place for every answer), not a button that moves with
   * the text.
   */
  private renderFooter(): void {
    const { role, status } = this.message;
    const rows: HTMLElement[] = [];
    if (role === "assistant") {
      if (status === "streaming") {
        rows.push(streamingNote(this.flags.progress));
      } else {
        const stats = answerStats(this.message, this.flags.contextWindow, this.flags.errorInNotice);
        if (stats) rows.push(stats);
      }
    }
    if (status !== "streaming") {
      const controls = el("div", { class: "message-controls", "data-testid": "message-controls" });
      if (this.message.versions > 1) controls.append(this.versionPicker());
      controls.append(this.actionBar());
      rows.push(controls);
    }
    this.footer.replaceChildren(...rows);
  }

  /** "‹ 1/2 ›": flips between the versions of this turn (regenerated answers, edited questions). */
  private versionPicker(): HTMLElement {
    const { version, versions } = this.message;
    const button = (label: string, glyph: string, testid: string, disabled: boolean) =>
      el(
        "button",
        {
          type: "button",
          class: "icon-button version-step",
          "aria-label": label,
          title: label,
          "data-testid": testid,
          disabled,
        },
        glyph,
      );
    const previous = button("Previous version", "‹", "version-previous", !this.flags.idle || version <= 1);
    const next = button("Next version", "›", "version-next", !this.flags.idle || version >= versions);
    previous.addEventListener("click", () => this.actions.selectVersion(this.message, version - 1));
    next.addEventListener("click", () => this.actions.selectVersion(this.message, version + 1));
    return el(
      "div",
      { class: "versions", role: "group", "aria-label": "Versions" },
      previous,
      el("span", { class: "version-count", "data-testid": "version-count" }, `${version}/${versions}`),
      next,
    );
  }

  private actionBar(): HTMLElement {
    const bar = el("div", { class: "message-actions" });
    const { role } = this.message;
    const copy = iconButton("Copy message", icon("copy"), { "data-testid": "copy" });
    copy.addEventListener("click", () => {
      const text = role === "assistant" ? splitThinking(this.message.text).answer : this.message.text;
      void copyText(text).then((ok) => announce(ok ? "Message copied" : "Could not copy the message"));
      copy.classList.add("done");
      window.setTimeout(() => copy.classList.remove("done"), 1200);
    });
    bar.append(copy);
    if (role === "assistant") bar.append(readAloudButton(this.message.id, () => this.message.text));
    if (role === "user") {
      const edit = iconButton("Edit and resend", icon("edit"), { "data-testid": "edit", disabled: !this.flags.idle });
      edit.addEventListener("click", () => this.startEditing());
      bar.append(edit);
    }
    if (role === "assistant" && this.flags.lastAnswer) {
      const again = iconButton("Regenerate answer", icon("regenerate"), {
        "data-testid": "regenerate",
        disabled: !this.flags.idle,
      });
      again.addEventListener("click", () => this.actions.regenerate(this.message));
      bar.append(again);
    }
    return bar;
  }

  private startEditing(): void {
    if (this.editing) return;
    this.editing = true;
    this.element.classList.add("editing");
    const field = el("textarea", {
      class: "edit-field",
      "aria-label": "Edit message",
      rows: "3",
      "data-testid": "edit-field",
    });
    field.value = this.message.text;
    const cancel = el("button", { type: "button" }, "Cancel");
    const save = el("button", { type: "button", class: "primary", "data-testid": "edit-send" }, "Send");
    const finish = (send: boolean) => {
      const text = field.value;
      this.editing = false;
      this.element.classList.remove("editing");
      this.renderAll();
      if (send && text.trim() && text !== this.message.text) this.actions.edit(this.message, text);
      this.element.querySelector<HTMLButtonElement>('[data-testid="edit"]')?.focus();
    };
    cancel.addEventListener("click", () => finish(false));
    save.addEventListener("click", () => finish(true));
    field.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        finish(false);
      } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        finish(true);
      }
    });
    this.bubble.replaceChildren(field, el("div", { class: "edit-actions" }, cancel, save));
    this.footer.replaceChildren();
    field.focus();
    field.setSelectionRange(field.value.length, field.value.length);
  }
}

/** "Only the first 10:00 of 14:05 was heard." for a recording longer than the model hears. */
export function heardNotice(durationMs: number | null, heardMs: number | null): string | null {
  if (durationMs === null || heardMs === null || durationMs <= heardMs) return null;
  return `Only the first ${formatDuration(heardMs)} of ${formatDuration(durationMs)} was heard.`;
}

/** The line under an answer: speed, latency, size, context used, and how it ended. */
export function answerStats(message: Message, contextWindow: number | null, errorInNotice = false): HTMLElement | null {
  const { usage, status, error } = message;
  if (!usage && status === "complete") return null;
  const stats = el("div", { class: "answer-stats", "data-testid": "answer-stats" });
  if (usage) {
    stats.append(
      el("span", {}, formatRate(usage.decodeTokensPerSecond)),
      el("span", {}, `${formatMilliseconds(usage.timeToFirstTokenMs)} to first token`),
      el("span", {}, `${formatInteger(usage.generatedTokens)} tokens`),
    );
    const used = usage.promptTokens + usage.generatedTokens;
    // The window the answer was written in, when it was saved with it; else today's.
    const window = usage.contextWindow ?? contextWindow;
    if (window) {
      const percent = Math.min(100, Math.round((used / window) * 100));
      stats.append(
        el(
          "span",
          { class: percent >= 90 ? "context near-full" : "context" },
          `Context ${formatInteger(used)} / ${formatInteger(window)} (${percent}%)`,
        ),
      );
    } else {
      stats.append(el("span", { class: "context" }, `Context ${formatInteger(used)} tokens`));
    }
    if (usage.reusedTokens > 0)
      stats.append(el("span", { class: "reused" }, `${formatInteger(usage.reusedTokens)} reused from the cache`));
    const drafted = draftedLine(usage.tokensPerRound);
    if (drafted) stats.append(el("span", { class: "drafted" }, drafted));
    stats.title = usageDetails(usage);
  }
  // Which model wrote it (answers saved before models were recorded say nothing).
  if (usage && message.model)
    stats.append(el("span", { class: "answer-model", "data-testid": "answer-model" }, `by ${message.model}`));
  if (status === "stopped") stats.append(el("span", { class: "mark stopped" }, "Stopped"));
  else if (usage?.stopReason === "maxTokens") stats.append(el("span", { class: "mark" }, "Reached the token limit"));
  else if (usage?.stopReason === "contextFull") stats.append(el("span", { class: "mark warning" }, "Context full"));
  if (status === "error" && errorInNotice) stats.append(el("span", { class: "mark warning" }, "Not answered"));
  else if (status === "error") stats.append(el("span", { class: "message-error" }, error ?? "The answer failed."));
  return stats;
}

function usageDetails(usage: Usage): string {
  return [
    `Prompt: ${formatInteger(usage.promptTokens)} tokens (${formatInteger(usage.reusedTokens)} reused)`,
    `Prompt processing: ${formatRate(usage.prefillTokensPerSecond)}`,
    `Generation: ${formatRate(usage.decodeTokensPerSecond)}`,
    `Time to first token: ${formatMilliseconds(usage.timeToFirstTokenMs)}`,
    usage.tokensPerRound === undefined
      ? ""
      : `Faster answers: ${usage.tokensPerRound.toFixed(1)} tokens per check (the assistant's drafts the model kept, plus its own)`,
  ]
    .filter(Boolean)
    .join("\n");
}

/**
 * "Reading the prompt… 1,024 of 4,096 tokens" with a bar while a long prompt is read (a short one
 * is read at once: no bar), then "Generating… N tokens".
 */
export function streamingNote({ tokenCount, reading }: StreamProgress): HTMLElement {
  if (tokenCount > 0 || !reading || reading.total < READING_SHOWN_FROM)
    return el(
      "span",
      { class: "streaming-note", "data-testid": "streaming-note" },
      tokenCount > 0 ? `Generating… ${formatInteger(tokenCount)} tokens` : "Generating…",
    );
  const label = `Reading the prompt… ${formatInteger(reading.done)} of ${formatInteger(reading.total)} tokens`;
  return el(
    "span",
    { class: "streaming-note reading", "data-testid": "streaming-note" },
    el("progress", { max: String(reading.total), value: String(reading.done), "aria-label": "Prompt read" }),
    label,
  );
}

/** Prompts shorter than this are read in well under a second on a Mac: "Generating…" says enough. */
const READING_SHOWN_FROM = 512;

/**
 * What Faster answers gave, in words: tokens per check of the model (the assistant's drafts it
 * kept, plus its own). Nothing when no drafter wrote it, or when no draft was kept (one token
 * per check is what the model gives alone: nothing to say).
 */
export function draftedLine(tokensPerRound: number | undefined): string | null {
  if (tokensPerRound === undefined || tokensPerRound < 1.05) return null;
  return `Drafted: ${tokensPerRound.toFixed(1)} tokens per check`;
}
