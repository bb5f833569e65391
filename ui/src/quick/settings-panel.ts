/**
 * Settings → Quick ask: the global shortcut that opens the quick-ask window. A new shortcut
 * applies at once and the panel says whether the system gave it to the app, in words.
 */
import type { QuickAskShortcut } from "../api";
import { errorMessage } from "../api";
import { el, uniqueId } from "../dom";

export interface QuickAskPanelHandlers {
  load(): Promise<QuickAskShortcut>;
  set(shortcut: string): Promise<QuickAskShortcut>;
  /** Opens the quick-ask window now (to try it). */
  open(): Promise<void>;
}

export class QuickAskPanel {
  readonly element: HTMLElement;
  private readonly field: HTMLInputElement;
  private readonly status = el("p", { class: "field-help", role: "status", "data-testid": "quick-ask-status" });
  private readonly useButton = el("button", { type: "button", "data-testid": "quick-ask-use" }, "Use");

  constructor(private readonly handlers: QuickAskPanelHandlers) {
    const id = uniqueId("quick-ask-shortcut");
    this.field = el("input", {
      id,
      type: "text",
      spellcheck: "false",
      autocomplete: "off",
      "data-testid": "quick-ask-shortcut",
    });
    const open = el("button", { type: "button", "data-testid": "quick-ask-open" }, "Open quick ask");
    this.useButton.addEventListener("click", () => void this.apply());
    this.field.addEventListener("keydown", (event) => {
      if (event.key !== "Enter") return;
      event.preventDefault();
      void this.apply();
    });
    open.addEventListener("click", () => {
      this.handlers.open().catch((error: unknown) => this.say(errorMessage(error), true));
    });
    this.element = el(
      "section",
      { class: "settings-quick-ask", "aria-labelledby": `${id}-title`, "data-testid": "quick-ask-panel" },
      el("h2", { id: `${id}-title` }, "Quick ask"),
      el(
        "p",
        { class: "field-help" },
        "A shortcut that opens a small window from any program: ask, and open the answer here as a chat.",
      ),
      el(
        "div",
        { class: "field" },
        el("label", { for: id }, "Shortcut"),
        el("div", { class: "field-row" }, this.field, this.useButton, open),
      ),
      this.status,
    );
  }

  /** Reads where the shortcut stands (the dialog opened). */
  async refresh(): Promise<void> {
    try {
      this.show(await this.handlers.load());
    } catch (error) {
      this.say(errorMessage(error), true);
    }
  }

  private async apply(): Promise<void> {
    this.useButton.disabled = true;
    try {
      this.show(await this.handlers.set(this.field.value));
    } catch (error) {
      this.say(errorMessage(error), true);
    } finally {
      this.useButton.disabled = false;
    }
  }

  show(state: QuickAskShortcut): void {
    // A refused shortcut stays in the field, to be corrected.
    this.field.value = state.shortcut;
    if (state.error) this.say(state.error, !state.registered);
    else this.say(`${state.shortcut} opens quick ask from any program.`, false);
  }

  private say(text: string, failed: boolean): void {
    this.status.textContent = text;
    this.status.classList.toggle("form-error", failed);
  }
}
