/** The open chat's menu ("⋯" in its header): export as Markdown or JSON, copy as Markdown. */
import { el } from "../dom";

export interface ChatMenuActions {
  exportMarkdown(): void;
  exportJson(): void;
  copyConversation(): void;
}

export class ChatMenu {
  readonly element: HTMLElement;
  private readonly button: HTMLButtonElement;
  private readonly menu: HTMLElement;

  constructor(actions: ChatMenuActions) {
    this.button = el(
      "button",
      {
        type: "button",
        class: "icon-button chat-menu-button",
        "aria-label": "Chat actions",
        title: "Chat actions",
        "aria-haspopup": "menu",
        "aria-expanded": "false",
        "data-testid": "chat-menu",
      },
      "⋯",
    );
    const item = (label: string, testid: string, run: () => void) => {
      const button = el("button", { type: "button", role: "menuitem", "data-testid": testid }, label);
      button.addEventListener("click", () => {
        this.close();
        run();
      });
      return button;
    };
    this.menu = el(
      "div",
      { class: "chat-menu", role: "menu", "aria-label": "Chat actions", hidden: true },
      item("Export as Markdown…", "export-markdown", () => actions.exportMarkdown()),
      item("Export as JSON…", "export-json", () => actions.exportJson()),
      item("Copy conversation", "copy-conversation", () => actions.copyConversation()),
    );
    this.button.addEventListener("click", () => (this.menu.hidden ? this.open() : this.close()));
    this.menu.addEventListener("keydown", (event) => this.onKey(event));
    this.element = el("div", { class: "chat-menu-anchor" }, this.button, this.menu);
    document.addEventListener("click", (event) => {
      if (!this.menu.hidden && !this.element.contains(event.target as Node)) this.close();
    });
  }

  /** The menu is offered only for a saved chat. */
  setEnabled(enabled: boolean): void {
    this.element.hidden = !enabled;
    if (!enabled) this.close();
  }

  private items(): HTMLButtonElement[] {
    return [...this.menu.querySelectorAll<HTMLButtonElement>('[role="menuitem"]')];
  }

  private open(): void {
    this.menu.hidden = false;
    this.button.setAttribute("aria-expanded", "true");
    this.items()[0]?.focus();
  }

  private close(): void {
    if (this.menu.hidden) return;
    this.menu.hidden = true;
    this.button.setAttribute("aria-expanded", "false");
  }

  private onKey(event: KeyboardEvent): void {
    const items = this.items();
    const at = items.indexOf(document.activeElement as HTMLButtonElement);
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      this.close();
      this.button.focus();
    } else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      const step = event.key === "ArrowDown" ? 1 : -1;
      items[(at + step + items.length) % items.length]?.focus();
    }
  }
}
