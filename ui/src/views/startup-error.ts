import { el } from "../dom";

/** Shown when the backend could not report its status. */
export function startupErrorView(error: unknown): HTMLElement {
  const message = error instanceof Error ? error.message : String(error);
  return el(
    "section",
    { class: "startup-error", role: "alert", "aria-labelledby": "startup-error-title" },
    el("h1", { id: "startup-error-title" }, "Gemma Desk could not start"),
    el("p", { class: "message" }, message),
  );
}
