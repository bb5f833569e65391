import { describe, expect, it } from "vitest";

import type { GenerationEvent, Sent } from "./api";
import { FrameScheduler, Generations } from "./stream";

function manualFrames() {
  const queue: (() => void)[] = [];
  return {
    request: (callback: () => void) => void queue.push(callback),
    run: () => queue.splice(0).forEach((callback) => callback()),
    get pending() {
      return queue.length;
    },
  };
}

/** A clock that never moves: renders take no time, so no frame is ever skipped. */
const still = () => 0;

const delta = (generationId: number, messageId: string, text: string, tokenCount = 1): GenerationEvent => ({
  type: "delta",
  generationId,
  conversationId: `c${generationId}`,
  messageId,
  delta: text,
  tokenCount,
});

describe("FrameScheduler", () => {
  it("renders many marks within one frame once, with every key", () => {
    const frames = manualFrames();
    const renders: string[][] = [];
    const scheduler = new FrameScheduler<string>((keys) => renders.push(keys), frames.request, still);
    for (let i = 0; i < 500; i++) scheduler.mark(i % 2 ? "a" : "b");
    expect(frames.pending).toBe(1);
    expect(renders).toHaveLength(0);
    frames.run();
    expect(renders).toEqual([["b", "a"]]);
  });

  it("schedules a new frame for marks after a render", () => {
    const frames = manualFrames();
    let renders = 0;
    const scheduler = new FrameScheduler<string>(() => renders++, frames.request, still);
    scheduler.mark("a");
    frames.run();
    scheduler.mark("a");
    expect(frames.pending).toBe(1);
    frames.run();
    expect(renders).toBe(2);
  });

  it("skips frames after an expensive render, and never drops the last text", () => {
    const frames = manualFrames();
    let clock = 0;
    const rendered: number[] = [];
    let text = 0;
    const scheduler = new FrameScheduler<string>(
      () => {
        rendered.push(text);
        clock += 12; // a 12 ms render: the next one waits about 36 ms
      },
      frames.request,
      () => clock,
    );
    text = 1;
    scheduler.mark("a");
    frames.run();
    expect(rendered).toEqual([1]);
    for (let frame = 0; frame < 3; frame++) {
      text += 1;
      scheduler.mark("a");
      clock += 8;
      frames.run();
    }
    expect(rendered).toEqual([1]);
    clock += 16;
    frames.run();
    expect(rendered).toEqual([1, 4]);
  });

  it("flushes immediately when asked, and the pending frame then renders nothing", () => {
    const frames = manualFrames();
    let renders = 0;
    const scheduler = new FrameScheduler<string>(() => renders++, frames.request, still);
    scheduler.mark("a");
    scheduler.flush();
    expect(renders).toBe(1);
    frames.run();
    expect(renders).toBe(1);
  });
});

describe("Generations", () => {
  it("accumulates deltas into the exact final text", () => {
    const generations = new Generations();
    const pieces = ["Hel", "lo", ", ", "wör", "ld", " 👋", "\n\n```js\n", "x", "\n```"];
    pieces.forEach((piece, index) => generations.apply(delta(1, "m1", piece, index + 1)));
    expect(generations.forMessage("m1")?.text).toBe(pieces.join(""));
    expect(generations.forMessage("m1")?.tokenCount).toBe(pieces.length);
  });

  it("tracks the prompt's reading until the first token, and ignores a late report", () => {
    const generations = new Generations();
    const prefill = (done: number): GenerationEvent => ({
      type: "prefill",
      generationId: 1,
      conversationId: "c1",
      messageId: "m1",
      done,
      total: 1500,
    });
    generations.apply(prefill(0));
    generations.apply(prefill(512));
    expect(generations.forMessage("m1")?.reading).toEqual({ done: 512, total: 1500 });
    generations.apply(delta(1, "m1", "Hi"));
    expect(generations.forMessage("m1")?.reading).toBeNull();
    generations.apply(prefill(1500));
    expect(generations.forMessage("m1")?.reading).toBeNull();
    expect(generations.forMessage("m1")?.text).toBe("Hi");
  });

  it("keeps concurrent generations apart by id", () => {
    const generations = new Generations();
    generations.apply(delta(1, "m1", "one"));
    generations.apply(delta(2, "m2", "two"));
    generations.apply(delta(1, "m1", "!"));
    expect(generations.forMessage("m1")?.text).toBe("one!");
    expect(generations.forMessage("m2")?.text).toBe("two");
    expect(generations.conversationIds()).toEqual(new Set(["c1", "c2"]));
  });

  it("ends a generation on done, and a late command reply does not revive it", () => {
    const generations = new Generations();
    generations.apply(delta(7, "m7", "text"));
    const done = generations.apply({
      type: "done",
      generationId: 7,
      conversationId: "c7",
      messageId: "m7",
      contextWindow: 8192,
      usage: {
        promptTokens: 1,
        reusedTokens: 0,
        generatedTokens: 1,
        timeToFirstTokenMs: 1,
        prefillTokensPerSecond: 1,
        decodeTokensPerSecond: 1,
        stopReason: "endOfTurn",
      },
    });
    expect(done?.text).toBe("text");
    expect(generations.current()).toBeUndefined();
    const sent = { generationId: 7, assistantMessageId: "m7", conversation: { id: "c7" } } as Sent;
    expect(generations.start(sent)).toBeNull();
    expect(generations.apply(delta(7, "m7", "late"))).toBeNull();
    expect(generations.current()).toBeUndefined();
  });
});
