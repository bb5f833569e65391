import { el } from "../dom";

/** The left column: app name, the (for now empty) chat list, and the version. */
export function sidebarView(version: string | null): HTMLElement {
  return el(
    "aside",
    { class: "sidebar", "aria-label": "Sidebar" },
    el("p", { class: "brand" }, "Gemma Desk"),
    el(
      "section",
      { class: "chats", "aria-labelledby": "chats-heading" },
      el("h2", { id: "chats-heading", class: "sidebar-heading" }, "Chats"),
      el("p", { class: "sidebar-empty" }, "No chats yet"),
    ),
    version !== null && el("p", { class: "version" }, `Version ${version}`),
  );
}
