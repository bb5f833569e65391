/** The left column: new chat, search, the conversation list (or search hits), settings. */
import type { ConversationSummary, SearchHit } from "../api";
import { el, iconButton } from "../dom";
import { dateGroup, shortcut } from "../format";
import { icon } from "../icons";

export interface SidebarHandlers {
  newChat(): void;
  open(conversationId: string, messageId?: string): void;
  rename(conversation: ConversationSummary, title: string): Promise<void>;
  pin(conversation: ConversationSummary, pinned: boolean): void;
  delete(conversation: ConversationSummary): void;
  search(query: string): Promise<SearchHit[]>;
  openSettings(): void;
  /** Saves every chat as one JSON file. */
  exportAll(): void;
  /** Imports a JSON export. */
  importChats(): void;
}

const SEARCH_DELAY_MS = 150;

export class Sidebar {
  readonly element: HTMLElement;
  readonly searchInput: HTMLInputElement;
  private readonly list = el("nav", { class: "conversation-list", "aria-label": "Chats" });
  private readonly version = el("p", { class: "version" });
  private conversations: ConversationSummary[] = [];
  private activeId: string | null = null;
  private generating: ReadonlySet<string> = new Set<string>();
  private query = "";
  private hits: SearchHit[] | null = null;
  private searchTimer: number | undefined;
  private searchSerial = 0;
  private renamingId: string | null = null;
  private readonly newChatButton: HTMLElement;
  private readonly settingsButton: HTMLElement;

  constructor(private readonly handlers: SidebarHandlers) {
    const newChat = el(
      "button",
      { type: "button", class: "new-chat", "data-testid": "new-chat", title: "New Chat" },
      icon("compose"),
      "New Chat",
    );
    newChat.addEventListener("click", () => handlers.newChat());

    this.searchInput = el("input", {
      type: "search",
      class: "search-input",
      placeholder: "Search",
      "aria-label": "Search chats",
      "data-testid": "search",
      autocomplete: "off",
      spellcheck: "false",
    });
    this.searchInput.addEventListener("input", () => this.scheduleSearch());
    this.searchInput.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.searchInput.value) {
        event.preventDefault();
        event.stopPropagation();
        this.clearSearch();
      } else if (event.key === "ArrowDown") {
        event.preventDefault();
        this.list.querySelector<HTMLElement>(".item-button")?.focus();
      }
    });
    this.list.addEventListener("keydown", (event) => this.onListKey(event));

    const settings = el(
      "button",
      { type: "button", class: "settings-button", "data-testid": "settings", title: "Settings" },
      icon("settings"),
      "Settings",
    );
    settings.addEventListener("click", () => handlers.openSettings());
    const importButton = el(
      "button",
      { type: "button", class: "link-button", "data-testid": "import-chats", title: "Import chats from a JSON export" },
      "Import…",
    );
    importButton.addEventListener("click", () => handlers.importChats());
    const exportAll = el(
      "button",
      { type: "button", class: "link-button", "data-testid": "export-all", title: "Export every chat as JSON" },
      "Export all…",
    );
    exportAll.addEventListener("click", () => handlers.exportAll());
    this.newChatButton = newChat;
    this.settingsButton = settings;

    this.element = el(
      "aside",
      { class: "sidebar", "aria-label": "Sidebar" },
      el("div", { class: "sidebar-top" }, el("p", { class: "brand" }, "Gemma Desk"), newChat),
      el("div", { class: "search" }, icon("search"), this.searchInput),
      this.list,
      el("div", { class: "sidebar-transfer" }, importButton, exportAll),
      el("div", { class: "sidebar-bottom" }, settings, this.version),
    );
    this.render();
  }

  /** Tooltips and the search field name the shortcuts as this platform writes them. */
  setPlatform(platform: string | undefined): void {
    this.newChatButton.title = `New Chat (${shortcut("N", platform)})`;
    this.settingsButton.title = `Settings (${shortcut(",", platform)})`;
    this.searchInput.placeholder = `Search (${shortcut("F", platform)})`;
  }

  setVersion(version: string): void {
    this.version.textContent = `Version ${version}`;
  }

  setConversations(conversations: ConversationSummary[]): void {
    this.conversations = conversations;
    // Never re-render under a rename in progress: it would take the field (and its text) away.
    if (this.hits === null && this.renamingId === null) this.render();
  }

  setActive(id: string | null): void {
    this.activeId = id;
    for (const item of this.list.querySelectorAll<HTMLElement>("[data-conversation-id]")) {
      const active = item.dataset.conversationId === id && item.dataset.testid === "conversation-item";
      item.classList.toggle("active", active);
      const button = item.querySelector(".item-button");
      if (active) button?.setAttribute("aria-current", "page");
      else button?.removeAttribute("aria-current");
    }
  }

  setGenerating(ids: ReadonlySet<string>): void {
    this.generating = ids;
    for (const item of this.list.querySelectorAll<HTMLElement>("[data-conversation-id]")) {
      const on = ids.has(item.dataset.conversationId ?? "");
      item.classList.toggle("generating", on);
      item.querySelector(".generating-marker")?.toggleAttribute("hidden", !on);
    }
  }

  focusSearch(): void {
    this.searchInput.focus();
    this.searchInput.select();
  }

  /** Re-runs the current search (after a conversation changed). */
  refreshSearch(): void {
    if (this.query) void this.runSearch(this.query);
  }

  private clearSearch(): void {
    this.searchInput.value = "";
    this.query = "";
    this.hits = null;
    window.clearTimeout(this.searchTimer);
    this.render();
  }

  private scheduleSearch(): void {
    window.clearTimeout(this.searchTimer);
    const query = this.searchInput.value.trim();
    if (!query) {
      this.clearSearch();
      return;
    }
    this.searchTimer = window.setTimeout(() => void this.runSearch(query), SEARCH_DELAY_MS);
  }

  private async runSearch(query: string): Promise<void> {
    const serial = ++this.searchSerial;
    try {
      const hits = await this.handlers.search(query);
      if (serial !== this.searchSerial || this.searchInput.value.trim() !== query) return;
      this.query = query;
      this.hits = hits;
    } catch {
      if (serial !== this.searchSerial) return;
      this.query = query;
      this.hits = [];
    }
    this.render();
  }

  /** Re-renders the list, keeping keyboard focus on the same chat and control. */
  private render(): void {
    const focused =
      document.activeElement instanceof HTMLElement && this.list.contains(document.activeElement)
        ? document.activeElement
        : null;
    const focusedId = focused?.closest<HTMLElement>("[data-conversation-id]")?.dataset.conversationId;
    const focusedControl = focused?.dataset.testid ?? "item";
    this.renderList();
    if (!focusedId || this.renamingId !== null) return;
    const item = [...this.list.querySelectorAll<HTMLElement>("[data-conversation-id]")].find(
      (element) => element.dataset.conversationId === focusedId,
    );
    const control = item?.querySelector<HTMLElement>(
      focusedControl === "item" ? ".item-button" : `[data-testid="${focusedControl}"]`,
    );
    (control ?? item?.querySelector<HTMLElement>(".item-button"))?.focus();
  }

  private renderList(): void {
    if (this.hits !== null) {
      this.renderHits(this.hits);
      return;
    }
    if (this.conversations.length === 0) {
      this.list.replaceChildren(el("p", { class: "sidebar-empty" }, "No chats yet"));
      return;
    }
    const groups = new Map<string, ConversationSummary[]>();
    const pinned = this.conversations.filter((c) => c.pinned);
    if (pinned.length) groups.set("Pinned", pinned);
    for (const conversation of this.conversations) {
      if (conversation.pinned) continue;
      const group = dateGroup(conversation.updatedAt);
      groups.set(group, [...(groups.get(group) ?? []), conversation]);
    }
    const sections: HTMLElement[] = [];
    let index = 0;
    for (const [name, items] of groups) {
      index += 1;
      const headingId = `chat-group-${index}`;
      sections.push(
        el(
          "section",
          { class: "chat-group", "aria-labelledby": headingId },
          el("h2", { class: "sidebar-heading", id: headingId }, name),
          el("ul", { role: "list" }, ...items.map((conversation) => this.item(conversation))),
        ),
      );
    }
    this.list.replaceChildren(...sections);
  }

  private item(conversation: ConversationSummary): HTMLElement {
    const active = conversation.id === this.activeId;
    const generating = this.generating.has(conversation.id);
    const item = el("li", {
      class: ["conversation-item", active && "active", generating && "generating"].filter(Boolean).join(" "),
      "data-testid": "conversation-item",
      "data-conversation-id": conversation.id,
    });
    if (this.renamingId === conversation.id) {
      item.append(this.renameField(conversation));
      return item;
    }
    const open = el(
      "button",
      {
        type: "button",
        class: "item-button",
        "aria-current": active ? "page" : undefined,
        title: conversation.preview ?? conversation.title,
      },
      el("span", { class: "item-title" }, conversation.title || "New Chat"),
      el("span", { class: "generating-marker", role: "img", "aria-label": "Generating", hidden: !generating }),
    );
    open.addEventListener("click", () => this.handlers.open(conversation.id));
    open.addEventListener("dblclick", () => this.startRename(conversation));
    const pinned = conversation.pinned;
    const pin = iconButton(`${pinned ? "Unpin" : "Pin"} “${conversation.title}”`, icon("pin"), {
      class: ["icon-button item-action", pinned && "pinned"].filter(Boolean).join(" "),
      "data-testid": "pin",
    });
    pin.addEventListener("click", () => this.handlers.pin(conversation, !pinned));
    const rename = iconButton(`Rename “${conversation.title}”`, icon("edit"), {
      class: "icon-button item-action",
      "data-testid": "rename",
    });
    rename.addEventListener("click", () => this.startRename(conversation));
    const remove = iconButton(`Delete “${conversation.title}”`, icon("trash"), {
      class: "icon-button item-action",
      "data-testid": "delete",
    });
    remove.addEventListener("click", () => this.handlers.delete(conversation));
    item.append(open, el("span", { class: "item-actions" }, pin, rename, remove));
    return item;
  }

  private startRename(conversation: ConversationSummary): void {
    this.renamingId = conversation.id;
    this.render();
    const field = this.list.querySelector<HTMLInputElement>(".rename-field");
    field?.focus();
    field?.select();
  }

  private renameField(conversation: ConversationSummary): HTMLInputElement {
    const field = el("input", {
      type: "text",
      class: "rename-field",
      "aria-label": "Chat name",
      "data-testid": "rename-field",
      maxlength: "200",
    });
    field.value = conversation.title;
    let done = false;
    const finish = async (save: boolean) => {
      if (done) return;
      done = true;
      const title = field.value.trim();
      this.renamingId = null;
      if (save && title && title !== conversation.title) {
        this.conversations = this.conversations.map((c) => (c.id === conversation.id ? { ...c, title } : c));
        this.render();
        try {
          await this.handlers.rename(conversation, title);
        } catch {
          this.conversations = this.conversations.map((c) =>
            c.id === conversation.id ? { ...c, title: conversation.title } : c,
          );
          this.render();
        }
      } else {
        this.render();
      }
      const item = [...this.list.querySelectorAll<HTMLElement>("[data-conversation-id]")].find(
        (element) => element.dataset.conversationId === conversation.id,
      );
      item?.querySelector<HTMLElement>(".item-button")?.focus();
    };
    field.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        void finish(true);
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        void finish(false);
      }
    });
    field.addEventListener("blur", () => void finish(true));
    return field;
  }

  private renderHits(hits: SearchHit[]): void {
    if (hits.length === 0) {
      this.list.replaceChildren(el("p", { class: "sidebar-empty", role: "status" }, `No results for “${this.query}”`));
      return;
    }
    const items = hits.map((hit) => {
      const snippet = el("span", { class: "hit-snippet" });
      for (const part of hit.snippet) snippet.append(part.matched ? el("mark", {}, part.text) : part.text);
      const button = el(
        "button",
        { type: "button", class: "item-button hit-button" },
        el("span", { class: "item-title" }, hit.title || "New Chat"),
        hit.snippet.length > 0 && snippet,
      );
      button.addEventListener("click", () => this.handlers.open(hit.conversationId, hit.messageId ?? undefined));
      return el(
        "li",
        { class: "search-hit", "data-testid": "search-hit", "data-conversation-id": hit.conversationId },
        button,
      );
    });
    this.list.replaceChildren(
      el(
        "section",
        { class: "chat-group", "aria-labelledby": "search-results-heading" },
        el(
          "h2",
          { class: "sidebar-heading", id: "search-results-heading", role: "status" },
          hits.length === 1 ? "1 result" : `${hits.length} results`,
        ),
        el("ul", { role: "list" }, ...items),
      ),
    );
  }

  /** Up and down arrows move between chats, like a native source list. */
  private onListKey(event: KeyboardEvent): void {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    const buttons = [...this.list.querySelectorAll<HTMLElement>(".item-button")];
    const index = buttons.indexOf(document.activeElement as HTMLElement);
    if (index < 0) return;
    event.preventDefault();
    const next = event.key === "ArrowDown" ? index + 1 : index - 1;
    if (next < 0) this.searchInput.focus();
    else buttons[Math.min(next, buttons.length - 1)]?.focus();
  }
}
