import { beforeEach, describe, expect, it, vi } from "vitest";

import { Composer, type ComposerHandlers } from "./composer";

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
  };
  composer = new Composer(handlers as unknown as ComposerHandlers);
  document.body.replaceChildren(composer.element);
  composer.setState({ generating: false, blockedReason: null, vision: true });
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
    composer.setState({ generating: true, blockedReason: null, vision: true });
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
    composer.setState({ generating: false, blockedReason: "Loading the model: weights", vision: true });
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
