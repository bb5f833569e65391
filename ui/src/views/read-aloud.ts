/**
 * Read aloud: the button on each answer, and the text it speaks.
 *
 * The voice is the system's (the backend's `speak` command: `say` on macOS, `espeak-ng` on
 * Linux; docs/READ_ALOUD.md). What is spoken is what a person reads on screen: the answer
 * without its thoughts, code blocks, math or markup. One answer speaks at a time; a second
 * press, Esc, or reading another answer stops it.
 */
import MarkdownIt from "markdown-it";
import type { Token } from "markdown-it";

import { onSpeech, speak, stopSpeaking, type SpeechEvent, type UnlistenFn } from "../api";
import { iconButton } from "../dom";
import { icon } from "../icons";
import { announce } from "../live";
import { mathPlugin } from "../markdown/math";
import { splitThinking } from "../markdown/thinking";

// The renderer's parser (ui/src/markdown/render.ts) with the same math syntax, so what counts
// as code or math here is what the window shows as code or math.
const md = new MarkdownIt({ html: false, linkify: false, typographer: false, breaks: false });
md.use(mathPlugin);

/** Blocks a person does not read out: code and display math. */
const SKIPPED_BLOCKS = new Set(["fence", "code_block", "math_block", "html_block", "hr"]);
/** Where one spoken block ends and the next begins. */
const BLOCK_ENDS = new Set(["paragraph_close", "heading_close", "th_close", "td_close", "list_item_close"]);
const SENTENCE_END = /[.!?:;…。！？]["'”’)\]]*$/u;

/** The words of an answer as a person reads them, one block a line; "" when it has none. */
export function speakableText(answer: string): string {
  const text = splitThinking(answer).answer;
  const blocks: string[] = [];
  let current = "";
  const endBlock = () => {
    const block = current.replace(/\s+/g, " ").trim();
    // A heading, list item or table cell without its own full stop still gets a pause.
    if (block) blocks.push(SENTENCE_END.test(block) ? block : `${block}.`);
    current = "";
  };
  for (const token of md.parse(text, {})) {
    if (SKIPPED_BLOCKS.has(token.type)) continue;
    if (token.type === "inline") current += ` ${inlineText(token.children ?? [])}`;
    else if (BLOCK_ENDS.has(token.type)) endBlock();
  }
  endBlock();
  return blocks.join("\n");
}

function inlineText(tokens: Token[]): string {
  let out = "";
  for (const token of tokens) {
    switch (token.type) {
      case "text":
      case "code_inline":
        out += token.content;
        break;
      case "softbreak":
      case "hardbreak":
        out += " ";
        break;
      case "image":
        // The window shows an image as a link labelled with its description.
        out += inlineText(token.children ?? []);
        break;
      default:
        // Emphasis and link markers, inline math and raw HTML are not read.
        break;
    }
  }
  return out;
}

/**
 * Which answer is being read, for every button at once (one voice for the window). `start`
 * connects it to the backend's speech events and to Esc.
 */
export class ReadAloud {
  private speaking: string | null = null;
  private unlisten: UnlistenFn | null = null;
  private reportError: (message: string) => void = announce;

  constructor(private readonly root: ParentNode = document) {}

  /** Listens to the backend and to Esc; `onError` shows why a voice failed. */
  async start(onError: (message: string) => void): Promise<void> {
    this.reportError = onError;
    this.unlisten?.();
    this.unlisten = await onSpeech((event) => this.handle(event));
    document.addEventListener("keydown", this.onKey);
  }

  stopListening(): void {
    this.unlisten?.();
    this.unlisten = null;
    document.removeEventListener("keydown", this.onKey);
  }

  /** The answer being read now. */
  get current(): string | null {
    return this.speaking;
  }

  /**
   * Reads `answer` aloud as message `id`, or stops it when it is the one being read. The
   * buttons change when the backend says the voice started (its `speaking` event).
   */
  async toggle(id: string, answer: string): Promise<void> {
    if (this.speaking === id) {
      await this.stop();
      return;
    }
    const text = speakableText(answer);
    if (!text) {
      this.reportError("This answer has no text to read aloud (only code or math).");
      return;
    }
    try {
      await speak(id, text);
    } catch (error) {
      this.reportError(errorText(error));
    }
  }

  /** Stops the voice, if one speaks. */
  async stop(): Promise<void> {
    if (this.speaking === null) return;
    this.set(null);
    try {
      await stopSpeaking();
    } catch (error) {
      this.reportError(errorText(error));
    }
  }

  /** Shows every read-aloud button in the window as reading or not. */
  refresh(): void {
    for (const button of this.root.querySelectorAll<HTMLButtonElement>('[data-testid="read-aloud"]')) {
      showButton(button, button.dataset.speechId === this.speaking);
    }
  }

  private handle(event: SpeechEvent): void {
    if (event.state === "speaking") {
      this.set(event.id);
      return;
    }
    // A voice that ended is no longer current unless another one started since.
    if (this.speaking === event.id) this.set(null);
    if (event.state === "failed") this.reportError(`Could not read the answer aloud. ${event.error}`);
  }

  private readonly onKey = (event: KeyboardEvent) => {
    if (event.key !== "Escape" || this.speaking === null) return;
    void this.stop();
    announce("Stopped reading aloud");
  };

  private set(id: string | null): void {
    if (this.speaking === id) return;
    this.speaking = id;
    this.refresh();
  }
}

function errorText(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (typeof error === "object" && error !== null && "message" in error) return String(error.message);
  return String(error);
}

function showButton(button: HTMLButtonElement, on: boolean): void {
  const label = on ? "Stop reading" : "Read aloud";
  button.setAttribute("aria-label", label);
  button.title = label;
  button.setAttribute("aria-pressed", String(on));
  button.replaceChildren(icon(on ? "stop" : "speaker"));
  button.classList.toggle("active", on);
}

/** The window's one voice. */
export const readAloud = new ReadAloud();

/**
 * The "Read aloud" button of answer `id`; `answer` gives its current text. It says "Stop
 * reading" while that answer is read.
 */
export function readAloudButton(id: string, answer: () => string, voice: ReadAloud = readAloud): HTMLButtonElement {
  const button = iconButton("Read aloud", icon("speaker"), { "data-testid": "read-aloud" });
  button.dataset.speechId = id;
  showButton(button, voice.current === id);
  button.addEventListener("click", () => void voice.toggle(id, answer()));
  return button;
}
