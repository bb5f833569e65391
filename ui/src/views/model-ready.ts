import type { InstalledModel } from "../api";
import { el } from "../dom";

/** Stands in for the chat until it lands: names the model that was found. */
export function modelReadyView(model: InstalledModel): HTMLElement {
  return el(
    "section",
    { class: "model-ready", "aria-labelledby": "model-ready-title" },
    el("h1", { id: "model-ready-title" }, `${model.name} is ready`),
    el("code", { class: "path" }, model.dir),
  );
}
