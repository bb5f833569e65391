import { describe, expect, it, vi } from "vitest";

import type { ConversationSummary } from "../api";
import { Sidebar, type SidebarHandlers } from "./sidebar";

const DAY = 24 * 3600 * 1000;

function summary(id: string, title: string, partial: Partial<ConversationSummary> = {}): ConversationSummary {
  const now = Date.now();
  return {
    id,
    title,
    model: null,
    pinned: false,
    createdAt: now,
    updatedAt: now,
    messageCount: 0,
    preview: null,
    ...partial,
  };
}

function sidebar(): { view: Sidebar; pin: ReturnType<typeof vi.fn<SidebarHandlers["pin"]>> } {
  const pin = vi.fn<SidebarHandlers["pin"]>();
  const handlers: SidebarHandlers = {
    newChat: vi.fn(),
    open: vi.fn(),
    rename: vi.fn(() => Promise.resolve()),
    pin,
    delete: vi.fn(),
    search: vi.fn(() => Promise.resolve([])),
    openSettings: vi.fn(),
    exportAll: vi.fn(),
    importChats: vi.fn(),
  };
  const view = new Sidebar(handlers);
  document.body.replaceChildren(view.element);
  return { view, pin };
}

function groups(view: Sidebar): [string, string[]][] {
  return [...view.element.querySelectorAll(".chat-group")].map((group) => [
    group.querySelector(".sidebar-heading")?.textContent ?? "",
    [...group.querySelectorAll(".item-title")].map((title) => title.textContent ?? ""),
  ]);
}

describe("Sidebar pinning", () => {
  it("lists pinned chats first, under “Pinned”, then the rest by date", () => {
    const { view } = sidebar();
    view.setConversations([
      summary("c1", "Pinned old", { pinned: true, updatedAt: Date.now() - 40 * DAY }),
      summary("c2", "Today's"),
      summary("c3", "Last week's", { updatedAt: Date.now() - 3 * DAY }),
      summary("c4", "Pinned today", { pinned: true }),
    ]);
    expect(groups(view)).toEqual([
      ["Pinned", ["Pinned old", "Pinned today"]],
      ["Today", ["Today's"]],
      ["Previous 7 Days", ["Last week's"]],
    ]);
  });

  it("offers Pin on an unpinned chat and Unpin on a pinned one, as buttons", () => {
    const { view, pin } = sidebar();
    const loose = summary("c1", "Loose");
    const pinned = summary("c2", "Kept", { pinned: true });
    view.setConversations([pinned, loose]);
    const button = (id: string) =>
      view.element.querySelector<HTMLButtonElement>(`[data-conversation-id="${id}"] [data-testid="pin"]`);

    expect(button("c1")?.getAttribute("aria-label")).toBe("Pin “Loose”");
    expect(button("c1")?.type).toBe("button");
    expect(button("c2")?.getAttribute("aria-label")).toBe("Unpin “Kept”");

    button("c1")?.click();
    button("c2")?.click();
    expect(pin.mock.calls).toEqual([
      [loose, true],
      [pinned, false],
    ]);
  });

  it("has no “Pinned” group while nothing is pinned", () => {
    const { view } = sidebar();
    view.setConversations([summary("c1", "One")]);
    expect(groups(view)).toEqual([["Today", ["One"]]]);
  });
});
