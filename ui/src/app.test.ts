// @vitest-environment jsdom
// The window renders model output through DOMPurify, which needs a DOM whose NodeIterator survives
// node removal (happy-dom's does not), so the whole-window tests run in jsdom.
import "./test/dialog-polyfill";

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import type { ModelState, PendingAttachment, Sent } from "./api";
import { mountApp, type App } from "./app";
import { DOWNLOADS, drafterProgress, FakeBackend, message, READY, usage } from "./test/backend";
import { COUNT_DELAY_MS } from "./views/composer";
import { SYSTEM_PROMPT_PRESETS } from "./views/system-prompt";
import { callsOf, emit, handle, resetTauri } from "./test/fake-tauri";

vi.mock("@tauri-apps/api/core", () => import("./test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("./test/fake-tauri"));

let root: HTMLElement;
let app: App;
let backend: FakeBackend;
let frames: FrameRequestCallback[];

beforeEach(() => {
  resetTauri();
  backend = new FakeBackend();
  frames = [];
  vi.spyOn(window, "requestAnimationFrame").mockImplementation((callback) => {
    frames.push(callback);
    return frames.length;
  });
  root = document.createElement("div");
  root.className = "app";
  document.body.append(root);
});

afterEach(() => {
  app?.destroy();
  root.remove();
  document.body.replaceChildren();
  vi.restoreAllMocks();
});

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 0));
}

async function mount(): Promise<void> {
  app = await mountApp(root);
  await settle();
}

/** Runs the frames requested so far; returns how many there were. */
function runFrames(): number {
  const pending = frames.splice(0);
  for (const frame of pending) frame(performance.now());
  return pending.length;
}

/** Runs frames until no render is pending (a slow render makes the next ones wait). */
async function drainFrames(): Promise<void> {
  for (let i = 0; i < 200 && frames.length > 0; i++) {
    runFrames();
    if (frames.length > 0) await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function $(testId: string): HTMLElement | null {
  return root.querySelector(`[data-testid="${testId}"]`);
}

function $$(testId: string): HTMLElement[] {
  return [...root.querySelectorAll<HTMLElement>(`[data-testid="${testId}"]`)];
}

function composer(): HTMLTextAreaElement {
  return $("composer") as HTMLTextAreaElement;
}

function press(target: Element, key: string, init: KeyboardEventInit = {}): KeyboardEvent {
  const event = new KeyboardEvent("keydown", { key, bubbles: true, cancelable: true, ...init });
  target.dispatchEvent(event);
  return event;
}

function type(text: string): void {
  const field = composer();
  field.value = text;
  field.dispatchEvent(new Event("input", { bubbles: true }));
}

async function sendText(text: string): Promise<Sent> {
  type(text);
  press(composer(), "Enter");
  await settle();
  return backend.lastSent;
}

function messages(): HTMLElement[] {
  return $$("message");
}

function click(element: Element | null): void {
  if (!element) throw new Error("nothing to click");
  (element as HTMLElement).click();
}

describe("first run", () => {
  beforeEach(() => {
    backend.status = { ...backend.status, model: { state: "none" } };
  });

  it("offers the download and a folder, and shows the models folder as text", async () => {
    backend.status.modelsDir = "/tmp/<img src=x onerror=alert(1)>/models";
    await mount();
    expect($("first-run")).not.toBeNull();
    expect($("download")?.textContent).toBe("Download Gemma 4 E4B (4-bit, ~5 GB)");
    expect($("choose-folder")?.textContent).toBe("Choose Folder…");
    expect(root.querySelector("#models-dir")?.textContent).toBe("/tmp/<img src=x onerror=alert(1)>/models");
    expect(root.querySelector("main img")).toBeNull();
    expect($("model-status")?.textContent).toBe("No model");
  });

  it("says “this Mac” only on macOS", async () => {
    await mount();
    expect($("first-run")?.textContent).toContain("entirely on this Mac");
    app.destroy();
    backend.status.platform = "linux";
    await mount();
    expect($("first-run")?.textContent).toContain("entirely on this computer");
    expect($("first-run")?.textContent).not.toContain("Mac");
  });

  it("shows why a chosen folder is not a usable model, in words", async () => {
    handle("choose_model_folder", () => {
      throw {
        kind: "modelInvalid",
        message: "This folder has no config.json. Choose the folder that holds the model files.",
      };
    });
    await mount();
    click($("choose-folder"));
    await settle();
    const error = $("setup-error");
    expect(error?.getAttribute("role")).toBe("alert");
    expect(error?.textContent).toBe("This folder has no config.json. Choose the folder that holds the model files.");
    expect(($("choose-folder") as HTMLButtonElement).disabled).toBe(false);
  });

  it("switches to the chat once a chosen folder loads", async () => {
    handle("choose_model_folder", () => READY);
    await mount();
    click($("choose-folder"));
    await settle();
    expect($("first-run")).toBeNull();
    expect($("composer")).not.toBeNull();
    expect($("model-status")?.textContent).toBe("Gemma 4 E4B");
  });

  it("shows download progress with bytes, speed and time left, and cancels", async () => {
    handle("download_model", () => undefined);
    handle("cancel_download", () => undefined);
    await mount();
    click($("download"));
    await settle();
    expect(callsOf("download_model")).toHaveLength(1);
    const progress: ModelState = {
      state: "downloading",
      progress: {
        file: "model.safetensors",
        filesDone: 2,
        filesTotal: 7,
        bytesDone: 1_250_000_000,
        bytesTotal: 5_000_000_000,
        bytesPerSecond: 25_000_000,
        etaSeconds: 150,
      },
    };
    emit("model-state", progress);
    expect($("download-progress")?.textContent).toContain("1.3 GB of 5.0 GB (25%)");
    expect($("download-progress")?.textContent).toContain("25 MB/s");
    expect($("download-progress")?.textContent).toContain("about 3 min left");
    expect(root.querySelector("progress")?.value).toBe(0.25);
    expect($("first-run")?.textContent).toContain("File 3 of 7");
    click($("cancel-download"));
    await settle();
    expect(callsOf("cancel_download")).toHaveLength(1);
  });

  it("keeps focus on Cancel while progress updates", async () => {
    await mount();
    const progress = (bytesDone: number): ModelState => ({
      state: "downloading",
      progress: {
        file: "a",
        filesDone: 0,
        filesTotal: 1,
        bytesDone,
        bytesTotal: 100,
        bytesPerSecond: 1,
        etaSeconds: null,
      },
    });
    emit("model-state", progress(1));
    $("cancel-download")?.focus();
    emit("model-state", progress(2));
    expect(document.activeElement).toBe($("cancel-download"));
  });

  it("shows the loading stage, then the chat when ready", async () => {
    await mount();
    emit("model-state", { state: "loading", name: "Gemma 4 E4B", dir: "/m", stage: "Reading weights (3 of 4)" });
    expect($("model-loading")?.textContent).toContain("Reading weights (3 of 4)");
    emit("model-state", READY);
    expect($("model-loading")).toBeNull();
    expect($("composer")).not.toBeNull();
  });

  it("shows a failed load with its message and the ways forward", async () => {
    await mount();
    emit("model-state", { state: "failed", dir: "/m", message: "model.safetensors is missing 12 tensors" });
    expect($("setup-error")?.textContent).toBe("model.safetensors is missing 12 tensors");
    expect(root.querySelector("#first-run-title")?.textContent).toBe("The model could not be loaded");
    expect($("download")).not.toBeNull();
    expect($("choose-folder")).not.toBeNull();
  });

  it("says a download that stopped did not finish, not that a model failed to load", async () => {
    await mount();
    emit("model-state", {
      state: "failed",
      dir: null,
      message: "The download stopped: huggingface.co cannot be reached. Try again to resume it.",
    });
    expect(root.querySelector("#first-run-title")?.textContent).toBe("The download did not finish");
    expect($("setup-error")?.textContent).toContain("Try again to resume it.");
  });
});

describe("startup", () => {
  it("names shortcuts with ⌘ on macOS and Ctrl elsewhere", async () => {
    await mount();
    expect($("new-chat")?.title).toBe("New Chat (⌘N)");
    expect($("settings")?.title).toBe("Settings (⌘,)");
    expect(($("search") as HTMLInputElement).placeholder).toBe("Search (⌘F)");
    app.destroy();
    backend.status.platform = "linux";
    await mount();
    expect($("new-chat")?.title).toBe("New Chat (Ctrl+N)");
    expect($("settings")?.title).toBe("Settings (Ctrl+,)");
    expect(($("search") as HTMLInputElement).placeholder).toBe("Search (Ctrl+F)");
  });

  it("shows the backend's error as an alert", async () => {
    handle("app_status", () => {
      throw { kind: "io", message: "could not create the models folder: permission denied" };
    });
    await mount();
    const alert = root.querySelector('[role="alert"]');
    expect(alert?.querySelector("h1")?.textContent).toBe("Gemma Desk could not start");
    expect(alert?.textContent).toContain("permission denied");
  });

  it("shows the model and memory in use in the status bar", async () => {
    await mount();
    expect($("model-status")?.textContent).toBe("Gemma 4 E4B");
    expect($("memory")?.textContent).toBe("Memory 3.4 GB");
  });
});

describe("conversations", () => {
  it("lists chats and opens one with its messages", async () => {
    const chat = backend.addConversation("Rust lifetimes", [
      message({ id: "u1", conversationId: "", role: "user", text: "What is 'a?" }),
      message({ id: "a1", conversationId: "", role: "assistant", text: "A **lifetime**.", usage: usage() }),
    ]);
    backend.addConversation("Older", [], Date.now() - 3 * 24 * 3600 * 1000);
    await mount();
    const items = $$("conversation-item");
    expect(items.map((item) => item.textContent?.includes("Rust lifetimes"))).toEqual([true, false]);
    expect(root.querySelector(".conversation-list")?.textContent).toContain("Today");
    expect(root.querySelector(".conversation-list")?.textContent).toContain("Previous 7 Days");

    click(items[0]?.querySelector(".item-button") ?? null);
    await settle();
    expect(callsOf("get_conversation").at(-1)?.args).toEqual({ id: chat.id });
    const shown = messages();
    expect(shown.map((m) => [m.dataset.role, m.dataset.status])).toEqual([
      ["user", "complete"],
      ["assistant", "complete"],
    ]);
    expect(shown[1]?.querySelector("strong")?.textContent).toBe("lifetime");
    expect(shown[1]?.querySelector('[data-testid="answer-stats"]')?.textContent).toContain("31.4 tok/s");
    expect(items[0]?.classList.contains("active")).toBe(true);
    expect(root.querySelector(".chat-title")?.textContent).toBe("Rust lifetimes");
  });

  it("renames a chat inline", async () => {
    const chat = backend.addConversation("Old name");
    await mount();
    click($("rename"));
    const field = $("rename-field") as HTMLInputElement;
    expect(document.activeElement).toBe(field);
    field.value = "New name";
    press(field, "Enter");
    await settle();
    expect(callsOf("rename_conversation").at(-1)?.args).toEqual({ id: chat.id, title: "New name" });
    expect($("conversation-item")?.textContent).toContain("New name");
  });

  it("keeps a rename in progress when the list refreshes", async () => {
    await mount();
    const sent = await sendText("Question");
    click($("rename"));
    const field = $("rename-field") as HTMLInputElement;
    field.value = "Half-typed";
    backend.done(sent);
    await settle();
    expect($("rename-field")).toBe(field);
    expect(field.value).toBe("Half-typed");
    expect(document.activeElement).toBe(field);
  });

  it("keeps keyboard focus on the same chat when the list refreshes", async () => {
    backend.addConversation("Other");
    await mount();
    const sent = await sendText("Question");
    const other = root.querySelector<HTMLElement>('[data-conversation-id="c1"] .item-button');
    other?.focus();
    backend.done(sent);
    await settle();
    expect(document.activeElement?.closest<HTMLElement>("[data-conversation-id]")?.dataset.conversationId).toBe("c1");
    expect(document.activeElement?.classList.contains("item-button")).toBe(true);
  });

  it("pins a chat under “Pinned”, first in the list, and unpins it", async () => {
    backend.addConversation("Older", [], Date.now() - 3 * 24 * 3600 * 1000);
    backend.addConversation("Newer");
    await mount();
    const titles = () => $$("conversation-item").map((item) => item.querySelector(".item-title")?.textContent);
    const headings = () => [...root.querySelectorAll(".sidebar-heading")].map((heading) => heading.textContent);
    expect(titles()).toEqual(["Newer", "Older"]);

    const older = root.querySelector('[data-conversation-id="c1"]');
    const pin = older?.querySelector<HTMLButtonElement>('[data-testid="pin"]') ?? null;
    expect(pin?.getAttribute("aria-label")).toBe("Pin “Older”");
    pin?.focus();
    click(pin);
    await settle();
    expect(callsOf("set_pinned").at(-1)?.args).toEqual({ conversationId: "c1", pinned: true });
    expect(titles()).toEqual(["Older", "Newer"]);
    expect(headings()).toEqual(["Pinned", "Today"]);
    const unpin = root.querySelector('[data-conversation-id="c1"] [data-testid="pin"]');
    expect(unpin?.getAttribute("aria-label")).toBe("Unpin “Older”");
    expect(document.activeElement).toBe(unpin);

    click(unpin);
    await settle();
    expect(callsOf("set_pinned").at(-1)?.args).toEqual({ conversationId: "c1", pinned: false });
    expect(titles()).toEqual(["Newer", "Older"]);
    expect(headings()).toEqual(["Today", "Previous 7 Days"]);
  });

  it("says so when a chat could not be pinned, and leaves the list as it was", async () => {
    backend.addConversation("Chat");
    handle("set_pinned", () => {
      throw { kind: "io", message: "the database is read-only" };
    });
    await mount();
    click($("pin"));
    await settle();
    expect(root.textContent).toContain("Could not pin the chat: the database is read-only");
    expect([...root.querySelectorAll(".sidebar-heading")].map((h) => h.textContent)).toEqual(["Today"]);
  });

  it("deletes a chat only after confirmation", async () => {
    const chat = backend.addConversation("Doomed");
    await mount();
    click($("delete"));
    await settle();
    expect($("delete-dialog")?.textContent).toContain("Delete “Doomed”?");
    click($("confirm-cancel"));
    await settle();
    expect(callsOf("delete_conversation")).toHaveLength(0);

    click($("delete"));
    await settle();
    click($("confirm-ok"));
    await settle();
    expect(callsOf("delete_conversation").at(-1)?.args).toEqual({ id: chat.id });
    expect($$("conversation-item")).toHaveLength(0);
  });

  it("searches and shows hits with the matched runs highlighted, as text", async () => {
    const chat = backend.addConversation("Cooking", [
      message({ id: "u1", conversationId: "", role: "user", text: "pasta?" }),
      message({ id: "a1", conversationId: "", role: "assistant", text: "Boil the pasta." }),
    ]);
    backend.hits = [
      {
        conversationId: chat.id,
        title: "Cooking",
        messageId: "a1",
        snippet: [
          { text: "Boil the ", matched: false },
          { text: "pasta", matched: true },
          { text: " <img src=x onerror=alert(1)>", matched: false },
        ],
      },
    ];
    await mount();
    const search = $("search") as HTMLInputElement;
    search.value = "pasta";
    search.dispatchEvent(new Event("input", { bubbles: true }));
    await new Promise((resolve) => setTimeout(resolve, 200));
    await settle();
    expect(callsOf("search_conversations").at(-1)?.args).toEqual({ query: "pasta" });
    const hit = $("search-hit");
    expect(hit?.querySelector("mark")?.textContent).toBe("pasta");
    expect(hit?.querySelector("img")).toBeNull();
    expect(hit?.textContent).toContain("<img src=x onerror=alert(1)>");
    click(hit?.querySelector("button") ?? null);
    await settle();
    // Opened at the hit, so a hit in a version not shown brings that version into view.
    expect(callsOf("open_message").at(-1)?.args).toEqual({ conversationId: chat.id, messageId: "a1" });
    expect(messages()).toHaveLength(2);
  });
});

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

    frames.length = 0;
    for (const word of ["Hi", " there", ",", " how", " can", " I", " help?"]) backend.delta(sent, word, 1);
    const answer = messages()[1] as HTMLElement;
    expect(answer.dataset.status).toBe("streaming");
    expect(frames).toHaveLength(1);
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
    click([...(notice?.querySelectorAll("button") ?? [])].find((b) => b.textContent === "Context Length…") ?? null);
    await settle();
    expect(($("settings-dialog") as HTMLDialogElement).open).toBe(true);
    // Context Length… lands on the context length.
    const field = $("setting-contextLength") as HTMLInputElement;
    expect(document.activeElement).toBe(field);
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

describe("export and import", () => {
  it("offers export and copy in the chat's menu only for a saved chat", async () => {
    await mount();
    const chatMenu = $("chat-menu")?.parentElement as HTMLElement;
    expect(chatMenu.hidden).toBe(true);
    const sent = await sendText("Plan a trip");
    backend.done(sent);
    await settle();
    expect(chatMenu.hidden).toBe(false);

    click($("chat-menu"));
    expect(($("export-markdown")?.parentElement as HTMLElement).hidden).toBe(false);
    click($("export-markdown"));
    await settle();
    expect(callsOf("export_markdown").at(-1)?.args).toEqual({ id: sent.conversation.id });
    expect(root.textContent).toContain(`Exported to /Users/ada/Documents/${sent.conversation.id}.md`);
    expect(($("export-json")?.parentElement as HTMLElement).hidden).toBe(true);

    click($("chat-menu"));
    click($("export-json"));
    await settle();
    expect(callsOf("export_json").at(-1)?.args).toEqual({ id: sent.conversation.id });

    const writeText = vi.fn(() => Promise.resolve());
    Object.defineProperty(navigator, "clipboard", { value: { writeText }, configurable: true });
    click($("chat-menu"));
    click($("copy-conversation"));
    await settle();
    expect(writeText).toHaveBeenCalledWith("# Plan a trip\n");
    expect(root.textContent).toContain("Conversation copied as Markdown");
  });

  it("exports every chat and imports, saying what was added and what was skipped", async () => {
    await mount();
    click($("export-all"));
    await settle();
    expect(callsOf("export_json").at(-1)?.args).toEqual({ id: null });
    expect(root.textContent).toContain("Every chat exported to /Users/ada/Documents/all.json");

    backend.addConversation("Imported chat", [message({ id: "i1", conversationId: "", role: "user", text: "Hi" })]);
    backend.importReport = {
      conversationsAdded: 1,
      conversationsUpdated: 0,
      conversationsUnchanged: 1,
      messagesAdded: 1,
      messagesSkipped: 4,
    };
    click($("import-chats"));
    await settle();
    expect(root.textContent).toContain("Imported 1 message (1 chat added); skipped 4 messages already here.");
    expect($$("conversation-item").map((item) => item.querySelector(".item-title")?.textContent)).toContain(
      "Imported chat",
    );
  });

  it("shows why an import was refused", async () => {
    await mount();
    handle("import_json", () => {
      throw { kind: "invalidInput", message: "this file cannot be imported, nothing was changed: it is not JSON" };
    });
    click($("import-chats"));
    await settle();
    expect(root.textContent).toContain("Could not import: this file cannot be imported, nothing was changed");
  });
});

describe("links in answers", () => {
  it("asks before opening a link, then opens it in the browser", async () => {
    await mount();
    const sent = await sendText("Link?");
    backend.delta(sent, "See [the docs](https://example.com/docs).", 5);
    backend.done(sent);
    const link = messages()[1]?.querySelector("a") as HTMLAnchorElement;
    const event = new MouseEvent("click", { bubbles: true, cancelable: true });
    link.dispatchEvent(event);
    expect(event.defaultPrevented).toBe(true);
    await settle();
    expect($("link-dialog")?.textContent).toContain("https://example.com/docs");
    expect(callsOf("open_link")).toHaveLength(0);
    click($("confirm-ok"));
    await settle();
    expect(callsOf("open_link").at(-1)?.args).toEqual({ url: "https://example.com/docs" });
  });

  it("does nothing when the user declines", async () => {
    await mount();
    const sent = await sendText("Link?");
    backend.delta(sent, "https://example.com", 5);
    backend.done(sent);
    click(messages()[1]?.querySelector("a") ?? null);
    await settle();
    click($("confirm-cancel"));
    await settle();
    expect(callsOf("open_link")).toHaveLength(0);
    expect($("link-dialog")).toBeNull();
  });
});

describe("attachments", () => {
  const image: PendingAttachment = {
    id: "p1",
    name: "cat.png",
    kind: "image",
    mime: "image/png",
    width: 640,
    height: 480,
    durationMs: null,
    byteSize: 12_000,
    thumbnail: "data:image/png;base64,AAAA",
    notice: null,
  };

  it("shows a drop overlay while files hover and adds dropped images", async () => {
    await mount();
    expect($("drop-overlay")?.hidden).toBe(true);
    emit("drop", { type: "hover", active: true });
    expect($("drop-overlay")?.hidden).toBe(false);
    emit("drop", { type: "added", attachments: [image], errors: ["notes.pdf is not an image"] });
    expect($("drop-overlay")?.hidden).toBe(true);
    expect($$("pending-attachment")).toHaveLength(1);
    expect($("pending-attachment")?.querySelector("img")?.getAttribute("src")).toBe(image.thumbnail);
    expect($("toasts")?.textContent).toContain("notes.pdf is not an image");
  });

  it("removes an attachment before sending", async () => {
    await mount();
    emit("drop", { type: "added", attachments: [image], errors: [] });
    click($("pending-attachment")?.querySelector("button") ?? null);
    await settle();
    expect($$("pending-attachment")).toHaveLength(0);
    expect(callsOf("remove_pending_attachment").at(-1)?.args).toEqual({ id: "p1" });
  });

  it("sends attachments with the message and shows them in the history", async () => {
    await mount();
    backend.picked = [image];
    click($("attach"));
    await settle();
    expect($$("pending-attachment")).toHaveLength(1);
    await sendText("What is this?");
    expect(callsOf("send_message").at(-1)?.args).toEqual({
      request: { conversationId: null, text: "What is this?", attachmentIds: ["p1"] },
    });
    expect($$("pending-attachment")).toHaveLength(0);
    await settle();
    const shown = messages()[0]?.querySelector<HTMLImageElement>('[data-testid="message-attachment"]');
    expect(shown?.getAttribute("src")).toBe("data:image/png;base64,a-p1");
    expect(callsOf("attachment_thumbnail").at(-1)?.args).toEqual({ attachmentId: "a-p1" });

    // A click shows it full size; Close (or Esc) closes it.
    click(shown?.closest("button") ?? null);
    await settle();
    const viewer = $("image-viewer") as HTMLDialogElement;
    expect(viewer.open).toBe(true);
    expect(viewer.querySelector("img")?.getAttribute("src")).toBe("data:image/png;base64,full-a-p1");
    expect(callsOf("attachment_view").at(-1)?.args).toEqual({ attachmentId: "a-p1" });
    click($("image-viewer-close"));
    await settle();
    expect($("image-viewer")).toBeNull();
  });

  it("sends pasted images to the backend as raw bytes", async () => {
    handle("add_pasted_file", () => image);
    await mount();
    const file = new File([new Uint8Array([137, 80, 78, 71])], "clip.png", { type: "image/png" });
    const paste = new Event("paste", { bubbles: true, cancelable: true }) as ClipboardEvent;
    Object.defineProperty(paste, "clipboardData", { value: { files: [file] } });
    composer().dispatchEvent(paste);
    expect(paste.defaultPrevented).toBe(true);
    await settle();
    const call = callsOf("add_pasted_file").at(-1);
    expect([...(call?.args as unknown as Uint8Array)]).toEqual([137, 80, 78, 71]);
    expect(call?.options).toEqual({ headers: { "x-file-name": "clip.png" } });
    expect($$("pending-attachment")).toHaveLength(1);
  });

  function paste(data: { files: File[]; text: string }): ClipboardEvent {
    const event = new Event("paste", { bubbles: true, cancelable: true }) as ClipboardEvent;
    Object.defineProperty(event, "clipboardData", {
      value: { files: data.files, getData: (type: string) => (type === "text/plain" ? data.text : "") },
    });
    composer().dispatchEvent(event);
    return event;
  }

  it("reads the clipboard's image in the backend when the paste brings no file (WebKitGTK)", async () => {
    handle("paste_clipboard_image", () => image);
    await mount();
    const event = paste({ files: [], text: "" });
    expect(event.defaultPrevented).toBe(true);
    await settle();
    expect(callsOf("paste_clipboard_image")).toHaveLength(1);
    expect($$("pending-attachment")).toHaveLength(1);
  });

  it("says so when a paste brings neither text nor an image", async () => {
    handle("paste_clipboard_image", () => null);
    await mount();
    paste({ files: [], text: "" });
    await settle();
    expect($$("pending-attachment")).toHaveLength(0);
    expect(root.querySelector(".toast")?.textContent).toContain(
      "Nothing to paste: the clipboard holds neither text nor an image.",
    );
  });

  it("leaves a text paste to the text field and asks the backend for nothing", async () => {
    handle("paste_clipboard_image", () => image);
    await mount();
    const event = paste({ files: [], text: "hello" });
    expect(event.defaultPrevented).toBe(false);
    await settle();
    expect(callsOf("paste_clipboard_image")).toHaveLength(0);
  });
});

describe("audio", () => {
  const voicemail: PendingAttachment = {
    id: "v1",
    name: "voicemail.wav",
    kind: "audio",
    mime: "audio/wav",
    width: null,
    height: null,
    durationMs: 65_000,
    byteSize: 2_080_044,
    thumbnail: null,
    notice: null,
  };

  it("adds dropped audio as a chip, sends it, and shows it in the history with a play button", async () => {
    await mount();
    emit("drop", { type: "added", attachments: backend.attach([voicemail]), errors: [] });
    expect($("pending-audio")?.textContent).toContain("voicemail.wav");
    expect($("pending-audio-duration")?.textContent).toBe("1:05");

    await sendText("What does the caller want?");

    expect(backend.requests.at(-1)?.attachmentIds).toEqual(["v1"]);
    await settle();
    const chip = messages()[0]?.querySelector<HTMLElement>('[data-testid="message-audio"]');
    expect(chip?.textContent).toContain("voicemail.wav");
    expect(chip?.textContent).toContain("1:05");
    expect(messages()[0]?.querySelector("img")).toBeNull();
    click(chip?.querySelector('[data-testid="message-audio-play"]') ?? null);
    await settle();
    expect(callsOf("attachment_audio").at(-1)?.args).toEqual({ attachmentId: "a-v1" });
    expect(chip?.querySelector("audio")?.getAttribute("src")).toMatch(/^blob:/);
  });

  it("says under a long recording, in the composer and in the history, how much was heard", async () => {
    await mount();
    const long = { ...voicemail, durationMs: 845_000, notice: "Only the first 10:00 of 14:05 will be heard." };
    emit("drop", { type: "added", attachments: backend.attach([long]), errors: [] });
    expect($("pending-audio-notice")?.textContent).toBe("Only the first 10:00 of 14:05 will be heard.");
    await sendText("Summarize the call");
    await settle();
    const notice = messages()[0]?.querySelector('[data-testid="message-audio-notice"]');
    expect(notice?.textContent).toBe("Only the first 10:00 of 14:05 was heard.");
  });

  it("keeps the text and the audio when the backend refuses to send", async () => {
    await mount();
    emit("drop", { type: "added", attachments: backend.attach([voicemail]), errors: [] });
    handle("send_message", () => {
      throw { kind: "invalidInput", message: "this model cannot hear audio; remove the audio to send" };
    });
    type("Transcribe it");
    press(composer(), "Enter");
    await settle();
    expect(composer().value).toBe("Transcribe it");
    expect($$("pending-audio")).toHaveLength(1);
    expect(root.querySelector(".toast")?.textContent).toContain("this model cannot hear audio");
    expect(messages()).toHaveLength(0);
  });

  it("records from the microphone and attaches the recording as a WAV file", async () => {
    const recorded = { ...voicemail, id: "r1", name: "Recording 10.30.wav", durationMs: 2_000 };
    handle("add_pasted_file", () => recorded);
    const track = { stop: vi.fn() };
    const graph: { process?: ((event: unknown) => void) | null } = {};
    vi.stubGlobal("navigator", {
      ...navigator,
      mediaDevices: { getUserMedia: () => Promise.resolve({ getTracks: () => [track] }) },
    });
    vi.stubGlobal(
      "AudioContext",
      class {
        sampleRate = 16_000;
        state = "running";
        destination = {};
        createMediaStreamSource = () => ({ connect: () => {}, disconnect: () => {} });
        createScriptProcessor = () => {
          const node = {
            connect: () => {},
            disconnect: () => {},
            set onaudioprocess(handler: ((event: unknown) => void) | null) {
              graph.process = handler;
            },
          };
          return node;
        };
        resume = () => Promise.resolve();
        close = () => Promise.resolve();
      },
    );
    try {
      await mount();
      type("what did I say?");
      click($("record"));
      await settle();
      expect($("recording")?.hidden).toBe(false);
      graph.process?.({ inputBuffer: { getChannelData: () => new Float32Array(32_000).fill(0.25) } });
      click($("record"));
      await settle();

      const call = callsOf("add_pasted_file").at(-1);
      const wav = call?.args as unknown as Uint8Array;
      expect(String.fromCharCode(...wav.subarray(0, 4))).toBe("RIFF");
      expect(wav.length).toBe(44 + 32_000 * 2);
      expect((call?.options as { headers: Record<string, string> }).headers["x-file-name"]).toMatch(
        /^Recording \d\d\.\d\d\.wav$/,
      );
      expect(track.stop).toHaveBeenCalled();
      expect($("pending-audio")?.textContent).toContain("Recording 10.30.wav");
      expect(composer().value).toBe("what did I say?");
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it("says so when the microphone is denied and keeps what was typed", async () => {
    vi.stubGlobal("navigator", {
      ...navigator,
      mediaDevices: { getUserMedia: () => Promise.reject(new DOMException("denied", "NotAllowedError")) },
    });
    try {
      await mount();
      type("still here");
      click($("record"));
      await settle();
      expect(root.querySelector(".toast")?.textContent).toContain("may not use the microphone");
      expect(composer().value).toBe("still here");
      expect(callsOf("add_pasted_file")).toHaveLength(0);
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it("turns the microphone off, saying why, for a model without an audio tower", async () => {
    if (READY.state !== "ready") throw new Error("READY is a ready model");
    backend.status = { ...backend.status, model: { ...READY, audio: false } };
    await mount();
    const record = $("record") as HTMLButtonElement;
    expect(record.disabled).toBe(true);
    expect(record.title).toBe("This model does not hear audio");
    emit("drop", { type: "added", attachments: backend.attach([voicemail]), errors: [] });
    expect(root.querySelector(".toast")?.textContent).toContain("This model does not hear audio");
  });
});

describe("settings", () => {
  it("opens with Cmd+, and saves valid settings", async () => {
    await mount();
    press(document.body, ",", { metaKey: true });
    await settle();
    const dialog = $("settings-dialog") as HTMLDialogElement;
    expect(dialog.open).toBe(true);
    const temperature = $("setting-temperature") as HTMLInputElement;
    expect(temperature.value).toBe("1");
    temperature.value = "0.7";
    ($("setting-thinking") as HTMLInputElement).checked = true;
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings").at(-1)?.args).toEqual({
      settings: { ...backend.settings, temperature: 0.7, thinking: true },
    });
    expect(dialog.open).toBe(false);
  });

  it("refuses invalid values with a message next to the field", async () => {
    await mount();
    click($("settings"));
    await settle();
    const topP = $("setting-topP") as HTMLInputElement;
    topP.value = "3";
    ($("setting-maxTokens") as HTMLInputElement).value = "1.5";
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings")).toHaveLength(0);
    expect(topP.getAttribute("aria-invalid")).toBe("true");
    const describedBy = topP.getAttribute("aria-describedby")?.split(" ") ?? [];
    const messagesText = describedBy.map((id) => root.querySelector(`#${id}`)?.textContent).join(" ");
    expect(messagesText).toContain("Top P must be between 0.01 and 1.");
    expect(root.textContent).toContain("Maximum answer length must be a whole number.");
    expect(document.activeElement).toBe(topP);

    // Fixing a value clears its error at once; the other stays until it is fixed too.
    topP.value = "0.9";
    topP.dispatchEvent(new Event("input", { bubbles: true }));
    expect(topP.hasAttribute("aria-invalid")).toBe(false);
    expect(root.textContent).not.toContain("Top P must be");
    expect(root.textContent).toContain("Maximum answer length must be a whole number.");
    // Typing in a field with no error shown shows none yet.
    const temperature = $("setting-temperature") as HTMLInputElement;
    temperature.value = "-";
    temperature.dispatchEvent(new Event("input", { bubbles: true }));
    expect(temperature.hasAttribute("aria-invalid")).toBe(false);
  });

  it("checks the limits the backend sends, not limits of its own", async () => {
    backend.status.settingsLimits = {
      ...backend.status.settingsLimits,
      contextLength: { min: 1024, max: 8192 },
      imageTokenBudgets: [70, 280],
    };
    await mount();
    click($("settings"));
    await settle();
    const context = $("setting-contextLength") as HTMLInputElement;
    expect([context.min, context.max]).toEqual(["1024", "8192"]);
    const budgets = [...($("setting-imageTokenBudget") as HTMLSelectElement).options].map((o) => o.value);
    expect(budgets).toEqual(["70", "280"]);
    expect(($("setting-imageTokenBudget") as HTMLSelectElement).value).toBe("280");
    context.value = "16384";
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings")).toHaveLength(0);
    expect(root.textContent).toContain("Context length must be between 1,024 and 8,192.");
  });

  it("shows the backend's validation error", async () => {
    handle("save_settings", () => {
      throw { kind: "invalidInput", message: "Context length exceeds what this model supports." };
    });
    await mount();
    click($("settings"));
    await settle();
    click($("settings-save"));
    await settle();
    expect(($("settings-dialog") as HTMLDialogElement).open).toBe(true);
    expect(root.querySelector(".form-error")?.textContent).toBe("Context length exceeds what this model supports.");
  });
});

describe("keyboard", () => {
  it("starts a new chat with Cmd+N", async () => {
    const chat = backend.addConversation("Open", [message({ id: "u1", conversationId: "", role: "user", text: "hi" })]);
    await mount();
    click(root.querySelector(`[data-conversation-id="${chat.id}"] .item-button`));
    await settle();
    expect(messages()).toHaveLength(1);
    const event = press(document.body, "n", { metaKey: true });
    expect(event.defaultPrevented).toBe(true);
    expect(messages()).toHaveLength(0);
    expect(document.activeElement).toBe(composer());
  });

  it("does not send while generating; Enter in the composer is ignored then", async () => {
    await mount();
    await sendText("one");
    type("two");
    press(composer(), "Enter");
    await settle();
    expect(callsOf("send_message")).toHaveLength(1);
    expect(composer().value).toBe("two");
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

  it("say how many tokens each round gave when the answer was drafted, and nothing when it was not", async () => {
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
    ]);
    await mount();
    click(root.querySelector(".item-button"));
    await settle();
    const stats = $$("answer-stats").map((s) => s.textContent ?? "");
    expect(stats[0]).toContain("2.5 tokens/round");
    expect(stats[1]).not.toContain("tokens/round");
  });
});

describe("faster answers (Settings)", () => {
  async function openFaster(): Promise<HTMLElement> {
    await mount();
    click($("settings"));
    await settle();
    return $("faster-panel") as HTMLElement;
  }

  it("names what to download when no assistant model is found, and switches on and off", async () => {
    const panel = await openFaster();
    const status = () => panel.querySelector('[data-testid="faster-status"]')?.textContent ?? "";
    const toggle = () => panel.querySelector<HTMLInputElement>('[data-testid="faster-toggle"]');
    expect(status()).toContain("No assistant model was found: download mlx-community/gemma-4-E4B-it-assistant-bf16");
    expect(toggle()?.checked).toBe(true);
    const box = toggle() as HTMLInputElement;
    box.checked = false;
    box.dispatchEvent(new Event("change"));
    await settle();
    expect(callsOf("set_faster_answers").at(-1)?.args).toEqual({ on: false });
    expect(status()).toContain(
      "Off: answers come from the model alone. When on, /models/gemma-4-E4B-it-assistant-bf16",
    );
    expect(toggle()?.checked).toBe(false);
    const again = toggle() as HTMLInputElement;
    again.checked = true;
    again.dispatchEvent(new Event("change"));
    await settle();
    expect(status()).toContain("drafts 3 tokens at a time and the model checks them");
  });

  it("downloads the assistant model with progress and Cancel, then says it drafts", async () => {
    const panel = await openFaster();
    click(panel.querySelector('[data-testid="faster-download"]'));
    await settle();
    expect(callsOf("download_drafter")).toHaveLength(1);
    backend.fasterChanged({ state: "downloading", progress: drafterProgress(53_000_000) });
    const status = () => panel.querySelector('[data-testid="faster-status"]')?.textContent ?? "";
    expect(status()).toContain("Downloading the assistant model: 53 MB of 159 MB, 12 MB/s");
    expect(status()).toContain("Answers come from the model alone until it is here.");
    const bar = panel.querySelector('[data-testid="faster-download-progress"]');
    expect([bar?.getAttribute("value"), bar?.getAttribute("max")]).toEqual(["53000000", "159000000"]);
    expect(panel.querySelector('[data-testid="faster-download"]')).toBeNull();
    click(panel.querySelector('[data-testid="faster-cancel-download"]'));
    await settle();
    expect(callsOf("cancel_drafter_download")).toHaveLength(1);
    backend.fasterChanged({
      state: "on",
      drafter: "/models/gemma-4-E4B-it-assistant-bf16",
      blockSize: 4,
      parameters: 78_517_764,
    });
    expect(status()).toContain("On: /models/gemma-4-E4B-it-assistant-bf16 drafts 3 tokens at a time");
    expect(panel.querySelector('[data-testid="faster-download-progress"]')).toBeNull();
  });

  it("says why the last download of the assistant model stopped, and offers it again", async () => {
    backend.faster = {
      state: "missing",
      repo: "mlx-community/gemma-4-E4B-it-assistant-bf16",
      modelsDir: "/models",
      failed:
        "The download stopped: cannot reach huggingface.co; check the internet connection. Try again to resume it.",
    };
    const panel = await openFaster();
    expect(panel.querySelector('[data-testid="faster-download-failed"]')?.textContent).toContain(
      "cannot reach huggingface.co",
    );
    expect(panel.querySelector('[data-testid="faster-download"]')?.textContent).toBe(
      "Download Assistant Model (159 MB)",
    );
  });

  it("says why a drafter cannot be used, and a refused switch in words", async () => {
    backend.faster = {
      state: "refused",
      drafter: "/x/assistant",
      reason: "the drafter does not fit this model: its sliding_window is 64, the model's is 512",
    };
    handle("set_faster_answers", () => {
      throw { kind: "invalid", message: "The engine has stopped." };
    });
    const panel = await openFaster();
    expect(panel.querySelector('[data-testid="faster-status"]')?.textContent).toBe(
      "/x/assistant cannot be used: the drafter does not fit this model: its sliding_window is 64, the model's is 512. Answers come from the model alone.",
    );
    const box = panel.querySelector<HTMLInputElement>('[data-testid="faster-toggle"]') as HTMLInputElement;
    box.checked = false;
    box.dispatchEvent(new Event("change"));
    await settle();
    expect(panel.querySelector('[data-testid="faster-error"]')?.textContent).toBe("The engine has stopped.");
  });
});

describe("several chats", () => {
  it("keeps each chat's draft, refuses to send beside another answer in words, and Esc stops only the answer on screen", async () => {
    const other = backend.addConversation("Other");
    await mount();
    const sent = await sendText("Tell me a story");
    backend.delta(sent, "Once", 1);
    type("half a thought");

    // Chat B while A answers: Send, not Stop; the reason it cannot send yet, in words.
    click(root.querySelector(`[data-conversation-id="${other.id}"] .item-button`));
    await settle();
    expect(composer().value).toBe("");
    expect($("send")?.hidden).toBe(false);
    expect($("stop")?.hidden).toBe(true);
    type("for B");
    expect(($("send") as HTMLButtonElement).disabled).toBe(true);
    expect(root.querySelector(".composer-hint")?.textContent).toContain("Another chat");
    expect(root.querySelector(".composer-hint")?.textContent).toContain("Tell me a story");
    const sends = callsOf("send_message").length;
    press(composer(), "Enter");
    await settle();
    expect(callsOf("send_message").length).toBe(sends);

    // Esc in B leaves A's answer running.
    press(document.body, "Escape");
    await settle();
    expect(callsOf("stop_generation")).toHaveLength(0);

    // Back in A: its own draft, and Esc stops its answer.
    click(root.querySelector(`[data-conversation-id="${sent.conversation.id}"] .item-button`));
    await settle();
    expect(composer().value).toBe("half a thought");
    press(document.body, "Escape");
    await settle();
    expect(callsOf("stop_generation").at(-1)?.args).toEqual({ generationId: sent.generationId });
    backend.done(sent, { stopReason: "cancelled" });

    // B kept its draft, and can send now.
    click(root.querySelector(`[data-conversation-id="${other.id}"] .item-button`));
    await settle();
    expect(composer().value).toBe("for B");
    expect(($("send") as HTMLButtonElement).disabled).toBe(false);
  });
});

describe("settings → model", () => {
  async function openModelSettings(): Promise<HTMLElement> {
    await mount();
    click($("settings"));
    await settle();
    return $("model-panel") as HTMLElement;
  }

  function fact(panel: HTMLElement, label: string): string | null | undefined {
    return panel.querySelector(`[data-fact="${label}"]`)?.textContent;
  }

  it("describes the loaded model: name, folder, size, weights, parameters, context, towers", async () => {
    const panel = await openModelSettings();
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
    expect(fact(panel, "Folder")).toBe("/models/gemma-4-e4b");
    expect(fact(panel, "Size on disk")).toBe("5.2 GB");
    expect(fact(panel, "Weights")).toBe("4-bit (affine)");
    expect(fact(panel, "Parameters")).toBe("7.9 billion");
    expect(fact(panel, "Context limit")).toBe("8,192 tokens");
    expect(fact(panel, "Images")).toBe("yes");
    expect(fact(panel, "Audio")).toBe("in the checkpoint (Gemma Desk does not use it)");
  });

  it("loads another folder and shows what it is", async () => {
    if (READY.state !== "ready") throw new Error("READY is ready");
    const other: ModelState = {
      ...READY,
      name: "gemma-4-e4b-it-bf16",
      dir: "/hf/snapshots/abc",
      checkpoint: {
        ...READY.checkpoint,
        name: "gemma-4-e4b-it-bf16",
        dir: "/hf/snapshots/abc",
        quantizationBits: null,
        quantizationMode: null,
        parameters: 7_940_000_000,
        sizeBytes: 15_000_000_000,
        audio: false,
      },
    };
    handle("choose_model_folder", () => other);
    const panel = await openModelSettings();
    click($("model-choose-folder"));
    await settle();
    expect(callsOf("choose_model_folder")).toHaveLength(1);
    expect(fact(panel, "Name")).toBe("gemma-4-e4b-it-bf16");
    expect(fact(panel, "Weights")).toBe("bfloat16, not quantized");
    expect(fact(panel, "Size on disk")).toBe("15 GB");
    expect(fact(panel, "Audio")).toBe("no");
    expect($("model-status")?.textContent).toBe("gemma-4-e4b-it-bf16");
  });

  it("shows why a folder was refused, in words, and keeps the model in use", async () => {
    handle("choose_model_folder", () => {
      throw {
        kind: "modelInvalid",
        message: '/m/llama: This is a Llama model (model_type "llama"); Gemma Desk runs Gemma 4 E4B',
      };
    });
    const panel = await openModelSettings();
    click($("model-choose-folder"));
    await settle();
    expect($("model-error")?.getAttribute("role")).toBe("alert");
    expect($("model-error")?.textContent).toBe(
      '/m/llama: This is a Llama model (model_type "llama"); Gemma Desk runs Gemma 4 E4B',
    );
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
  });

  it("downloads the checkpoint picked from those offered, with progress and cancel", async () => {
    handle("download_model", () => undefined);
    handle("cancel_download", () => undefined);
    const panel = await openModelSettings();
    const choice = $("model-download-choice") as HTMLSelectElement;
    expect([...choice.options].map((o) => o.textContent)).toEqual(DOWNLOADS.map((d) => d.label));
    choice.value = "mlx-community/gemma-4-e4b-it-8bit";
    click($("model-download"));
    await settle();
    expect(callsOf("download_model").at(-1)?.args).toEqual({ repo: "mlx-community/gemma-4-e4b-it-8bit" });
    // The model in use stays ready, the download beside it.
    emit("model-state", {
      ...READY,
      download: {
        repo: "mlx-community/gemma-4-e4b-it-8bit",
        progress: {
          file: "model.safetensors",
          filesDone: 0,
          filesTotal: 3,
          bytesDone: 2_000_000_000,
          bytesTotal: 8_000_000_000,
          bytesPerSecond: 50_000_000,
          etaSeconds: 120,
        },
        failed: null,
      },
    });
    expect($("model-panel-status")?.textContent).toContain(
      `${DOWNLOADS[1]?.label}. Downloading: 2.0 GB of 8.0 GB (25%)`,
    );
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
    expect($("model-download")).toBeNull();
    // Chatting goes on meanwhile.
    click($("settings-cancel"));
    await settle();
    expect(($("send") as HTMLButtonElement | null)?.hidden).toBe(false);
    type("Still here?");
    expect(($("send") as HTMLButtonElement).disabled).toBe(false);
    expect(root.querySelector(".composer-hint")?.textContent ?? "").not.toContain("downloading");
    click($("settings"));
    await settle();
    click($("model-cancel-download"));
    await settle();
    expect(callsOf("cancel_download")).toHaveLength(1);
    emit("model-state", READY);
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
  });

  it("says why a download beside the model stopped, and offers the downloads again", async () => {
    const panel = await openModelSettings();
    emit("model-state", {
      ...READY,
      download: {
        repo: "mlx-community/gemma-4-e4b-it-8bit",
        progress: null,
        failed:
          "The download stopped: cannot reach huggingface.co; check the internet connection. Try again to resume it.",
      },
    });
    expect($("model-download-failed")?.textContent).toContain("cannot reach huggingface.co");
    expect($("model-download")).not.toBeNull();
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
  });

  it("forgets the model and goes back to the model picker", async () => {
    handle("forget_model", () => ({ state: "none" }));
    await openModelSettings();
    click($("model-forget"));
    await settle();
    expect(callsOf("forget_model")).toHaveLength(1);
    expect(($("settings-dialog") as HTMLDialogElement).open).toBe(false);
    expect($("first-run")).not.toBeNull();
    expect($("download")).not.toBeNull();
  });

  it("says that switching stops the answer being written", async () => {
    await mount();
    await sendText("Tell me a story");
    backend.delta(backend.lastSent, "Once", 1);
    click($("settings"));
    await settle();
    expect($("model-panel")?.textContent).toContain("Switching stops the answer being written; what it wrote is kept.");
  });
});

describe("a chat's own system prompt", () => {
  const button = () => $("system-prompt-button") as HTMLButtonElement;
  const preset = () => $("system-prompt-preset") as HTMLSelectElement;
  const text = () => $("system-prompt-text") as HTMLTextAreaElement;

  function choose(value: string): void {
    preset().value = value;
    preset().dispatchEvent(new Event("change", { bubbles: true }));
  }

  it("goes with a new chat's first message, changes mid-chat, and can follow the default again", async () => {
    backend.settings.systemPrompt = "Be kind.";
    await mount();
    expect(button().textContent).toContain("Default");
    expect(button().title).toContain("Be kind.");

    button().focus();
    click(button());
    const dialog = $("system-prompt-dialog") as HTMLDialogElement;
    expect(dialog.open).toBe(true);
    expect(text().readOnly).toBe(true);
    expect(text().value).toBe("Be kind.");
    press(dialog, "Escape");
    expect($("system-prompt-dialog")).toBeNull();
    expect(document.activeElement).toBe(button());

    click(button());
    choose(String(SYSTEM_PROMPT_PRESETS.findIndex((p) => p.name === "Concise")));
    const concise = SYSTEM_PROMPT_PRESETS.find((p) => p.name === "Concise")?.text ?? "";
    expect(text().value).toBe(concise);
    expect(text().readOnly).toBe(false);
    click($("system-prompt-save"));
    await settle();
    expect($("system-prompt-dialog")).toBeNull();
    expect(button().textContent).toContain("Concise");
    expect(callsOf("set_system_prompt")).toHaveLength(0);

    const sent = await sendText("Hello");
    expect(callsOf("send_message").at(-1)?.args).toEqual({
      request: { conversationId: null, text: "Hello", attachmentIds: [], systemPrompt: concise },
    });
    backend.done(sent);

    // The person's own words, for the saved chat: stored at once, used from the next answer.
    click(button());
    text().value = "Answer in French.";
    text().dispatchEvent(new Event("input", { bubbles: true }));
    expect(preset().value).toBe("custom");
    click($("system-prompt-save"));
    await settle();
    expect(callsOf("set_system_prompt").at(-1)?.args).toEqual({
      conversationId: sent.conversation.id,
      prompt: "Answer in French.",
    });
    expect(button().textContent).toContain("Custom");

    click(button());
    choose("default");
    expect(text().value).toBe("Be kind.");
    click($("system-prompt-save"));
    await settle();
    expect(callsOf("set_system_prompt").at(-1)?.args).toEqual({ conversationId: sent.conversation.id, prompt: null });
    expect(button().textContent).toContain("Default");
  });

  it("shows the prompt of the chat opened, and refuses one over the limit in words", async () => {
    const chat = backend.addConversation("Quiet", [
      message({ id: "u1", conversationId: "", role: "user", text: "Hi" }),
    ]);
    chat.systemPrompt = "";
    await mount();
    expect(button().textContent).toContain("Default");
    click(root.querySelector(".item-button"));
    await settle();
    expect(button().textContent).toContain("None");
    expect(button().title).toBe("This chat sends no system prompt.");

    click(button());
    expect(preset().value).toBe(String(SYSTEM_PROMPT_PRESETS.findIndex((p) => p.name === "None")));
    text().value = "x".repeat(backend.status.settingsLimits.systemPromptChars + 1);
    text().dispatchEvent(new Event("input", { bubbles: true }));
    expect($("system-prompt-dialog")?.textContent).toContain("it can be at most 8,000");
    click($("system-prompt-save"));
    await settle();
    expect(callsOf("set_system_prompt")).toHaveLength(0);
    expect(($("system-prompt-dialog") as HTMLDialogElement).open).toBe(true);
    click($("system-prompt-cancel"));
    expect(button().textContent).toContain("None");
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
    expect(callsOf("count_tokens").map((c) => c.args)).toEqual([{ text: "one two three" }]);
    expect($("token-count")?.hidden).toBe(false);
    expect($("token-count")?.textContent).toBe("3 tokens · 7,165 left");
  });
});
