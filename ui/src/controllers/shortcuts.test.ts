// @vitest-environment jsdom
// The window's shortcuts and links: keys, and links that only open after asking.
// Whole-window tests run in jsdom (see test/window.ts).
import "../test/dialog-polyfill";

import { describe, expect, it, vi } from "vitest";

import { message } from "../test/backend";
import { callsOf } from "../test/fake-tauri";
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
} from "../test/window";

vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));

useWindow();

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
