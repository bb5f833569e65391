// @vitest-environment jsdom
// The quick-ask window: a question, its answer streaming in, Esc, and the hand-over.
// It renders model output through DOMPurify, which needs jsdom (see test/window.ts).
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { ApiError, type GenerationEvent, type Sent } from "../api";
import { message, usage } from "../test/backend";
import { QuickAskView, type QuickAskHandlers } from "./quick";
import { QuickAskPanel } from "./settings-panel";

vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));

const settle = async () => {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 0));
};

function sent(conversationId: string, turn: number): Sent {
  return {
    conversation: {
      id: conversationId,
      title: "Capital of France",
      createdAt: 0,
      updatedAt: 0,
      pinned: false,
      messageCount: 2 * turn,
      preview: "",
    } as unknown as Sent["conversation"],
    userMessage: message({ id: `u${turn}`, conversationId, role: "user", text: "question" }),
    assistantMessageId: `a${turn}`,
    generationId: turn,
  };
}

const delta = (messageId: string, text: string): GenerationEvent => ({
  type: "delta",
  generationId: 1,
  conversationId: "c1",
  messageId,
  delta: text,
  tokenCount: 1,
});
const done = (messageId: string): GenerationEvent => ({
  type: "done",
  generationId: 1,
  conversationId: "c1",
  messageId,
  usage: usage(),
  contextWindow: 8192,
});

const WAV = new Uint8Array([82, 73, 70, 70]);
let recording: { stop: ReturnType<typeof vi.fn>; cancel: ReturnType<typeof vi.fn> };
let handlers: { [K in keyof QuickAskHandlers]: ReturnType<typeof vi.fn> };
let view: QuickAskView;
const $ = <T extends HTMLElement = HTMLElement>(id: string) => view.element.querySelector<T>(`[data-testid="${id}"]`);

function ask(text: string): void {
  const field = $<HTMLTextAreaElement>("quick-question");
  if (!field) throw new Error("no question field");
  field.value = text;
  field.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true, cancelable: true }));
}

beforeEach(() => {
  recording = { stop: vi.fn(() => Promise.resolve(WAV)), cancel: vi.fn() };
  let turn = 0;
  handlers = {
    send: vi.fn((conversationId: string | null) => Promise.resolve(sent(conversationId ?? "c1", ++turn))),
    stop: vi.fn(() => Promise.resolve(true)),
    handOver: vi.fn(() => Promise.resolve()),
    record: vi.fn(() => Promise.resolve(recording)),
    attach: vi.fn(() => Promise.resolve("p1")),
    hide: vi.fn(() => Promise.resolve()),
  };
  view = new QuickAskView(handlers as unknown as QuickAskHandlers);
  document.body.replaceChildren(view.element);
});

afterEach(() => view.destroy());

describe("the quick-ask window", () => {
  it("sends the question as a new chat and streams the answer in", async () => {
    ask("What is the capital of France?");
    await settle();
    expect(handlers.send).toHaveBeenCalledWith(null, "What is the capital of France?", []);
    expect($<HTMLTextAreaElement>("quick-question")?.value).toBe("");
    expect($("quick-stop")?.hidden).toBe(false);
    view.onGeneration(delta("a1", "The capital is **Paris**."));
    expect($("quick-answer")?.textContent?.trim()).toBe("The capital is Paris.");
    expect($("quick-answer")?.querySelector("strong")?.textContent).toBe("Paris");
    // Another window's answer does not show here.
    view.onGeneration(delta("elsewhere", "Not this."));
    expect($("quick-answer")?.textContent?.trim()).toBe("The capital is Paris.");
    view.onGeneration(done("a1"));
    expect($("quick-stop")?.hidden).toBe(true);
    expect($("read-aloud")).not.toBeNull();
  });

  it("continues the same chat with a follow-up", async () => {
    ask("First?");
    await settle();
    view.onGeneration(done("a1"));
    ask("And then?");
    await settle();
    expect(handlers.send).toHaveBeenLastCalledWith("c1", "And then?", []);
  });

  it("ignores an empty question and one sent while an answer streams", async () => {
    ask("   ");
    await settle();
    expect(handlers.send).not.toHaveBeenCalled();
    ask("One");
    await settle();
    ask("Two");
    await settle();
    expect(handlers.send).toHaveBeenCalledTimes(1);
    expect($<HTMLTextAreaElement>("quick-question")?.value).toBe("Two");
  });

  it("keeps the question and says why when sending fails", async () => {
    handlers.send.mockRejectedValue(
      new ApiError("noModel", "no model is loaded yet: download one or choose its folder first"),
    );
    ask("Hello?");
    await settle();
    expect($("quick-status")?.textContent).toBe("no model is loaded yet: download one or choose its folder first");
    expect($<HTMLTextAreaElement>("quick-question")?.value).toBe("Hello?");
    expect($<HTMLButtonElement>("quick-open")?.disabled).toBe(true);
  });

  it("stops the answer with Stop", async () => {
    ask("Long?");
    await settle();
    $("quick-stop")?.click();
    await settle();
    expect(handlers.stop).toHaveBeenCalledWith(1);
  });

  it("hands the chat over to the main window and starts afresh", async () => {
    expect($<HTMLButtonElement>("quick-open")?.disabled).toBe(true);
    ask("Capital?");
    await settle();
    view.onGeneration(delta("a1", "Paris."));
    view.onGeneration(done("a1"));
    $<HTMLButtonElement>("quick-open")?.click();
    await settle();
    expect(handlers.handOver).toHaveBeenCalledWith("c1");
    expect($("quick-answer")?.textContent).toBe("");
    expect($<HTMLButtonElement>("quick-open")?.disabled).toBe(true);
    ask("New one?");
    await settle();
    expect(handlers.send).toHaveBeenLastCalledWith(null, "New one?", []);
  });

  it("says why a hand-over failed (the chat was deleted meanwhile)", async () => {
    handlers.handOver.mockRejectedValue(new ApiError("invalidInput", "This chat was deleted in the main window."));
    ask("Capital?");
    await settle();
    view.onGeneration(done("a1"));
    $<HTMLButtonElement>("quick-open")?.click();
    await settle();
    expect($("quick-status")?.textContent).toBe("This chat was deleted in the main window.");
  });

  it("is dismissed with Esc", () => {
    document.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true, cancelable: true }));
    expect(handlers.hide).toHaveBeenCalledTimes(1);
  });
});

describe("hold to talk", () => {
  const talk = () => $<HTMLButtonElement>("quick-talk") as HTMLButtonElement;
  const pointer = (type: string) => talk().dispatchEvent(new MouseEvent(type, { bubbles: true, button: 0 }));

  it("records while held and asks about the clip when let go", async () => {
    pointer("pointerdown");
    await settle();
    expect(handlers.record).toHaveBeenCalledTimes(1);
    expect(talk().getAttribute("aria-pressed")).toBe("true");
    expect($("quick-status")?.textContent).toBe("Listening… release to ask.");
    expect(recording.stop).not.toHaveBeenCalled();
    pointer("pointerup");
    await settle();
    expect(recording.stop).toHaveBeenCalledTimes(1);
    expect(handlers.attach).toHaveBeenCalledWith(WAV);
    expect(handlers.send).toHaveBeenCalledWith(null, "", ["p1"]);
    expect(talk().getAttribute("aria-pressed")).toBe("false");
  });

  it("sends typed words with the clip, and works held with Space", async () => {
    const field = $<HTMLTextAreaElement>("quick-question") as HTMLTextAreaElement;
    field.value = "Translate this";
    talk().dispatchEvent(new KeyboardEvent("keydown", { key: " ", bubbles: true, cancelable: true }));
    // Key repeat while held opens nothing more.
    talk().dispatchEvent(new KeyboardEvent("keydown", { key: " ", repeat: true, bubbles: true, cancelable: true }));
    await settle();
    talk().dispatchEvent(new KeyboardEvent("keyup", { key: " ", bubbles: true }));
    await settle();
    expect(handlers.record).toHaveBeenCalledTimes(1);
    expect(handlers.send).toHaveBeenCalledWith(null, "Translate this", ["p1"]);
  });

  it("says why in words when the microphone cannot be used, and sends nothing", async () => {
    handlers.record.mockRejectedValue(new Error("No microphone was found. Connect one and try again."));
    pointer("pointerdown");
    await settle();
    pointer("pointerup");
    await settle();
    expect($("quick-status")?.textContent).toBe("No microphone was found. Connect one and try again.");
    expect(handlers.attach).not.toHaveBeenCalled();
    expect(handlers.send).not.toHaveBeenCalled();
  });
});

describe("Settings → Quick ask", () => {
  const ok = { shortcut: "Alt+Space", registered: true, error: null };
  function panelWith(set: (shortcut: string) => Promise<unknown>) {
    const panel = new QuickAskPanel({
      load: vi.fn(() => Promise.resolve(ok)),
      set: vi.fn(set) as unknown as (shortcut: string) => Promise<typeof ok>,
      open: vi.fn(() => Promise.resolve()),
    });
    document.body.append(panel.element);
    return panel;
  }
  const field = (panel: QuickAskPanel) =>
    panel.element.querySelector<HTMLInputElement>('[data-testid="quick-ask-shortcut"]') as HTMLInputElement;
  const status = (panel: QuickAskPanel) => panel.element.querySelector('[data-testid="quick-ask-status"]');

  it("shows the shortcut in use", async () => {
    const panel = panelWith(() => Promise.resolve(ok));
    await panel.refresh();
    expect(field(panel).value).toBe("Alt+Space");
    expect(status(panel)?.textContent).toBe("Alt+Space opens quick ask from any program.");
  });

  it("applies a new shortcut at once", async () => {
    const set = vi.fn((shortcut: string) => Promise.resolve({ shortcut, registered: true, error: null }));
    const panel = panelWith(set);
    await panel.refresh();
    field(panel).value = "Ctrl+Shift+K";
    panel.element.querySelector<HTMLButtonElement>('[data-testid="quick-ask-use"]')?.click();
    await settle();
    expect(set).toHaveBeenCalledWith("Ctrl+Shift+K");
    expect(status(panel)?.textContent).toBe("Ctrl+Shift+K opens quick ask from any program.");
    expect(status(panel)?.classList.contains("form-error")).toBe(false);
  });

  it("says in words when the system refuses it, and keeps what was typed", async () => {
    const error = "Alt+Tab could not be used: another program or the system already uses it. Choose another one.";
    const panel = panelWith((shortcut) => Promise.resolve({ shortcut, registered: false, error }));
    await panel.refresh();
    field(panel).value = "Alt+Tab";
    field(panel).dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true, cancelable: true }));
    await settle();
    expect(field(panel).value).toBe("Alt+Tab");
    expect(status(panel)?.textContent).toBe(error);
    expect(status(panel)?.classList.contains("form-error")).toBe(true);
  });
});
