import { describe, expect, it } from "vitest";

import { LIMITS, SETTINGS } from "../test/backend";
import { validateSettings } from "./settings";

describe("validateSettings", () => {
  it("accepts the defaults", () => {
    expect(validateSettings(SETTINGS, LIMITS)).toEqual({});
  });

  it("names each invalid field in words", () => {
    const errors = validateSettings(
      {
        ...SETTINGS,
        temperature: -1,
        topP: 0,
        topK: 2.5,
        maxTokens: Number.NaN,
        contextLength: 100,
        imageTokenBudget: 300,
      },
      LIMITS,
    );
    expect(errors).toEqual({
      temperature: "Temperature must be between 0 and 2.",
      topP: "Top P must be between 0.01 and 1.",
      topK: "Top K must be a whole number.",
      maxTokens: "Maximum answer length must be a number.",
      contextLength: "Context length must be between 512 and 131,072.",
      imageTokenBudget: "Image detail must be one of 70, 140, 280, 560, 1120.",
    });
  });

  it("keeps answers within the context", () => {
    expect(validateSettings({ ...SETTINGS, maxTokens: 9000, contextLength: 8192 }, LIMITS).maxTokens).toBe(
      "The maximum answer length cannot exceed the context length.",
    );
  });
});
