// @vitest-environment jsdom
// Read aloud: what is spoken (the words a person reads) and the button on each answer.
// Whole-window tests run in jsdom (see test/window.ts).
import { describe, expect, it, vi } from "vitest";

import { callsOf, emit, handle } from "../test/fake-tauri";
import { $, $$, backend, click, messages, mount, press, sendText, settle, useWindow } from "../test/window";
import { speakableText } from "./read-aloud";

vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));

useWindow();

describe("the text read aloud", () => {
  it("skips code blocks and reads the words around them", () => {
    const answer = "Run this:\n\n```python\nprint('secret')\nx = 1\n```\n\nThen it prints.";
    expect(speakableText(answer)).toBe("Run this:\nThen it prints.");
  });

  it("drops markup a person does not read", () => {
    const answer =
      "# Paris\n\nThe **capital** of *France* is [Paris](https://example.com). Use `ls -l` here.\n\n" +
      "- first item\n- second item!\n\n> quoted words\n\n---\n\n| City | Land |\n|---|---|\n| Rome | Italy |";
    expect(speakableText(answer)).toBe(
      [
        "Paris.",
        "The capital of France is Paris. Use ls -l here.",
        "first item.",
        "second item!",
        "quoted words.",
        "City.",
        "Land.",
        "Rome.",
        "Italy.",
      ].join("\n"),
    );
  });

  it("skips math, thoughts and indented code", () => {
    const answer =
      "<|channel>thought\nThe user wants a formula.<channel|>The area is $\\pi r^2$ here.\n\n$$\nE = mc^2\n$$\n\n" +
      "    indented code\n\nDone.";
    expect(speakableText(answer)).toBe("The area is here.\nDone.");
  });

  it("is empty for an answer that is only code", () => {
    expect(speakableText("```\nonly code\n```")).toBe("");
    expect(speakableText("")).toBe("");
  });

  it("keeps markdown-looking text in inline code as written, and angle brackets as text", () => {
    expect(speakableText("Type `**bold**` or <b>this</b>.")).toBe("Type **bold** or <b>this</b>.");
  });
});

/** An answered question whose answer has a code block; the answer's element. */
async function answered(): Promise<HTMLElement> {
  await mount();
  const sent = await sendText("How do I list files?");
  backend.delta(sent, "Use this:\n\n```sh\nls -la\n```\n\nIt lists **all** files.", 12);
  backend.done(sent);
  await settle();
  const answer = messages()[1];
  if (!answer) throw new Error("no answer");
  return answer;
}

function readButton(answer: HTMLElement): HTMLButtonElement {
  const button = answer.querySelector<HTMLButtonElement>('[data-testid="read-aloud"]');
  if (!button) throw new Error("no read-aloud button");
  return button;
}

describe("the read-aloud button", () => {
  it("is on answers only", async () => {
    const answer = await answered();
    expect($$("read-aloud")).toHaveLength(1);
    expect(messages()[0]?.querySelector('[data-testid="read-aloud"]')).toBeNull();
    expect(readButton(answer).getAttribute("aria-label")).toBe("Read aloud");
  });

  it("speaks the answer's words without its code, then says Stop reading until the voice ends", async () => {
    const answer = await answered();
    handle("speak", ({ id }) => emit("speech", { state: "speaking", id }));
    click(readButton(answer));
    await settle();
    expect(callsOf("speak").map((call) => call.args)).toEqual([
      { id: answer.dataset.messageId, text: "Use this:\nIt lists all files." },
    ]);
    const button = readButton(answer);
    expect(button.getAttribute("aria-label")).toBe("Stop reading");
    expect(button.getAttribute("aria-pressed")).toBe("true");
    emit("speech", { state: "done", id: answer.dataset.messageId });
    expect(readButton(answer).getAttribute("aria-label")).toBe("Read aloud");
    expect(callsOf("stop_speaking")).toHaveLength(0);
  });

  it("stops on a second press", async () => {
    const answer = await answered();
    handle("speak", ({ id }) => emit("speech", { state: "speaking", id }));
    handle("stop_speaking", () => answer.dataset.messageId);
    click(readButton(answer));
    await settle();
    click(readButton(answer));
    await settle();
    expect(callsOf("stop_speaking")).toHaveLength(1);
    expect(callsOf("speak")).toHaveLength(1);
    expect(readButton(answer).getAttribute("aria-label")).toBe("Read aloud");
  });

  it("stops on Esc, wherever the focus is", async () => {
    const answer = await answered();
    handle("speak", ({ id }) => emit("speech", { state: "speaking", id }));
    handle("stop_speaking", () => answer.dataset.messageId);
    click(readButton(answer));
    await settle();
    press(document.body, "Escape");
    await settle();
    expect(callsOf("stop_speaking")).toHaveLength(1);
    expect(readButton(answer).getAttribute("aria-label")).toBe("Read aloud");
    // Esc with nothing being read asks nothing of the backend.
    press(document.body, "Escape");
    await settle();
    expect(callsOf("stop_speaking")).toHaveLength(1);
  });

  it("says in words when the voice fails", async () => {
    const answer = await answered();
    handle("speak", ({ id }) => emit("speech", { state: "speaking", id }));
    click(readButton(answer));
    await settle();
    emit("speech", {
      state: "failed",
      id: answer.dataset.messageId,
      error: "No sound could be played (is a sound output connected?): error: No such file or directory",
    });
    await settle();
    expect($("toasts")?.textContent).toContain("Could not read the answer aloud. No sound could be played");
    expect(readButton(answer).getAttribute("aria-label")).toBe("Read aloud");
  });

  it("shows a refusal from the backend (no synthesizer installed)", async () => {
    const answer = await answered();
    handle("speak", () => {
      throw { kind: "invalidInput", message: "Reading aloud needs espeak-ng, the speech synthesizer." };
    });
    click(readButton(answer));
    await settle();
    expect($("toasts")?.textContent).toContain("Reading aloud needs espeak-ng");
    expect(readButton(answer).getAttribute("aria-label")).toBe("Read aloud");
  });

  it("does not call the backend for an answer that is only code", async () => {
    await mount();
    const sent = await sendText("Code only?");
    backend.delta(sent, "```\nx = 1\n```", 5);
    backend.done(sent);
    await settle();
    handle("speak", () => undefined);
    click(readButton(messages()[1] as HTMLElement));
    await settle();
    expect(callsOf("speak")).toHaveLength(0);
    expect($("toasts")?.textContent).toContain("no text to read aloud");
  });
});
