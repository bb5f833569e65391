// @vitest-environment jsdom
// The window's conversations: the list, opening, drafts, export and import, several chats, system prompts.
// Whole-window tests run in jsdom (see test/window.ts).
import "../test/dialog-polyfill";

import { describe, expect, it, vi } from "vitest";

import { message, usage } from "../test/backend";
import { callsOf, handle } from "../test/fake-tauri";
import { SYSTEM_PROMPT_PRESETS } from "../views/system-prompt";
import {
  root,
  backend,
  settle,
  mount,
  $,
  $$,
  composer,
  press,
  type,
  sendText,
  messages,
  click,
  useWindow,
} from "../test/window";

vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));

useWindow();

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

    // The page's own clipboard refuses a write after an await (no user activation left): unused.
    const writeText = vi.fn(() => Promise.reject(new DOMException("not allowed", "NotAllowedError")));
    Object.defineProperty(navigator, "clipboard", { value: { writeText }, configurable: true });
    click($("chat-menu"));
    click($("copy-conversation"));
    await settle();
    expect(backend.clipboard).toBe("# Plan a trip\n");
    expect(writeText).not.toHaveBeenCalled();
    expect(root.textContent).toContain("Conversation copied as Markdown");

    // A message's own Copy goes the same way.
    const answer = messages()[1] as HTMLElement;
    click(answer.querySelector('[data-testid="copy"]'));
    await settle();
    expect(backend.clipboard).toBe(answer.querySelector(".message-body")?.textContent);
    expect(backend.clipboard).not.toBe("# Plan a trip\n");

    backend.clipboardError = "the clipboard cannot be written: no display";
    click($("chat-menu"));
    click($("copy-conversation"));
    await settle();
    expect(root.textContent).toContain("Could not copy the conversation: the clipboard cannot be written: no display");
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
