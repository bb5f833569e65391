import { describe, expect, it } from "vitest";

import { splitThinking } from "./thinking";

describe("splitThinking", () => {
  it("returns plain answers untouched", () => {
    expect(splitThinking("Just an answer.")).toEqual({ thinking: null, thinkingDone: true, answer: "Just an answer." });
  });

  it("separates a finished thought from the answer", () => {
    expect(splitThinking("<|channel>thought\nLet me think.<channel|>The answer is 4.")).toEqual({
      thinking: "Let me think.",
      thinkingDone: true,
      answer: "The answer is 4.",
    });
  });

  it("reports a thought still in progress", () => {
    expect(splitThinking("<|channel>thought\nHmm, the user", true)).toEqual({
      thinking: "Hmm, the user",
      thinkingDone: false,
      answer: "",
    });
  });

  it("hides half-arrived markers while streaming, but not in finished text", () => {
    expect(splitThinking("<|chan", true).answer).toBe("");
    expect(splitThinking("<|channel>thought\nok<chan", true).thinking).toBe("ok");
    expect(splitThinking("a <|")).toMatchObject({ answer: "a <|" });
  });
});
