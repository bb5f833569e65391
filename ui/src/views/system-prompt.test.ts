import "../test/dialog-polyfill";

import { describe, expect, it, vi } from "vitest";

import { describeSystemPrompt, openSystemPromptEditor, SYSTEM_PROMPT_PRESETS } from "./system-prompt";

describe("describeSystemPrompt", () => {
  it("says whether the default, none, a preset or the chat's own text applies", () => {
    expect(describeSystemPrompt(null, "Be kind.")).toEqual({
      label: "Default",
      detail: "This chat uses the default system prompt from Settings: Be kind.",
    });
    expect(describeSystemPrompt(null, "  ").detail).toContain("which is empty");
    expect(describeSystemPrompt("", "Be kind.").label).toBe("None");
    const reviewer = SYSTEM_PROMPT_PRESETS.find((p) => p.name === "Code reviewer");
    expect(describeSystemPrompt(reviewer?.text ?? "", "").label).toBe("Code reviewer");
    expect(describeSystemPrompt("Answer in French.", "")).toEqual({
      label: "Custom",
      detail: "This chat uses its own system prompt: Answer in French.",
    });
  });

  it("offers short, distinct presets, None first", () => {
    expect(SYSTEM_PROMPT_PRESETS[0]).toEqual({ name: "None", text: "" });
    const texts = SYSTEM_PROMPT_PRESETS.map((p) => p.text);
    expect(new Set(texts).size).toBe(texts.length);
    for (const { text } of SYSTEM_PROMPT_PRESETS) expect(text.length).toBeLessThan(400);
  });
});

describe("the system prompt editor", () => {
  it("closes on Esc without saving, and keeps the editor open with the reason when saving fails", async () => {
    const save = vi.fn().mockRejectedValueOnce(new Error("That chat no longer exists."));
    const closed = openSystemPromptEditor(document.body, { own: "Own words", defaultPrompt: "", maxChars: 100, save });
    const dialog = document.querySelector<HTMLDialogElement>('[data-testid="system-prompt-dialog"]');
    const text = document.querySelector<HTMLTextAreaElement>('[data-testid="system-prompt-text"]');
    expect(text?.value).toBe("Own words");
    expect(document.activeElement).toBe(text);
    document.querySelector<HTMLButtonElement>('[data-testid="system-prompt-save"]')?.click();
    await Promise.resolve();
    await Promise.resolve();
    expect(save).toHaveBeenCalledWith("Own words");
    expect(dialog?.open).toBe(true);
    expect(dialog?.querySelector('[role="alert"]')?.textContent).toBe("That chat no longer exists.");

    dialog?.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true, cancelable: true }));
    await expect(closed).resolves.toBe(false);
    expect(document.querySelector('[data-testid="system-prompt-dialog"]')).toBeNull();
    expect(save).toHaveBeenCalledTimes(1);
  });
});
