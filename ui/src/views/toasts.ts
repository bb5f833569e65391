/** Errors that belong to no particular place (a failed rename, a rejected drop) appear here. */
import { el, iconButton } from "../dom";
import { icon } from "../icons";

const LIFETIME_MS = 8000;

export class Toasts {
  readonly element = el("div", { class: "toasts", "aria-live": "assertive", "data-testid": "toasts" });

  show(message: string): void {
    const close = iconButton("Dismiss", icon("close"));
    const toast = el("div", { class: "toast", role: "alert" }, el("p", {}, message), close);
    const remove = () => toast.remove();
    close.addEventListener("click", remove);
    window.setTimeout(remove, LIFETIME_MS);
    this.element.append(toast);
  }
}
