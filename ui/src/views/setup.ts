/** Shown until a model is ready: the first-run choice, download progress, loading, or what failed. */
import type { DownloadProgress, ModelState, RecentModel } from "../api";
import { el } from "../dom";
import { formatBytes, formatEta, formatSpeed, thisMachine } from "../format";

export interface SetupHandlers {
  download(): void;
  cancelDownload(): void;
  chooseFolder(): void;
  /** Loads a folder of the recent list again. */
  openRecent(dir: string): void;
}

export interface SetupInfo {
  modelsDir: string;
  platform: string;
  /** An action is waiting for the backend (the folder dialog is open, a download is starting). */
  busy: boolean;
  /** An error from the last action, in words. */
  error: string | null;
  /** Model folders loaded lately and still here, newest first. */
  recent: RecentModel[];
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

/**
 * The first-run screen's heading: what the alert under it is about. An error of the last action
 * (a folder that is not a model) is not the earlier failure, so it does not keep its heading.
 */
export function firstRunHeading(failure: { dir: string | null } | null, actionError: string | null): string {
  if (actionError !== null) return "That did not work";
  return failure ? failureHeading(failure) : "Welcome to Gemma Desk";
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
    el("h1", { id: "first-run-title" }, firstRunHeading(failure, info.error)),
    el(
      "p",
      { class: "lede" },
      `Gemma Desk runs Google’s Gemma 4 entirely on ${thisMachine(info.platform)}: nothing you write leaves it. `,
      "To start, download the model once, or choose a folder that already holds it.",
    ),
    problem && el("div", { class: "setup-error", role: "alert", "data-testid": "setup-error" }, problem),
    el("div", { class: "actions" }, download, choose),
    recentList(info, handlers),
    el(
      "p",
      { class: "note" },
      "The download comes from Hugging Face (mlx-community/gemma-4-e4b-it-4bit) and is checked file by file. " +
        "A chosen folder must hold an MLX Gemma 4 E4B checkpoint: config.json, the tokenizer and .safetensors weights.",
    ),
    el(
      "p",
      { class: "note", "data-testid": "models-dir-note" },
      "Downloads go to ",
      el("span", { class: "path-text", id: "models-dir" }, info.modelsDir),
      "; a model folder put there is found at the next start.",
    ),
  );
}

/** "Recent models": a button per folder loaded lately, so going back needs no browsing. */
function recentList(info: SetupInfo, handlers: SetupHandlers): HTMLElement | string {
  if (info.recent.length === 0) return "";
  return el(
    "section",
    { class: "recent-models", "data-testid": "recent-models", "aria-labelledby": "recent-models-title" },
    el("h2", { class: "label", id: "recent-models-title" }, "Recent models"),
    el(
      "ul",
      {},
      ...info.recent.map((recent) => {
        const open = el(
          "button",
          { type: "button", class: "recent-model", disabled: info.busy, "data-dir": recent.dir },
          el("span", { class: "recent-name" }, recent.name),
          el("span", { class: "recent-dir" }, recent.dir),
        );
        open.addEventListener("click", () => handlers.openRecent(recent.dir));
        return el("li", {}, open);
      }),
    ),
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
