import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { MAX_RECORDING_SECONDS } from "../audio/recorder";
import { PLAY_STALL_MS } from "./audio-chip";
import { COUNT_DELAY_MS, Composer, RECORDING_TICK_MS, type ComposerHandlers } from "./composer";

let handlers: { [K in keyof ComposerHandlers]: ReturnType<typeof vi.fn> };
let composer: Composer;

beforeEach(() => {
  handlers = {
    send: vi.fn(),
    stop: vi.fn(),
    attach: vi.fn(),
    pasteFiles: vi.fn(),
    pasteFromClipboard: vi.fn(),
    removeAttachment: vi.fn(),
    countTokens: vi.fn(),
    audioFile: vi.fn(),
    record: vi.fn(),
    recorded: vi.fn(),
    recordingFailed: vi.fn(),
    tooLong: vi.fn(),
  };
  composer = new Composer(handlers as unknown as ComposerHandlers);
  document.body.replaceChildren(composer.element);
  composer.setState({ generating: false, blockedReason: null, vision: true, audio: true, room: null });
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
        kind: "image",
        mime: "image/png",
        width: 1,
        height: 1,
        durationMs: null,
        byteSize: 1,
        thumbnail: "data:image/png;base64,AA",
        notice: null,
      },
    ]);
    key("Enter");
    expect(handlers.send).toHaveBeenCalledWith("");
  });

  it("shows Stop instead of Send while generating, and Esc stops", () => {
    composer.setState({ generating: true, blockedReason: null, vision: true, audio: true, room: null });
    write("next question");
    expect(button("send").hidden).toBe(true);
    expect(button("stop").hidden).toBe(false);
    expect(button("stop").textContent).toBe("StopEsc");
    expect(button("stop").getAttribute("aria-label")).toBe("Stop generating (Esc)");
    key("Enter");
    expect(handlers.send).not.toHaveBeenCalled();
    key("Escape");
    expect(handlers.stop).toHaveBeenCalledTimes(1);
    button("stop").click();
    expect(handlers.stop).toHaveBeenCalledTimes(2);
  });

  it("explains why sending is blocked and disables Send", () => {
    composer.setState({
      generating: false,
      blockedReason: "Loading the model: weights",
      vision: true,
      audio: true,
      room: null,
    });
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
    composer.setState({ generating: false, blockedReason: null, vision: true, audio: true, room: 8000 });
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
    expect(handlers.countTokens).toHaveBeenCalledWith("Hello there", []);
    expect(count().hidden).toBe(false);
    expect(count().textContent).toBe("1,234 tokens · 6,766 left");
    // The room follows the conversation (an answer came) without counting again.
    composer.setState({ generating: false, blockedReason: null, vision: true, audio: true, room: 1000 });
    expect(count().textContent).toBe("1,234 tokens · 234 over");
    expect(count().classList.contains("over")).toBe(true);
    expect(handlers.countTokens).toHaveBeenCalledTimes(1);
  });

  it("keeps a draft too long for the context: Send off, Enter only explains, nothing sent", async () => {
    handlers.countTokens.mockResolvedValue(9000);
    write("a very long message");
    await vi.advanceTimersByTimeAsync(COUNT_DELAY_MS);
    expect(count().textContent).toBe("9,000 tokens · 1,000 over");
    expect(button("send").disabled).toBe(true);
    const hint = composer.element.querySelector(".composer-hint") as HTMLElement;
    expect(hint.textContent).toBe(
      "Too long to send: 1,000 tokens more than the context has room for. Shorten it, or raise the context length.",
    );
    expect(hint.classList.contains("over")).toBe(true);
    const event = key("Enter");
    expect(event.defaultPrevented).toBe(true);
    button("send").click();
    expect(handlers.send).not.toHaveBeenCalled();
    expect(handlers.tooLong).toHaveBeenCalledTimes(1);
    expect(handlers.tooLong).toHaveBeenCalledWith(9000);
    expect(composer.text()).toBe("a very long message");
    // Shortened to fit: Send comes back, and Enter sends.
    handlers.countTokens.mockResolvedValue(7000);
    write("a shorter message");
    await vi.advanceTimersByTimeAsync(COUNT_DELAY_MS);
    expect(button("send").disabled).toBe(false);
    expect(hint.textContent).toBe("Enter to send · Shift+Enter for a new line");
    key("Enter");
    expect(handlers.send).toHaveBeenCalledWith("a shorter message");
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
    composer.setState({ generating: false, blockedReason: "No model yet.", vision: true, audio: true, room: null });
    write("one two three");
    await vi.advanceTimersByTimeAsync(COUNT_DELAY_MS);
    expect(handlers.countTokens).not.toHaveBeenCalled();
    expect(count().hidden).toBe(true);

    // The model is ready: the draft already written is counted.
    composer.setState({ generating: false, blockedReason: null, vision: true, audio: true, room: 100 });
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

const clip = {
  id: "a1",
  name: "voicemail.m4a",
  kind: "audio" as const,
  mime: "audio/mp4",
  width: null,
  height: null,
  durationMs: 42_300,
  byteSize: 300_000,
  thumbnail: null,
  notice: null,
};

describe("audio attachments", () => {
  it("shows an audio file as a chip with its name, length and a play button", async () => {
    handlers.audioFile.mockResolvedValue(new Blob(["RIFF"], { type: "audio/wav" }));
    composer.setAttachments([{ ...clip, notice: "Only the first 10 min of 14 min are used." }]);
    const chip = composer.element.querySelector<HTMLElement>('[data-testid="pending-audio"]') as HTMLElement;
    expect(chip.textContent).toContain("voicemail.m4a");
    expect(chip.querySelector('[data-testid="pending-audio-duration"]')?.textContent).toBe("0:42");
    expect(chip.querySelector('[data-testid="pending-audio-notice"]')?.textContent).toBe(
      "Only the first 10 min of 14 min are used.",
    );
    expect(composer.element.querySelector("img")).toBeNull();

    button("pending-audio-play").click();
    await vi.waitFor(() => expect(chip.querySelector("audio")).not.toBeNull());
    expect(handlers.audioFile).toHaveBeenCalledWith(expect.objectContaining({ id: "a1" }));
    expect(chip.querySelector("audio")?.getAttribute("src")).toMatch(/^blob:/);
  });

  it("says so on the chip when the file cannot be fetched", async () => {
    handlers.audioFile.mockRejectedValue(new Error("gone"));
    composer.setAttachments([clip]);
    button("pending-audio-play").click();
    const chip = composer.element.querySelector<HTMLElement>('[data-testid="pending-audio"]') as HTMLElement;
    await vi.waitFor(() => expect(chip.dataset.state).toBe("unavailable"));
    expect(button("pending-audio-play").getAttribute("aria-label")).toBe("voicemail.m4a cannot be played");
  });

  it("gives a short clip's length in tenths of a second, not rounded up to a clock's next second", () => {
    composer.setAttachments([{ ...clip, durationMs: 1_140 }]);
    const length = composer.element.querySelector('[data-testid="pending-audio-duration"]');
    expect(length?.textContent).toBe("1.1 s");
  });

  it("says in words when the recording cannot be played (no sound output)", async () => {
    handlers.audioFile.mockResolvedValue(new Blob(["RIFF"], { type: "audio/wav" }));
    vi.spyOn(HTMLMediaElement.prototype, "play").mockRejectedValue(new Error("no audio sink"));
    composer.setAttachments([clip]);
    const status = composer.element.querySelector<HTMLElement>('[data-testid="pending-audio-status"]');
    expect(status?.hidden).toBe(true);
    button("pending-audio-play").click();
    await vi.waitFor(() => expect(status?.hidden).toBe(false));
    expect(status?.textContent).toBe("Cannot play: no sound output is available on this computer.");
    expect(status?.getAttribute("role")).toBe("status");
    vi.restoreAllMocks();
  });

  it("says that nothing is heard when playing starts but the clock never moves", async () => {
    handlers.audioFile.mockResolvedValue(new Blob(["RIFF"], { type: "audio/wav" }));
    vi.spyOn(HTMLMediaElement.prototype, "play").mockResolvedValue(undefined);
    vi.spyOn(HTMLMediaElement.prototype, "paused", "get").mockReturnValue(false);
    const pause = vi.spyOn(HTMLMediaElement.prototype, "pause").mockImplementation(() => {});
    composer.setAttachments([clip]);
    const chip = composer.element.querySelector<HTMLElement>('[data-testid="pending-audio"]') as HTMLElement;
    const status = chip.querySelector<HTMLElement>('[data-testid="pending-audio-status"]');
    vi.useFakeTimers();
    try {
      button("pending-audio-play").click();
      await vi.advanceTimersByTimeAsync(10);
      expect(chip.dataset.state).toBe("playing");
      expect(status?.hidden).toBe(true);
      await vi.advanceTimersByTimeAsync(PLAY_STALL_MS);
      expect(status?.textContent).toBe("Nothing is playing: check that a sound output is connected.");
      expect(chip.dataset.state).toBe("unavailable");
      expect(pause).toHaveBeenCalled();
    } finally {
      vi.useRealTimers();
      vi.restoreAllMocks();
    }
  });

  it("hands pasted audio files over like pasted images", () => {
    const file = new File([new Uint8Array([1])], "note.wav", { type: "audio/wav" });
    const paste = new Event("paste", { bubbles: true, cancelable: true }) as ClipboardEvent;
    Object.defineProperty(paste, "clipboardData", { value: { files: [file], getData: () => "" } });
    composer.textarea.dispatchEvent(paste);
    expect(paste.defaultPrevented).toBe(true);
    expect(handlers.pasteFiles).toHaveBeenCalledWith([file]);
  });
});

describe("the microphone", () => {
  /** A recording whose time and level the test moves. */
  function fakeRecording() {
    const recording = {
      seconds: 0,
      loudness: 0,
      elapsedSeconds: () => recording.seconds,
      level: () => recording.loudness,
      stop: vi.fn(() => Promise.resolve(new Uint8Array([82, 73, 70, 70]))),
      cancel: vi.fn(),
    };
    return recording;
  }

  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("records on a press, shows the time and level, and attaches the WAV on the second press", async () => {
    const recording = fakeRecording();
    handlers.record.mockResolvedValue(recording);
    write("what is said here?");
    expect(button("record").getAttribute("aria-label")).toBe("Record audio");

    button("record").click();
    await vi.advanceTimersByTimeAsync(0);
    const bar = composer.element.querySelector<HTMLElement>('[data-testid="recording"]') as HTMLElement;
    expect(bar.hidden).toBe(false);
    expect(button("record").getAttribute("aria-pressed")).toBe("true");
    expect(button("record").getAttribute("aria-label")).toBe("Stop recording");
    expect(button("send").disabled).toBe(true);

    recording.seconds = 2.4;
    recording.loudness = 0.6;
    await vi.advanceTimersByTimeAsync(RECORDING_TICK_MS);
    expect(bar.querySelector('[data-testid="recording-time"]')?.textContent).toBe("0:02");
    expect(bar.dataset.level).toBe("0.60");

    button("record").click();
    await vi.advanceTimersByTimeAsync(0);
    expect(recording.stop).toHaveBeenCalledTimes(1);
    expect(handlers.recorded).toHaveBeenCalledWith(new Uint8Array([82, 73, 70, 70]));
    expect(bar.hidden).toBe(true);
    expect(composer.text()).toBe("what is said here?");
    expect(button("send").disabled).toBe(false);
  });

  it("stops on Esc without stopping an answer being written", async () => {
    const recording = fakeRecording();
    handlers.record.mockResolvedValue(recording);
    composer.setState({ generating: true, blockedReason: null, vision: true, audio: true, room: null });
    button("record").click();
    await vi.advanceTimersByTimeAsync(0);

    const escape = new KeyboardEvent("keydown", { key: "Escape", bubbles: true, cancelable: true });
    composer.textarea.dispatchEvent(escape);
    await vi.advanceTimersByTimeAsync(0);

    expect(escape.defaultPrevented).toBe(true);
    expect(recording.stop).toHaveBeenCalledTimes(1);
    expect(handlers.stop).not.toHaveBeenCalled();
    expect(handlers.recorded).toHaveBeenCalledTimes(1);
    key("Escape");
    expect(handlers.stop).toHaveBeenCalledTimes(1);
  });

  it("stops by itself at the longest recording", async () => {
    const recording = fakeRecording();
    handlers.record.mockResolvedValue(recording);
    button("record").click();
    await vi.advanceTimersByTimeAsync(0);
    recording.seconds = MAX_RECORDING_SECONDS;
    await vi.advanceTimersByTimeAsync(RECORDING_TICK_MS);
    expect(recording.stop).toHaveBeenCalledTimes(1);
    expect(handlers.recorded).toHaveBeenCalledTimes(1);
  });

  it("explains a denied or missing microphone and loses nothing typed", async () => {
    handlers.record.mockRejectedValue(new Error("No microphone was found. Connect one and try again."));
    write("keep me");
    button("record").click();
    await vi.advanceTimersByTimeAsync(0);
    expect(handlers.recordingFailed).toHaveBeenCalledWith("No microphone was found. Connect one and try again.");
    expect(composer.text()).toBe("keep me");
    expect(button("record").getAttribute("aria-pressed")).toBe("false");
    expect(composer.element.querySelector<HTMLElement>('[data-testid="recording"]')?.hidden).toBe(true);
  });

  it("is off, saying why, for a model that does not hear audio", () => {
    composer.setState({ generating: false, blockedReason: null, vision: true, audio: false, room: null });
    expect(button("record").disabled).toBe(true);
    expect(button("record").title).toBe("This model does not hear audio");
    expect(button("attach").disabled).toBe(false);
    expect(button("attach").title).toBe("Attach images (this model does not hear audio)");
    composer.setState({ generating: false, blockedReason: null, vision: false, audio: false, room: null });
    expect(button("attach").disabled).toBe(true);
  });
});
