// @vitest-environment jsdom
// The chat pane and the composer as a person meets them (issue 40): long words wrap, Stop stays in
// one labelled place, versions keep their row, tooltips go away, attachments count, drafts and the
// chat open last survive a restart, each answer says which model wrote it, Ctrl+Q quits.
// Whole-window tests run in jsdom (see test/window.ts).
import "../test/dialog-polyfill";

import { describe, expect, it, vi } from "vitest";

import styles from "../styles.css?raw";
import { message, usage } from "../test/backend";
import { calls, callsOf, emit } from "../test/fake-tauri";
import { TOOLTIP_DELAY_MS } from "../tooltip";
import { COUNT_DELAY_MS } from "../views/composer";
import { DRAFT_SAVE_DELAY_MS } from "./conversations";
import {
  root,
  backend,
  settle,
  mount,
  $,
  composer,
  press,
  type,
  sendText,
  messages,
  click,
  useWindow,
  drainFrames,
} from "../test/window";

vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));

useWindow();

const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("the chat pane", () => {
  it("wraps a long URL or word instead of scrolling sideways; code keeps its own scroll", async () => {
    const style = document.createElement("style");
    style.textContent = styles;
    document.head.append(style);
    try {
      await mount();
      const sent = await sendText("Link?");
      const url = `https://example.com/${"a".repeat(300)}`;
      backend.delta(sent, `See ${url} and ${"x".repeat(200)}.\n\n\`\`\`\n${"y".repeat(300)}\n\`\`\``, 5);
      backend.done(sent);
      await drainFrames();
      const answer = messages()[1] as HTMLElement;
      const paragraph = answer.querySelector(".message-body p") as HTMLElement;
      expect(paragraph.textContent).toContain("x".repeat(200));
      expect(getComputedStyle(paragraph).overflowWrap).toBe("anywhere");
      const pre = answer.querySelector(".code-block pre") as HTMLElement;
      expect(getComputedStyle(pre).overflowX).toBe("auto");
      expect(getComputedStyle(pre).whiteSpace).toBe("pre");
      expect(getComputedStyle(pre).overflowWrap).toBe("normal");
      expect(getComputedStyle(root.querySelector(".chat-scroll") as HTMLElement).overflowX).toBe("hidden");
      // A person's own long words wrap too.
      const question = messages()[0]?.querySelector(".message-body") as HTMLElement;
      expect(getComputedStyle(question).overflowWrap).toBe("anywhere");
    } finally {
      style.remove();
    }
  });

  it("stops from one labelled place: the composer's Stop (Esc), never a square inside the answer", async () => {
    await mount();
    const sent = await sendText("Tell me a story");
    backend.delta(sent, "Once upon a time", 4);
    await drainFrames();
    const answer = messages()[1] as HTMLElement;
    expect(answer.querySelector("button")).toBeNull();
    const stop = $("stop") as HTMLButtonElement;
    expect(stop.hidden).toBe(false);
    expect(stop.textContent).toBe("StopEsc");
    expect(stop.getAttribute("aria-keyshortcuts")).toBe("Escape");
    expect(root.querySelector(".composer")?.contains(stop)).toBe(true);
    click(stop);
    await settle();
    expect(callsOf("stop_generation")).toHaveLength(1);
  });

  it("keeps ‹ 1/2 › on the actions' row, below the info line, whatever the info line holds", async () => {
    await mount();
    const first = await sendText("Joke please");
    backend.delta(first, "Knock knock", 2);
    backend.done(first, { reusedTokens: 40 });
    await drainFrames();
    click($("regenerate"));
    await settle();
    backend.delta(backend.lastSent, "Why did", 2);
    backend.done(backend.lastSent, { reusedTokens: 12 });
    await drainFrames();
    const footer = messages()[1]?.querySelector(".message-footer") as HTMLElement;
    const rows = [...footer.children].map((row) => row.className);
    expect(rows).toEqual(["answer-stats", "message-controls"]);
    const controls = footer.querySelector('[data-testid="message-controls"]') as HTMLElement;
    expect(controls.querySelector('[data-testid="version-count"]')?.textContent).toBe("2/2");
    expect(controls.querySelector('[data-testid="regenerate"]')).not.toBeNull();
    // A question's versions sit with its actions the same way.
    const question = messages()[0]?.querySelector(".message-footer") as HTMLElement;
    expect([...question.children].map((row) => row.className)).toEqual(["message-controls"]);
  });

  it("draws its own tooltips, gone as soon as the pointer moves to another control", async () => {
    await mount();
    const sent = await sendText("Hi");
    backend.done(sent);
    await drainFrames();
    const copy = messages()[1]?.querySelector('[data-testid="copy"]') as HTMLElement;
    const regenerate = messages()[1]?.querySelector('[data-testid="regenerate"]') as HTMLElement;
    copy.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    expect(copy.hasAttribute("title")).toBe(false);
    await wait(TOOLTIP_DELAY_MS + 20);
    const tip = document.querySelector<HTMLElement>('[data-testid="tooltip"]') as HTMLElement;
    expect(tip.hidden).toBe(false);
    expect(tip.textContent).toBe("Copy message");
    copy.dispatchEvent(new MouseEvent("mouseout", { bubbles: true, relatedTarget: regenerate }));
    regenerate.dispatchEvent(new MouseEvent("mouseover", { bubbles: true, relatedTarget: copy }));
    expect(tip.hidden).toBe(true);
  });

  it("says under each answer which model wrote it", async () => {
    backend.addConversation("Earlier", [
      message({ id: "u1", conversationId: "", role: "user", text: "Hi" }),
      message({ id: "a1", conversationId: "", role: "assistant", text: "Hello", usage: usage() }),
    ]);
    await mount();
    const sent = await sendText("Hello");
    backend.delta(sent, "Hi!", 1);
    backend.done(sent);
    await drainFrames();
    expect(messages()[1]?.querySelector('[data-testid="answer-model"]')?.textContent).toBe("by Gemma 4 E4B");
    // An answer saved before models were recorded names none.
    click(root.querySelectorAll(".item-button")[1] ?? null);
    await settle();
    expect(messages()[1]?.querySelector('[data-testid="answer-stats"]')).not.toBeNull();
    expect(messages()[1]?.querySelector('[data-testid="answer-model"]')).toBeNull();
  });
});

describe("the composer's count", () => {
  it("counts an attached image and recording with the text", async () => {
    await mount();
    type("What is this");
    await wait(COUNT_DELAY_MS + 30);
    const count = () => $("token-count")?.textContent;
    expect(count()).toBe("3 tokens · 8,189 left");
    backend.pendingFiles.set("img", {
      id: "img",
      name: "cat.png",
      kind: "image",
      mime: "image/png",
      width: 640,
      height: 480,
      durationMs: null,
      byteSize: 1000,
      thumbnail: "data:image/png;base64,AA",
      notice: null,
    });
    emit("drop", {
      type: "added",
      attachments: [backend.pendingFiles.get("img")],
      errors: [],
    });
    await wait(COUNT_DELAY_MS + 30);
    expect(count()).toBe("287 tokens · 7,905 left");
    expect(callsOf("count_tokens").at(-1)?.args).toEqual({ text: "What is this", attachmentIds: ["img"] });
    // An image alone is counted too.
    type("");
    await wait(COUNT_DELAY_MS + 30);
    expect(count()).toBe("284 tokens · 7,908 left");
  });
});

describe("drafts and the chat open last", () => {
  it("reopens the chat open last with its unsent text, and the new chat keeps its own", async () => {
    const chat = backend.addConversation("Trip", [
      message({ id: "u1", conversationId: "", role: "user", text: "Plan a trip" }),
      message({ id: "a1", conversationId: "", role: "assistant", text: "Sure.", usage: usage() }),
    ]);
    backend.drafts.set(chat.id, "And the budget is");
    backend.drafts.set("", "Something new");
    backend.lastOpen = chat.id;
    await mount();
    await settle();
    expect(root.querySelector(".chat-title")?.textContent).toBe("Trip");
    expect(messages()).toHaveLength(2);
    expect(composer().value).toBe("And the budget is");

    click($("new-chat"));
    await settle();
    expect(composer().value).toBe("Something new");
    expect(backend.lastOpen).toBeNull();
  });

  it("saves the draft as it is typed, once typing pauses, and forgets it once sent", async () => {
    await mount();
    type("Half a");
    type("Half a thought");
    expect(callsOf("save_draft")).toHaveLength(0);
    await wait(DRAFT_SAVE_DELAY_MS + 50);
    expect(callsOf("save_draft").map((c) => c.args)).toEqual([{ conversationId: null, text: "Half a thought" }]);
    expect(backend.drafts.get("")).toBe("Half a thought");

    type("Sent at once");
    press(composer(), "Enter");
    await settle();
    await wait(DRAFT_SAVE_DELAY_MS + 50);
    expect(backend.drafts.size).toBe(0);
    const sent = backend.lastSent;
    expect(backend.lastOpen).toBe(sent.conversation.id);
    backend.done(sent);

    // Leaving a chat saves its draft at once, without waiting for the pause.
    type("for later");
    click($("new-chat"));
    await settle();
    expect(backend.drafts.get(sent.conversation.id)).toBe("for later");
  });

  it("deletes a chat with unsent text without a word about its draft", async () => {
    const chat = backend.addConversation("Doomed", [
      message({ id: "u1", conversationId: "", role: "user", text: "Hi" }),
    ]);
    await mount();
    click(root.querySelector(".item-button"));
    await settle();
    type("never sent");
    await wait(DRAFT_SAVE_DELAY_MS + 50);
    expect(backend.drafts.get(chat.id)).toBe("never sent");
    type("never sent, really");
    click($("delete"));
    await settle();
    click($("confirm-ok"));
    await settle();
    expect(backend.conversations.has(chat.id)).toBe(false);
    expect($("toasts")?.textContent).toBe("");
    expect(callsOf("save_draft").filter((c) => c.args.conversationId === chat.id)).toHaveLength(1);
    expect(root.querySelector(".chat-title")?.textContent).toBe("New Chat");
  });

  it("starts on the new chat when the chat open last was deleted", async () => {
    backend.lastOpen = "gone";
    backend.drafts.set("", "kept");
    await mount();
    await settle();
    expect(root.querySelector(".chat-title")?.textContent).toBe("New Chat");
    expect(composer().value).toBe("kept");
  });
});

describe("quitting", () => {
  it("quits with Ctrl+Q on Linux, saving the draft typed just before", async () => {
    backend.status = { ...backend.status, platform: "linux" };
    await mount();
    type("unsaved words");
    const event = press(document.body, "q", { ctrlKey: true });
    await settle();
    expect(event.defaultPrevented).toBe(true);
    expect(backend.drafts.get("")).toBe("unsaved words");
    expect(backend.quits).toBe(1);
    const commands = calls.map((c) => c.command);
    expect(commands.lastIndexOf("save_draft")).toBeLessThan(commands.indexOf("quit"));
  });

  it("leaves Ctrl+Q alone on macOS, where ⌘Q quits from the app menu", async () => {
    await mount();
    const event = press(document.body, "q", { ctrlKey: true });
    await settle();
    expect(event.defaultPrevented).toBe(false);
    expect(backend.quits).toBe(0);
  });
});
