/**
 * The quick-ask window (ui/quick.html): a question, its answer streaming in, "Open in Gemma
 * Desk" to continue it in the main window, Esc to dismiss. The question starts a chat like the
 * main window's, through the same engine; a follow-up continues it. docs/QUICK_ASK.md.
 */
import * as api from "../api";
import { startRecording, type Recording } from "../audio/recorder";
import type { GenerationEvent, Sent, UnlistenFn } from "../api";
import { errorMessage } from "../api";
import { el } from "../dom";
import { renderMarkdown } from "../markdown/render";
import { splitThinking } from "../markdown/thinking";
import { readAloud, readAloudButton } from "../views/read-aloud";

/** What the window asks of the backend (the real bridge in the app, fakes in tests). */
export interface QuickAskHandlers {
  send(conversationId: string | null, text: string, attachmentIds: string[]): Promise<Sent>;
  /** Opens the microphone (the main window's recorder); rejects with the reason in words. */
  record(): Promise<Recording>;
  /** Hands a finished recording to the backend as a pending attachment; its id. */
  attach(wav: Uint8Array): Promise<string>;
  stop(generationId: number): Promise<unknown>;
  /** Continues the conversation in the main window (and hides this one). */
  handOver(conversationId: string): Promise<void>;
  /** Hides this window. */
  hide(): Promise<void>;
}

interface Answer {
  conversationId: string;
  messageId: string;
  generationId: number;
  text: string;
  streaming: boolean;
}

export class QuickAskView {
  readonly element: HTMLElement;
  private readonly question = el("textarea", {
    class: "quick-question",
    rows: "2",
    placeholder: "Ask Gemma…",
    "aria-label": "Question",
    "data-testid": "quick-question",
  });
  private readonly answerBox = el("div", {
    class: "quick-answer message-body",
    "aria-live": "polite",
    "data-testid": "quick-answer",
  });
  private readonly status = el("p", { class: "quick-status", role: "status", "data-testid": "quick-status" });
  private readonly stopButton = el("button", { type: "button", "data-testid": "quick-stop", hidden: "" }, "Stop");
  private readonly openButton = el(
    "button",
    { type: "button", class: "primary", "data-testid": "quick-open", disabled: "" },
    "Open in Gemma Desk",
  );
  private readonly talkButton = el(
    "button",
    {
      type: "button",
      "data-testid": "quick-talk",
      "aria-label": "Hold to talk",
      title: "Hold to talk: records while held, then asks about what was said",
    },
    "Hold to talk",
  );
  private readonly actions = el("div", { class: "quick-actions" });
  /** The recording while the talk button is held (a promise: the microphone opens async). */
  private recording: Promise<Recording | null> | null = null;
  private answer: Answer | null = null;
  private conversationId: string | null = null;

  constructor(private readonly handlers: QuickAskHandlers) {
    this.actions.append(this.status, this.talkButton, this.stopButton, this.openButton);
    this.element = el(
      "main",
      { class: "quick-ask", "aria-label": "Quick ask" },
      this.question,
      this.answerBox,
      this.actions,
    );
    this.question.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        void this.ask();
      }
    });
    this.stopButton.addEventListener("click", () => void this.stop());
    // Held with the pointer, or with Space/Enter while it has the focus.
    this.talkButton.addEventListener("pointerdown", (event) => {
      if (event.button === 0) this.startTalking();
    });
    for (const end of ["pointerup", "pointerleave", "pointercancel"] as const)
      this.talkButton.addEventListener(end, () => void this.stopTalking());
    this.talkButton.addEventListener("keydown", (event) => {
      if ((event.key === " " || event.key === "Enter") && !event.repeat) {
        event.preventDefault();
        this.startTalking();
      }
    });
    this.talkButton.addEventListener("keyup", (event) => {
      if (event.key === " " || event.key === "Enter") void this.stopTalking();
    });
    this.openButton.addEventListener("click", () => void this.openInMain());
    this.element.ownerDocument.addEventListener("keydown", this.onKey);
  }

  /** Puts the cursor in the question (the shortcut opened the window). */
  focus(): void {
    this.question.focus();
  }

  /** Starts recording while the talk button is held. */
  startTalking(): void {
    if (this.recording || this.answer?.streaming) return;
    this.talkButton.classList.add("active");
    this.talkButton.setAttribute("aria-pressed", "true");
    this.setStatus("Listening… release to ask.");
    this.recording = this.handlers.record().catch((error: unknown) => {
      this.setStatus(errorMessage(error));
      return null;
    });
  }

  /** The talk button was let go: the clip is asked about (with any typed words). */
  async stopTalking(): Promise<void> {
    const pending = this.recording;
    if (!pending) return;
    this.recording = null;
    this.talkButton.classList.remove("active");
    this.talkButton.setAttribute("aria-pressed", "false");
    const recording = await pending;
    if (!recording) return;
    try {
      const wav = await recording.stop();
      const id = await this.handlers.attach(wav);
      await this.ask([id]);
    } catch (error) {
      this.setStatus(`Could not use the recording: ${errorMessage(error)}`);
    }
  }

  /** Sends the typed question (and a recording); the answer streams in through `onGeneration`. */
  async ask(attachmentIds: string[] = []): Promise<void> {
    const text = this.question.value.trim();
    if ((!text && attachmentIds.length === 0) || this.answer?.streaming) return;
    this.setStatus("Thinking…");
    try {
      const sent = await this.handlers.send(this.conversationId, text, attachmentIds);
      this.conversationId = sent.conversation.id;
      this.answer = {
        conversationId: sent.conversation.id,
        messageId: sent.assistantMessageId,
        generationId: sent.generationId,
        text: "",
        streaming: true,
      };
      this.question.value = "";
      this.render();
    } catch (error) {
      // The question stays in the field to send again.
      this.setStatus(errorMessage(error));
    }
  }

  /** An answer's progress, from the backend (answers of other windows are ignored). */
  onGeneration(event: GenerationEvent): void {
    const answer = this.answer;
    if (!answer || event.messageId !== answer.messageId) return;
    switch (event.type) {
      case "prefill":
        return;
      case "delta":
        answer.text += event.delta;
        this.setStatus("");
        break;
      case "done":
        answer.streaming = false;
        this.setStatus("");
        break;
      case "error":
        answer.streaming = false;
        this.setStatus(event.error.message);
        break;
    }
    this.render();
  }

  private async stop(): Promise<void> {
    if (!this.answer?.streaming) return;
    await this.handlers.stop(this.answer.generationId).catch((error: unknown) => this.setStatus(errorMessage(error)));
  }

  private async openInMain(): Promise<void> {
    if (!this.conversationId) return;
    try {
      await this.handlers.handOver(this.conversationId);
      // The chat goes on in the main window; this window starts afresh next time.
      this.conversationId = null;
      this.answer = null;
      this.setStatus("");
      this.render();
    } catch (error) {
      this.setStatus(errorMessage(error));
    }
  }

  private readonly onKey = (event: KeyboardEvent) => {
    if (event.key !== "Escape" || event.defaultPrevented) return;
    event.preventDefault();
    void this.handlers.hide();
  };

  destroy(): void {
    this.element.ownerDocument.removeEventListener("keydown", this.onKey);
  }

  private setStatus(text: string): void {
    this.status.textContent = text;
  }

  private render(): void {
    const answer = this.answer;
    this.stopButton.hidden = !answer?.streaming;
    this.openButton.disabled = this.conversationId === null;
    if (!answer) {
      this.answerBox.replaceChildren();
      this.actions.querySelector('[data-testid="read-aloud"]')?.remove();
      return;
    }
    const { answer: words } = splitThinking(answer.text, answer.streaming);
    this.answerBox.replaceChildren(renderMarkdown(words).fragment);
    const speaker = this.actions.querySelector('[data-testid="read-aloud"]');
    if (answer.streaming) speaker?.remove();
    else if (speaker?.getAttribute("data-speech-id") !== answer.messageId) {
      speaker?.remove();
      this.openButton.before(readAloudButton(answer.messageId, () => answer.text));
    }
  }
}

/** Mounts the window on the real bridge. */
export async function mountQuickAsk(root: HTMLElement): Promise<QuickAskView> {
  const view = new QuickAskView({
    send: (conversationId, text, attachmentIds) => api.sendMessage({ conversationId, text, attachmentIds }),
    record: () => startRecording(),
    attach: async (wav) => (await api.addPastedFile(wav, "Quick ask recording.wav")).id,
    stop: (generationId) => api.stopGeneration(generationId),
    handOver: (conversationId) => api.quickAskHandOver(conversationId),
    hide: () => api.hideQuickAsk(),
  });
  root.replaceChildren(view.element);
  const unlisten: UnlistenFn[] = [];
  try {
    unlisten.push(await api.onGeneration((event) => view.onGeneration(event)));
    unlisten.push(await api.onQuickAskShown(() => view.focus()));
    await readAloud.start((message) => view.element.querySelector(".quick-status")?.replaceChildren(message));
  } catch (error) {
    view.element
      .querySelector(".quick-status")
      ?.replaceChildren(`Live updates are unavailable: ${errorMessage(error)}`);
  }
  view.focus();
  return view;
}
