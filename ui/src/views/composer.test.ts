import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { COUNT_DELAY_MS, Composer, type ComposerHandlers } from "./composer";

let handlers: { [K in keyof ComposerHandlers]: ReturnType<typeof vi.fn> };
let composer: Composer;

beforeEach(() => {
  handlers = {
    send: vi.fn(),
    stop: vi.fn(),
    attach: vi.fn(),
    pasteImages: vi.fn(),
    pasteFromClipboard: vi.fn(),
    removeAttachment: vi.fn(),
    countTokens: vi.fn(),
  };
  composer = new Composer(handlers as unknown as ComposerHandlers);
  document.body.replaceChildren(composer.element);
  composer.setState({ generating: false, blockedReason: null, vision: true, room: null });
});

function key(key: string, init: KeyboardEventInit = {}): KeyboardEvent {
  const event = new KeyboardEvent("keydown", { key, bubbles: true, cancelable: true, ...init });
  composer.textarea.dispatchEvent(event);
  return event;
}

function write(text: string): void {
  composer.textarea.value = text;
  composer.textarea.dispatchEvent(new Event("input", { bubbles: true }));
}

const button = (testId: string) =>
  composer.element.querySelector<HTMLButtonElement>(`[data-testid="${testId}"]`) as HTMLButtonElement;

describe("composer keyboard", () => {
  it("sends the text on Enter", () => {
    write("Hello");
    const event = key("Enter");
    expect(event.defaultPrevented).toBe(true);
    expect(handlers.send).toHaveBeenCalledWith("Hello");
  });

  it("leaves Shift+Enter to insert a new line", () => {
    write("Hello");
    const event = key("Enter", { shiftKey: true });
    expect(event.defaultPrevented).toBe(false);
    expect(handlers.send).not.toHaveBeenCalled();
  });

  it("does not send while an input method is composing", () => {
    write("にほん");
    const event = key("Enter", { isComposing: true });
    expect(event.defaultPrevented).toBe(false);
    expect(handlers.send).not.toHaveBeenCalled();
  });

  it("does not send empty or whitespace-only text", () => {
    write("   \n ");
    key("Enter");
    expect(handlers.send).not.toHaveBeenCalled();
    expect(button("send").disabled).toBe(true);
  });

  it("sends attachments without text", () => {
    composer.setAttachments([
      {
        id: "p",
        name: "a.png",
        mime: "image/png",
        width: 1,
        height: 1,
        byteSize: 1,
        thumbnail: "data:image/png;base64,AA",
      },
    ]);
    key("Enter");
    expect(handlers.send).toHaveBeenCalledWith("");
  });

  it("shows Stop instead of Send while generating, and Esc stops", () => {
    composer.setState({ generating: true, blockedReason: null, vision: true, room: null });
    write("next question");
    expect(button("send").hidden).toBe(true);
    expect(button("stop").hidden).toBe(false);
    key("Enter");
    expect(handlers.send).not.toHaveBeenCalled();
    key("Escape");
    expect(handlers.stop).toHaveBeenCalledTimes(1);
    button("stop").click();
    expect(handlers.stop).toHaveBeenCalledTimes(2);
  });

  it("explains why sending is blocked and disables Send", () => {
    composer.setState({ generating: false, blockedReason: "Loading the model: weights", vision: true, room: null });
    write("hi");
    key("Enter");
    expect(handlers.send).not.toHaveBeenCalled();
    expect(button("send").disabled).toBe(true);
    expect(composer.element.querySelector("#composer-hint")?.textContent).toBe("Loading the model: weights");
  });

  it("labels every control", () => {
    for (const control of composer.element.querySelectorAll("button, textarea")) {
      expect(control.getAttribute("aria-label")).toBeTruthy();
    }
  });
});

describe("the draft's token count", () => {
  const count = () => composer.element.querySelector<HTMLElement>('[data-testid="token-count"]') as HTMLElement;

  beforeEach(() => {
    vi.useFakeTimers();
    composer.setState({ generating: false, blockedReason: null, vision: true, room: 8000 });
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it("shows the tokens and the room left once typing pauses, counted once", async () => {
    handlers.countTokens.mockResolvedValue(1234);
    write("Hel");
    write("Hello the");
    write("Hello there");
    expect(handlers.countTokens).not.toHaveBeenCalled();
    expect(count().hidden).toBe(true);
    await vi.advanceTimersByTimeAsync(COUNT_DELAY_MS);
    expect(handlers.countTokens).toHaveBeenCalledTimes(1);
    expect(handlers.countTokens).toHaveBeenCalledWith("Hello there");
    expect(count().hidden).toBe(false);
    expect(count().textContent).toBe("1,234 tokens · 6,766 left");
    // The room follows the conversation (an answer came) without counting again.
    composer.setState({ generating: false, blockedReason: null, vision: true, room: 1000 });
    expect(count().textContent).toBe("1,234 tokens · 234 over");
    expect(count().classList.contains("over")).toBe(true);
    expect(handlers.countTokens).toHaveBeenCalledTimes(1);
  });

  it("drops a count that comes back after the draft changed", async () => {
    let answerFirst: (tokens: number) => void = () => {};
    handlers.countTokens
      .mockReturnValueOnce(new Promise<number>((resolve) => (answerFirst = resolve)))
      .mockResolvedValueOnce(2);
    write("a long draft that takes a while");
    await vi.advanceTimersByTimeAsync(COUNT_DELAY_MS);
    write("hi there");
    await vi.advanceTimersByTimeAsync(COUNT_DELAY_MS);
    expect(count().textContent).toBe("2 tokens · 7,998 left");
    answerFirst(7);
    await vi.advanceTimersByTimeAsync(0);
    expect(count().textContent).toBe("2 tokens · 7,998 left");
  });

  it("shows nothing without a model, for an empty draft, or when counting fails", async () => {
    handlers.countTokens.mockResolvedValue(3);
    composer.setState({ generating: false, blockedReason: "No model yet.", vision: true, room: null });
    write("one two three");
    await vi.advanceTimersByTimeAsync(COUNT_DELAY_MS);
    expect(handlers.countTokens).not.toHaveBeenCalled();
    expect(count().hidden).toBe(true);

    // The model is ready: the draft already written is counted.
    composer.setState({ generating: false, blockedReason: null, vision: true, room: 100 });
    await vi.advanceTimersByTimeAsync(COUNT_DELAY_MS);
    expect(count().textContent).toBe("3 tokens · 97 left");

    composer.setText("");
    expect(count().hidden).toBe(true);
    handlers.countTokens.mockRejectedValue(new Error("no model is loaded"));
    write("again");
    await vi.advanceTimersByTimeAsync(COUNT_DELAY_MS);
    expect(count().hidden).toBe(true);
  });
});
