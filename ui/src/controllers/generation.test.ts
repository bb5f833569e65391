// @vitest-environment jsdom
// The window's answers: sending, streaming, stopping, versions, stats, and the draft's token count.
// Whole-window tests run in jsdom (see test/window.ts).
import "../test/dialog-polyfill";

import { describe, expect, it, onTestFinished, vi } from "vitest";

import type { Sent } from "../api";
import { message, usage } from "../test/backend";
import { callsOf, handle } from "../test/fake-tauri";
import { COUNT_DELAY_MS } from "../views/composer";
import {
  root,
  backend,
  settle,
  mount,
  runFrames,
  drainFrames,
  $,
  $$,
  composer,
  press,
  type,
  sendText,
  messages,
  click,
  useWindow,
  dropFrames,
  pendingFrames,
} from "../test/window";

vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));

useWindow();

describe("sending and streaming", () => {
  it("sends on Enter, streams coalesced deltas, and shows stats when done", async () => {
    await mount();
    const sent = await sendText("Hello there");
    expect(callsOf("send_message").at(-1)?.args).toEqual({
      request: { conversationId: null, text: "Hello there", attachmentIds: [] },
    });
    expect(composer().value).toBe("");
    expect($("stop")?.hidden).toBe(false);
    expect($("send")?.hidden).toBe(true);
    expect($("conversation-item")?.classList.contains("generating")).toBe(true);

    dropFrames();
    for (const word of ["Hi", " there", ",", " how", " can", " I", " help?"]) backend.delta(sent, word, 1);
    const answer = messages()[1] as HTMLElement;
    expect(answer.dataset.status).toBe("streaming");
    expect(pendingFrames()).toBe(1);
    expect(runFrames()).toBe(1);
    expect(answer.querySelector(".message-body")?.textContent?.trim()).toBe("Hi there, how can I help?");

    backend.done(sent, { promptTokens: 1000, generatedTokens: 24 });
    expect(answer.dataset.status).toBe("complete");
    const stats = answer.querySelector('[data-testid="answer-stats"]')?.textContent ?? "";
    expect(stats).toContain("31.4 tok/s");
    expect(stats).toContain("420 ms to first token");
    expect(stats).toContain("24 tokens");
    expect(stats).toContain("Context 1,024 / 8,192 (13%)");
    expect($("send")?.hidden).toBe(false);
    expect($("conversation-item")?.classList.contains("generating")).toBe(false);
  });

  it("shows a long prompt being read, chunk by chunk, until the first token", async () => {
    await mount();
    const sent = await sendText("A long document…");
    const answer = messages()[1] as HTMLElement;
    const note = () => answer.querySelector('[data-testid="streaming-note"]');
    backend.prefill(sent, 0, 2600);
    await drainFrames();
    expect(note()?.textContent).toBe("Reading the prompt… 0 of 2,600 tokens");
    backend.prefill(sent, 512, 2600);
    backend.prefill(sent, 1024, 2600);
    await drainFrames();
    expect(note()?.textContent).toBe("Reading the prompt… 1,024 of 2,600 tokens");
    const bar = note()?.querySelector("progress");
    expect(bar?.getAttribute("max")).toBe("2600");
    expect(bar?.getAttribute("value")).toBe("1024");
    backend.prefill(sent, 2600, 2600);
    backend.delta(sent, "Sure", 1);
    await drainFrames();
    expect(note()?.textContent).toBe("Generating… 1 tokens");
    expect(note()?.querySelector("progress")).toBeNull();
  });

  it("says only Generating… for a short prompt, read at once", async () => {
    await mount();
    const sent = await sendText("Hi");
    backend.prefill(sent, 0, 12);
    backend.prefill(sent, 12, 12);
    await drainFrames();
    const note = (messages()[1] as HTMLElement).querySelector('[data-testid="streaming-note"]');
    expect(note?.textContent).toBe("Generating…");
  });

  it("never renders a delta for another conversation into the open one", async () => {
    const other = backend.addConversation("Other");
    await mount();
    const sent = await sendText("Question");
    const answer = messages()[1] as HTMLElement;
    backend.event({
      type: "delta",
      generationId: 99,
      conversationId: other.id,
      messageId: "elsewhere",
      delta: "WRONG",
      tokenCount: 1,
    });
    backend.delta(sent, "right", 1);
    await drainFrames();
    expect(root.querySelector(".messages")?.textContent).not.toContain("WRONG");
    expect(answer.textContent).toContain("right");
    expect(root.querySelector(`[data-conversation-id="${other.id}"]`)?.classList.contains("generating")).toBe(true);
  });

  it("keeps streaming in the background and shows the full text when reopened", async () => {
    const first = backend.addConversation("First");
    await mount();
    const sent = await sendText("Tell me a story");
    backend.delta(sent, "Once", 1);
    click(root.querySelector(`[data-conversation-id="${first.id}"] .item-button`));
    await settle();
    backend.delta(sent, " upon a time", 4);
    await drainFrames();
    expect(root.querySelector(".messages")?.textContent).not.toContain("upon");
    click(root.querySelector(`[data-conversation-id="${sent.conversation.id}"] .item-button`));
    await settle();
    expect(messages()[1]?.textContent).toContain("Once upon a time");
  });

  it("handles deltas that arrive before the send command answers", async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    handle("send_message", async () => {
      await gate;
      return backend.lastSent;
    });
    await mount();
    // Prepare a generation the backend "started" and emit tokens before the reply.
    const chat = backend.addConversation("Early");
    const sent: Sent = {
      conversation: backend.list().find((c) => c.id === chat.id)!,
      userMessage: message({ id: "u9", conversationId: chat.id, role: "user", text: "Hi", position: 0 }),
      assistantMessageId: "a9",
      generationId: 42,
    };
    backend.sent.push(sent);
    type("Hi");
    press(composer(), "Enter");
    await settle();
    backend.delta(sent, "Early ", 1);
    backend.delta(sent, "bird", 2);
    release();
    await settle();
    await drainFrames();
    expect(messages()[1]?.textContent).toContain("Early bird");
    backend.done(sent);
    expect(messages()[1]?.dataset.status).toBe("complete");
    expect(messages()[1]?.textContent).toContain("Early bird");
  });

  it("stops with Esc and marks the partial answer as stopped", async () => {
    await mount();
    const sent = await sendText("Count to 100");
    backend.delta(sent, "1, 2, 3", 5);
    await drainFrames();
    press(document.body, "Escape");
    await settle();
    expect(callsOf("stop_generation").at(-1)?.args).toEqual({ generationId: sent.generationId });
    backend.done(sent, { stopReason: "cancelled", generatedTokens: 5 });
    const answer = messages()[1] as HTMLElement;
    expect(answer.dataset.status).toBe("stopped");
    expect(answer.textContent).toContain("1, 2, 3");
    expect(answer.querySelector('[data-testid="answer-stats"]')?.textContent).toContain("Stopped");
  });

  it("stops with the Stop button", async () => {
    await mount();
    const sent = await sendText("Go");
    click($("stop"));
    await settle();
    expect(callsOf("stop_generation").at(-1)?.args).toEqual({ generationId: sent.generationId });
  });

  it("shows a failed answer's error under it", async () => {
    await mount();
    const sent = await sendText("Go");
    backend.event({
      type: "error",
      generationId: sent.generationId,
      conversationId: sent.conversation.id,
      messageId: sent.assistantMessageId,
      error: { kind: "internal", message: "Metal ran out of memory" },
    });
    const answer = messages()[1] as HTMLElement;
    expect(answer.dataset.status).toBe("error");
    expect(answer.querySelector('[data-testid="answer-stats"]')?.textContent).toContain("Metal ran out of memory");
  });

  it("shows a context notice when the conversation no longer fits", async () => {
    backend.settings = { ...backend.settings, contextLength: 8000 };
    await mount();
    const sent = await sendText("Long");
    expect($("context-notice")).toBeNull();
    backend.event({
      type: "error",
      generationId: sent.generationId,
      conversationId: sent.conversation.id,
      messageId: sent.assistantMessageId,
      error: {
        kind: "contextFull",
        message: "This conversation needs 8,100 tokens, and the context window holds 8,000.",
        context: { needed: 8100, window: 8000, alone: false },
      },
    });
    const notice = $("context-notice");
    expect(notice?.getAttribute("role")).toBe("alert");
    const text = notice?.textContent ?? "";
    expect(text).toContain("This conversation no longer fits in the context window.");
    expect(text).toContain("It needs 8,100 tokens. The context window holds 8,000 tokens.");
    // Said once, not twice.
    expect(text.split("context window").length - 1).toBe(2);
    expect(text.split("new chat").length - 1).toBe(1);
    expect([...(notice?.querySelectorAll("button") ?? [])].map((b) => b.textContent)).toEqual([
      "New Chat",
      "Context Length…",
    ]);
    // The failed answer's own line does not say it again while the notice does.
    const answer = messages()[1] as HTMLElement;
    expect(answer.querySelector('[data-testid="answer-stats"]')?.textContent).toBe("Not answered");
    expect(root.querySelector(".messages")?.textContent).not.toContain("context window");
    // Scrolled to once the panels above the form have read their state (they grow as they do).
    const scrolled: { target: Element; panelRead: boolean; options: unknown }[] = [];
    const scrollIntoView = vi.fn(function (this: Element, options?: unknown) {
      const panelRead = $("local-api-toggle")?.closest("[hidden]") === null;
      scrolled.push({ target: this, panelRead, options });
    });
    // jsdom has no scrolling: the window's calls are recorded instead.
    Object.defineProperty(HTMLElement.prototype, "scrollIntoView", { value: scrollIntoView, configurable: true });
    onTestFinished(() => {
      delete (HTMLElement.prototype as { scrollIntoView?: unknown }).scrollIntoView;
    });
    click([...(notice?.querySelectorAll("button") ?? [])].find((b) => b.textContent === "Context Length…") ?? null);
    await settle();
    expect(($("settings-dialog") as HTMLDialogElement).open).toBe(true);
    // Context Length… lands on the context length, in view.
    const field = $("setting-contextLength") as HTMLInputElement;
    expect(document.activeElement).toBe(field);
    expect(scrolled.at(-1)).toEqual({ target: field, panelRead: true, options: { block: "center" } });
    // Raising it takes the notice down; the answer's line then says why it failed.
    field.value = "8192";
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings").at(-1)?.args).toMatchObject({ settings: { contextLength: 8192 } });
    expect($("context-notice")).toBeNull();
    expect(answer.querySelector('[data-testid="answer-stats"]')?.textContent).toContain(
      "This conversation needs 8,100 tokens",
    );
  });

  it("keeps the context notice when the failure arrives before the send command answers", async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    const chat = backend.addConversation("Full", [message({ id: "u1", conversationId: "", role: "user", text: "a" })]);
    const sent: Sent = {
      conversation: backend.list().find((c) => c.id === chat.id)!,
      userMessage: message({ id: "u2", conversationId: chat.id, role: "user", text: "more", position: 1 }),
      assistantMessageId: "a2",
      generationId: 77,
    };
    handle("send_message", async () => {
      await gate;
      return sent;
    });
    await mount();
    click(root.querySelector(`[data-conversation-id="${chat.id}"] .item-button`));
    await settle();
    type("more");
    press(composer(), "Enter");
    await settle();
    backend.event({
      type: "error",
      generationId: 77,
      conversationId: chat.id,
      messageId: "a2",
      error: {
        kind: "contextFull",
        message: "This conversation needs 9,000 tokens, and the context window holds 8,192.",
        context: { needed: 9000, window: 8192, alone: false },
      },
    });
    release();
    await settle();
    expect($("context-notice")?.textContent).toContain("It needs 9,000 tokens.");
  });

  it("shows the context notice when sending is refused because the context is full", async () => {
    const chat = backend.addConversation("Full", [message({ id: "u1", conversationId: "", role: "user", text: "a" })]);
    handle("send_message", () => {
      throw {
        kind: "contextFull",
        message: "This conversation needs 8,379 tokens, and the context window holds 8,192.",
        context: { needed: 8379, window: 8192, alone: false },
      };
    });
    await mount();
    click(root.querySelector(`[data-conversation-id="${chat.id}"] .item-button`));
    await settle();
    await sendText("more").catch(() => undefined);
    expect($("context-notice")?.textContent).toContain("It needs 8,379 tokens.");
    expect(composer().value).toBe("more");
    click(
      [...($("context-notice")?.querySelectorAll("button") ?? [])].find((b) => b.textContent === "New Chat") ?? null,
    );
    expect($("context-notice")).toBeNull();
    expect(messages()).toHaveLength(0);
  });

  it("says a message too long on its own is too long, and offers no new chat that would not help", async () => {
    handle("send_message", () => {
      throw {
        kind: "contextFull",
        message: "This message is 9,100 tokens on its own, and the context window holds 8,192.",
        context: { needed: 9100, window: 8192, alone: true },
      };
    });
    await mount();
    await sendText("a very long paste").catch(() => undefined);
    const notice = $("context-notice");
    expect(notice?.textContent).toContain("This message is too long for the context window.");
    expect(notice?.textContent).toContain("It is 9,100 tokens on its own. The context window holds 8,192 tokens.");
    expect(notice?.textContent).not.toContain("new chat");
    expect([...(notice?.querySelectorAll("button") ?? [])].map((b) => b.textContent)).toEqual(["Context Length…"]);
    expect(composer().value).toBe("a very long paste");
  });

  it("says an answer was cut off by a full context window, with the window's size", async () => {
    await mount();
    const sent = await sendText("Go on");
    backend.done(sent, { stopReason: "contextFull" });
    const text = $("context-notice")?.textContent ?? "";
    expect(text).toContain("The answer was cut off: the context window is full.");
    expect(text).toContain("The conversation reached 8,192 tokens.");
  });

  it("regenerates the last answer", async () => {
    await mount();
    const first = await sendText("Joke please");
    backend.delta(first, "Knock knock", 2);
    backend.done(first);
    click($("regenerate"));
    await settle();
    expect(callsOf("regenerate").at(-1)?.args).toEqual({ conversationId: first.conversation.id });
    const second = backend.lastSent;
    expect(messages()).toHaveLength(2);
    expect(messages()[1]?.dataset.status).toBe("streaming");
    backend.delta(second, "Why did", 2);
    await drainFrames();
    expect(messages()[1]?.textContent).toContain("Why did");
    expect(messages()[1]?.textContent).not.toContain("Knock");
  });

  it("keeps the earlier answer when regenerating and flips between versions with ‹ ›", async () => {
    await mount();
    const first = await sendText("Joke please");
    backend.delta(first, "Knock knock", 2);
    backend.done(first);
    await drainFrames();
    expect(messages()[1]?.querySelector('[data-testid="version-count"]')).toBeNull();
    click($("regenerate"));
    await settle();
    const second = backend.lastSent;
    backend.delta(second, "Why did", 2);
    backend.done(second);
    await drainFrames();
    const answer = () => messages()[1] as HTMLElement;
    const count = () => answer().querySelector('[data-testid="version-count"]')?.textContent;
    expect(count()).toBe("2/2");
    expect((answer().querySelector('[data-testid="version-next"]') as HTMLButtonElement).disabled).toBe(true);

    click(answer().querySelector('[data-testid="version-previous"]'));
    await settle();
    expect(callsOf("select_version").at(-1)?.args).toEqual({
      conversationId: first.conversation.id,
      messageId: second.assistantMessageId,
      version: 1,
    });
    expect(count()).toBe("1/2");
    expect(answer().textContent).toContain("Knock knock");
    expect(answer().textContent).not.toContain("Why did");

    click(answer().querySelector('[data-testid="version-next"]'));
    await settle();
    expect(count()).toBe("2/2");
    expect(answer().textContent).toContain("Why did");
  });

  it("edits a user message and answers again", async () => {
    await mount();
    const first = await sendText("Capital of Frnace?");
    backend.done(first);
    click(messages()[0]?.querySelector('[data-testid="edit"]') ?? null);
    const field = root.querySelector<HTMLTextAreaElement>('[data-testid="edit-field"]');
    expect(field?.value).toBe("Capital of Frnace?");
    field!.value = "Capital of France?";
    press(field!, "Enter");
    await settle();
    expect(callsOf("edit_message").at(-1)?.args).toEqual({
      conversationId: first.conversation.id,
      messageId: first.userMessage.id,
      text: "Capital of France?",
    });
    expect(messages()[0]?.textContent).toContain("Capital of France?");
    expect(messages()[1]?.dataset.status).toBe("streaming");
  });

  it("disables regenerate and edit while an answer is generating", async () => {
    await mount();
    const sent = await sendText("Go");
    expect((messages()[0]?.querySelector('[data-testid="edit"]') as HTMLButtonElement).disabled).toBe(true);
    backend.done(sent);
    expect((messages()[0]?.querySelector('[data-testid="edit"]') as HTMLButtonElement).disabled).toBe(false);
    expect(($("regenerate") as HTMLButtonElement).disabled).toBe(false);
  });

  it("shows the thought channel collapsed, apart from the answer", async () => {
    await mount();
    const sent = await sendText("Think");
    backend.delta(sent, "<|channel>thought\nThe user wants", 3);
    await drainFrames();
    const answer = messages()[1] as HTMLElement;
    const thinking = answer.querySelector("details.thinking") as HTMLDetailsElement;
    expect(thinking.open).toBe(false);
    expect(thinking.querySelector("summary")?.textContent).toBe("Thinking…");
    backend.delta(sent, " a greeting.<channel|>Hello!", 6);
    await drainFrames();
    expect(thinking.querySelector("summary")?.textContent).toBe("Thought process");
    expect(answer.querySelector(".message-body")?.textContent?.trim()).toBe("Hello!");
    expect(answer.textContent).not.toContain("<|channel>");
  });
});

describe("answer stats", () => {
  it("keep the context window an answer was written in, and show what was reused", async () => {
    backend.addConversation("Old", [
      message({ id: "u1", conversationId: "", role: "user", text: "Hi" }),
      message({
        id: "a1",
        conversationId: "",
        role: "assistant",
        text: "Hello",
        usage: { ...usage(), promptTokens: 1000, reusedTokens: 900, generatedTokens: 24, contextWindow: 4096 },
      }),
      message({ id: "u2", conversationId: "", role: "user", text: "More" }),
      message({
        id: "a2",
        conversationId: "",
        role: "assistant",
        text: "Sure",
        usage: { ...usage(), promptTokens: 1000, reusedTokens: 0, generatedTokens: 24 },
      }),
    ]);
    await mount();
    click(root.querySelector(".item-button"));
    await settle();
    const stats = $$("answer-stats").map((s) => s.textContent ?? "");
    expect(stats[0]).toContain("Context 1,024 / 4,096 (25%)");
    expect(stats[0]).toContain("900 reused from the cache");
    // Saved before the window was kept with answers: today's setting.
    expect(stats[1]).toContain("Context 1,024 / 8,192 (13%)");
    expect(stats[1]).not.toContain("reused");
  });

  it("say in words how many tokens each check gave when drafts were kept, and nothing otherwise", async () => {
    backend.addConversation("Drafted", [
      message({ id: "u1", conversationId: "", role: "user", text: "Hi" }),
      message({
        id: "a1",
        conversationId: "",
        role: "assistant",
        text: "Hello",
        usage: { ...usage(), tokensPerRound: 2.46 },
      }),
      message({ id: "u2", conversationId: "", role: "user", text: "More" }),
      message({ id: "a2", conversationId: "", role: "assistant", text: "Sure", usage: usage() }),
      // Drafted, but no draft was kept: one token per check, as without a drafter.
      message({ id: "u3", conversationId: "", role: "user", text: "Again" }),
      message({
        id: "a3",
        conversationId: "",
        role: "assistant",
        text: "Yes",
        usage: { ...usage(), tokensPerRound: 1.0 },
      }),
    ]);
    await mount();
    click(root.querySelector(".item-button"));
    await settle();
    const stats = $$("answer-stats").map((s) => s.textContent ?? "");
    expect(stats[0]).toContain("Drafted: 2.5 tokens per check");
    for (const text of stats) expect(text).not.toContain("tokens/round");
    expect(stats[1]).not.toContain("Drafted");
    expect(stats[2]).not.toContain("Drafted");
    // The details keep the number for every drafted answer, the line only when it says something.
    const details = $$("answer-stats").map((s) => s.title);
    expect(details[2]).toContain("Faster answers: 1.0 tokens per check");
    expect(details[1]).not.toContain("Faster answers");
  });
});

describe("the draft's token count", () => {
  const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it("shows the draft's tokens and what the context window has left after the conversation", async () => {
    backend.addConversation("Long", [
      message({ id: "u1", conversationId: "", role: "user", text: "Hi" }),
      message({
        id: "a1",
        conversationId: "",
        role: "assistant",
        text: "Hello",
        usage: usage({ promptTokens: 1000, generatedTokens: 24 }),
      }),
    ]);
    await mount();
    click(root.querySelector(".item-button"));
    await settle();
    type("one two three");
    expect($("token-count")?.hidden).toBe(true);
    await wait(COUNT_DELAY_MS + 50);
    await settle();
    expect(callsOf("count_tokens").map((c) => c.args)).toEqual([{ text: "one two three", attachmentIds: [] }]);
    expect($("token-count")?.hidden).toBe(false);
    expect($("token-count")?.textContent).toBe("3 tokens · 7,165 left");
  });

  it("sends nothing too long for the context, keeps the draft, and says where to raise the length", async () => {
    await mount();
    handle("count_tokens", () => 9000);
    type("a message longer than the whole context window");
    await wait(COUNT_DELAY_MS + 50);
    await settle();
    expect($("token-count")?.textContent).toBe("9,000 tokens · 808 over");
    expect(($("send") as HTMLButtonElement).disabled).toBe(true);
    press(composer(), "Enter");
    click($("send"));
    await settle();
    expect(callsOf("send_message")).toHaveLength(0);
    expect(messages()).toHaveLength(0);
    expect(composer().value).toBe("a message longer than the whole context window");
    const notice = $("context-notice");
    expect(notice?.textContent).toContain("This message is too long for the context window.");
    expect(notice?.textContent).toContain("It is 9,000 tokens on its own. The context window holds 8,192 tokens.");
    click([...(notice?.querySelectorAll("button") ?? [])].find((b) => b.textContent === "Context Length…") ?? null);
    await settle();
    expect(document.activeElement).toBe($("setting-contextLength"));
  });
});
