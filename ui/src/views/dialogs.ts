/** A small modal question: returns true when the user confirms. */
import { el } from "../dom";

export interface ConfirmOptions {
  title: string;
  message: string;
  /** Shown selectable in a monospace well (a URL, a path). */
  detail?: string;
  confirm: string;
  destructive?: boolean;
  testId?: string;
}

export function confirmDialog(host: HTMLElement, options: ConfirmOptions): Promise<boolean> {
  const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
  const cancel = el("button", { type: "button", "data-testid": "confirm-cancel" }, "Cancel");
  const ok = el(
    "button",
    { type: "button", class: options.destructive ? "destructive" : "primary", "data-testid": "confirm-ok" },
    options.confirm,
  );
  const dialog = el(
    "dialog",
    {
      class: "confirm-dialog",
      role: "alertdialog",
      "aria-labelledby": "confirm-title",
      "aria-describedby": "confirm-message",
      "data-testid": options.testId ?? "confirm-dialog",
    },
    el("h1", { id: "confirm-title" }, options.title),
    el("p", { id: "confirm-message" }, options.message),
    options.detail !== undefined && el("code", { class: "path confirm-detail" }, options.detail),
    el("div", { class: "dialog-actions" }, cancel, ok),
  );
  host.append(dialog);
  return new Promise((resolve) => {
    let answer = false;
    const finish = (value: boolean) => {
      answer = value;
      dialog.close();
    };
    dialog.addEventListener("close", () => {
      dialog.remove();
      opener?.focus();
      resolve(answer);
    });
    cancel.addEventListener("click", () => finish(false));
    ok.addEventListener("click", () => finish(true));
    dialog.showModal();
    // Destructive actions default to Cancel, others to the action.
    (options.destructive ? cancel : ok).focus();
  });
}
