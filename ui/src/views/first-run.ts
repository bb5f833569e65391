import { el } from "../dom";

/** Shown while no model is installed: where models go, and what is coming. */
export function firstRunView(modelsDir: string): HTMLElement {
  return el(
    "section",
    { class: "first-run", "aria-labelledby": "first-run-title" },
    el("div", { class: "mark", "aria-hidden": "true" }, "G"),
    el("h1", { id: "first-run-title" }, "No model installed yet"),
    el(
      "p",
      { class: "lede" },
      "Gemma Desk runs Gemma 4 entirely on this Mac, so it needs the model files before you can chat.",
    ),
    el("h2", { class: "label", id: "models-dir-label" }, "Models folder"),
    el("code", { class: "path", id: "models-dir", "aria-labelledby": "models-dir-label" }, modelsDir),
    el(
      "p",
      {},
      "Each model lives in its own folder inside this one, with its config.json, tokenizer and .safetensors weights.",
    ),
    el(
      "div",
      { class: "actions" },
      el("button", { type: "button", class: "primary", disabled: true, "aria-describedby": "actions-note" }, "Download Gemma 4 E4B"),
      el("button", { type: "button", disabled: true, "aria-describedby": "actions-note" }, "Choose Folder…"),
    ),
    el(
      "p",
      { class: "note", id: "actions-note" },
      "Downloading the model and choosing another folder are coming in the next version.",
    ),
  );
}
