/**
 * The quick-ask window (ui/quick.html): a question, its answer streaming in, "Open in Gemma
 * Desk" to continue it in the main window, Esc to dismiss. The question starts a chat like the
 * main window's, through the same engine; a follow-up continues it. docs/QUICK_ASK.md.
 */
import * as api from "../api";
import type { GenerationEvent, Sent, UnlistenFn } from "../api";
import { errorMessage } from "../api";
import { el } from "../dom";
import { renderMarkdown } from "../markdown/render";
import { splitThinking } from "../markdown/thinking";
import { readAloud, readAloudButton } from "../views/read-aloud";

/** What the window asks of the backend (the real bridge in the app, fakes in tests). */
export interface QuickAskHandlers {
  send(conversationId: string | null, text: string): Promise<Sent>;
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
  private readonly actions = el("div", { class: "quick-actions" });
  private answer: Answer | null = null;
  private conversationId: string | null = null;

  constructor(private readonly handlers: QuickAskHandlers) {
    this.actions.append(this.status, this.stopButton, this.openButton);
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
    this.openButton.addEventListener("click", () => void this.openInMain());
    this.element.ownerDocument.addEventListener("keydown", this.onKey);
  }

  /** Puts the cursor in the question (the shortcut opened the window). */
  focus(): void {
    this.question.focus();
  }

  /** Sends the typed question; the answer streams in through `onGeneration`. */
  async ask(): Promise<void> {
    const text = this.question.value.trim();
    if (!text || this.answer?.streaming) return;
    this.setStatus("Thinking…");
    try {
      const sent = await this.handlers.send(this.conversationId, text);
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
    send: (conversationId, text) => api.sendMessage({ conversationId, text, attachmentIds: [] }),
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
