/** Shown until a model is ready: the first-run choice, download progress, loading, or what failed. */
import type { DownloadProgress, ModelState } from "../api";
import { el } from "../dom";
import { formatBytes, formatEta, formatSpeed, thisMachine } from "../format";

export interface SetupHandlers {
  download(): void;
  cancelDownload(): void;
  chooseFolder(): void;
}

export interface SetupInfo {
  modelsDir: string;
  platform: string;
  /** An action is waiting for the backend (the folder dialog is open, a download is starting). */
  busy: boolean;
  /** An error from the last action, in words. */
  error: string | null;
}

/** Download size shown before starting; the real total comes with the first progress event. */
export const DOWNLOAD_LABEL = "Download Gemma 4 E4B (4-bit, ~5 GB)";

export function setupView(
  state: Exclude<ModelState, { state: "ready" }>,
  info: SetupInfo,
  handlers: SetupHandlers,
): HTMLElement {
  switch (state.state) {
    case "loading":
      return loadingView(state.name, state.stage);
    case "downloading":
      return downloadingView(state.progress, handlers);
    case "none":
    case "failed":
      return firstRunView(state.state === "failed" ? state : null, info, handlers);
  }
}

/** The first-run screen's heading after a failure: a download that stopped is not a model that failed to load. */
export function failureHeading(failure: { dir: string | null }): string {
  return failure.dir === null ? "The download did not finish" : "The model could not be loaded";
}

function firstRunView(
  failure: { dir: string | null; message: string } | null,
  info: SetupInfo,
  handlers: SetupHandlers,
): HTMLElement {
  const download = el(
    "button",
    { type: "button", class: "primary large", "data-testid": "download", disabled: info.busy },
    DOWNLOAD_LABEL,
  );
  download.addEventListener("click", () => handlers.download());
  const choose = el(
    "button",
    { type: "button", class: "large", "data-testid": "choose-folder", disabled: info.busy },
    "Choose Folder…",
  );
  choose.addEventListener("click", () => handlers.chooseFolder());
  const problem = info.error ?? failure?.message ?? null;
  return el(
    "section",
    { class: "setup first-run", "data-testid": "first-run", "aria-labelledby": "first-run-title" },
    el("div", { class: "mark", "aria-hidden": "true" }, "G"),
    el("h1", { id: "first-run-title" }, failure ? failureHeading(failure) : "Welcome to Gemma Desk"),
    el(
      "p",
      { class: "lede" },
      `Gemma Desk runs Google’s Gemma 4 entirely on ${thisMachine(info.platform)}: nothing you write leaves it. `,
      "To start, download the model once, or choose a folder that already holds it.",
    ),
    problem && el("div", { class: "setup-error", role: "alert", "data-testid": "setup-error" }, problem),
    el("div", { class: "actions" }, download, choose),
    el(
      "p",
      { class: "note" },
      "The download comes from Hugging Face (mlx-community/gemma-4-e4b-it-4bit) and is checked file by file. " +
        "A chosen folder must hold an MLX Gemma 4 E4B checkpoint: config.json, the tokenizer and .safetensors weights.",
    ),
    el("h2", { class: "label", id: "models-dir-label" }, "Models folder"),
    el("code", { class: "path", id: "models-dir", "aria-labelledby": "models-dir-label" }, info.modelsDir),
  );
}

function downloadingView(progress: DownloadProgress, handlers: SetupHandlers): HTMLElement {
  const cancel = el("button", { type: "button", "data-testid": "cancel-download" }, "Cancel");
  cancel.addEventListener("click", () => handlers.cancelDownload());
  const fraction = progress.bytesTotal > 0 ? progress.bytesDone / progress.bytesTotal : 0;
  const percent = Math.floor(fraction * 100);
  const bar = el("progress", { class: "download-bar", max: "1", "aria-labelledby": "download-title" });
  bar.value = fraction;
  bar.setAttribute("aria-valuetext", `${percent}%`);
  return el(
    "section",
    {
      class: "setup downloading",
      "data-testid": "first-run",
      "aria-labelledby": "download-title",
      "aria-busy": "true",
    },
    el("div", { class: "mark", "aria-hidden": "true" }, "G"),
    el("h1", { id: "download-title" }, "Downloading Gemma 4 E4B"),
    bar,
    el(
      "p",
      { class: "download-numbers", "data-testid": "download-progress" },
      el("span", {}, `${formatBytes(progress.bytesDone)} of ${formatBytes(progress.bytesTotal)} (${percent}%)`),
      el("span", {}, formatSpeed(progress.bytesPerSecond)),
      el("span", {}, formatEta(progress.etaSeconds)),
    ),
    el(
      "p",
      { class: "note" },
      `File ${Math.min(progress.filesDone + 1, progress.filesTotal)} of ${progress.filesTotal}: `,
      el("code", {}, progress.file),
    ),
    el("p", { class: "note" }, "You can cancel and resume later: finished files are kept."),
    el("div", { class: "actions" }, cancel),
  );
}

function loadingView(name: string, stage: string): HTMLElement {
  return el(
    "section",
    {
      class: "setup loading-model",
      "data-testid": "model-loading",
      "aria-labelledby": "loading-title",
      "aria-busy": "true",
    },
    el("div", { class: "spinner", "aria-hidden": "true" }),
    el("h1", { id: "loading-title" }, `Loading ${name}…`),
    el("p", { class: "lede", role: "status" }, stage),
  );
}
