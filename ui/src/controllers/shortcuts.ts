/** Window-wide behaviour: keyboard shortcuts, links that never navigate the webview, no stray menus or drops. */
import * as api from "../api";
import { errorMessage } from "../api";
import { externalUrl } from "../markdown/sanitize";
import { installTooltips } from "../tooltip";
import { confirmDialog } from "../views/dialogs";
import type { Shared } from "./shared";

export interface ShortcutActions {
  newChat(): void;
  openSettings(): void;
  focusSearch(): void;
  /** Whether the open chat has an answer being written (Esc stops it). */
  answering(): boolean;
  stop(): void;
  /** Saves what must be saved and quits the app. */
  quit(): void;
}

export class ShortcutsController {
  private readonly cleanups: (() => void)[] = [];

  constructor(
    private readonly shared: Shared,
    private readonly actions: ShortcutActions,
  ) {}

  install(): void {
    const onKey = (event: KeyboardEvent) => this.onKeyDown(event);
    const onClick = (event: MouseEvent) => this.onLinkClick(event);
    const onContextMenu = (event: MouseEvent) => {
      const target = event.target instanceof Element ? event.target : null;
      const editable = target?.closest("input, textarea, [contenteditable]");
      const selection = window.getSelection();
      if (!editable && (!selection || selection.isCollapsed)) event.preventDefault();
    };
    // A file dropped on the page must never navigate the webview away from the app.
    const onDragOver = (event: DragEvent) => event.preventDefault();
    document.addEventListener("keydown", onKey);
    document.addEventListener("click", onClick, true);
    document.addEventListener("auxclick", onClick, true);
    document.addEventListener("contextmenu", onContextMenu);
    window.addEventListener("dragover", onDragOver);
    window.addEventListener("drop", onDragOver);
    this.cleanups.push(installTooltips(document));
    this.cleanups.push(() => {
      document.removeEventListener("keydown", onKey);
      document.removeEventListener("click", onClick, true);
      document.removeEventListener("auxclick", onClick, true);
      document.removeEventListener("contextmenu", onContextMenu);
      window.removeEventListener("dragover", onDragOver);
      window.removeEventListener("drop", onDragOver);
    });
  }

  destroy(): void {
    for (const cleanup of this.cleanups.splice(0)) cleanup();
  }

  private platform(): string | undefined {
    return this.shared.state.status.get()?.platform;
  }

  private onKeyDown(event: KeyboardEvent): void {
    const command = event.metaKey || event.ctrlKey;
    const dialogOpen = this.shared.root.querySelector("dialog[open]") !== null;
    if (command && !event.shiftKey && !event.altKey) {
      const key = event.key.toLowerCase();
      if (key === "n" && !dialogOpen) {
        event.preventDefault();
        this.actions.newChat();
      } else if (key === ",") {
        event.preventDefault();
        this.actions.openSettings();
      } else if (key === "f" && !dialogOpen) {
        event.preventDefault();
        this.actions.focusSearch();
      } else if (key === "q" && event.ctrlKey && !event.metaKey && this.platform() !== "macos") {
        // macOS quits with ⌘Q from its app menu; elsewhere the window has no menu to do it.
        event.preventDefault();
        this.actions.quit();
      }
      return;
    }
    if (event.key === "Escape" && !dialogOpen && !event.defaultPrevented && this.actions.answering()) {
      event.preventDefault();
      this.actions.stop();
    }
  }

  /** Links never navigate the webview: ask, then open http(s) in the system browser. */
  private onLinkClick(event: MouseEvent): void {
    const target = event.target instanceof Element ? event.target : null;
    const link = target?.closest("a[href]");
    if (!link) return;
    event.preventDefault();
    if (event.type === "auxclick" && event.button !== 1) return;
    const url = externalUrl(link.getAttribute("href"));
    if (!url) return;
    void this.confirmOpen(url);
  }

  private async confirmOpen(url: string): Promise<void> {
    const confirmed = await confirmDialog(this.shared.root, {
      title: "Open this link in your browser?",
      message: "The link comes from the model’s answer. Check that it goes where you expect.",
      detail: url,
      confirm: "Open Link",
      testId: "link-dialog",
    });
    if (!confirmed) return;
    try {
      await api.openLink(url);
    } catch (error) {
      this.shared.toasts.show(`Could not open the link: ${errorMessage(error)}`);
    }
  }
}
