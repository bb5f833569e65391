/**
 * Settings → Model: the model in use (what it is, where it is) and the ways to change it —
 * another local folder, another download, or none (back to the model picker).
 */
import {
  errorMessage,
  type DownloadOption,
  type DownloadProgress,
  type MemoryUsage,
  type ModelCandidate,
  type ModelState,
  type RecentModel,
  type SideDownload,
} from "../api";
import { el } from "../dom";
import { formatBytes, formatEta, formatInteger } from "../format";
import type { Value } from "../store";

export interface ModelPanelHandlers {
  /** Opens the folder dialog and loads what was picked; rejects in words. */
  chooseFolder(): Promise<void>;
  /** Starts downloading one of the offered checkpoints. */
  download(repo: string): Promise<void>;
  cancelDownload(): Promise<void>;
  /** Unloads the model and forgets it. */
  forget(): Promise<void>;
  /** Loads a folder of the recent list in place of the model in use; rejects in words. */
  openRecent(dir: string): Promise<void>;
}

/** "10.3 million", "7.9 billion": parameter counts as people say them. */
export function formatParameters(count: number): string {
  if (count >= 1e9) return `${(count / 1e9).toFixed(1)} billion`;
  if (count >= 1e6) return `${(count / 1e6).toFixed(1)} million`;
  return formatInteger(count);
}

/** "4-bit (affine)", "bfloat16, not quantized". */
export function formatQuantization(checkpoint: ModelCandidate): string {
  if (checkpoint.quantizationBits !== null)
    return `${checkpoint.quantizationBits}-bit${checkpoint.quantizationMode ? ` (${checkpoint.quantizationMode})` : ""}`;
  return checkpoint.dtype ? `${checkpoint.dtype}, not quantized` : "not quantized";
}

/** The rows describing a loaded checkpoint, as label and value. */
export function describeCheckpoint(checkpoint: ModelCandidate, contextWindow: number): [string, string][] {
  return [
    ["Name", checkpoint.name],
    ["Folder", checkpoint.dir],
    ["Size on disk", formatBytes(checkpoint.sizeBytes)],
    ["Weights", formatQuantization(checkpoint)],
    ["Parameters", checkpoint.parameters === null ? "unknown" : formatParameters(checkpoint.parameters)],
    ["Context limit", `${formatInteger(contextWindow)} tokens`],
    ["Images", checkpoint.vision ? "yes" : "no (this checkpoint has no vision tower)"],
    ["Audio", checkpoint.audio ? "yes (attach or record a clip)" : "no (this checkpoint has no audio tower)"],
  ];
}

/** "2.9 GB": bytes in gigabytes, one decimal. */
export function formatGigabytes(bytes: number): string {
  return `${(bytes / 1e9).toFixed(1)} GB`;
}

/** The memory the model uses now: MLX's arrays (weights, caches), and the app's in all. */
export function describeMemory(usage: MemoryUsage | null): string {
  if (usage === null) return "not known";
  return `${formatGigabytes(usage.mlxActiveBytes)} held by the model (the app in all: ${formatGigabytes(usage.residentBytes)})`;
}

const MEMORY_FACT = "Memory in use";

export class ModelPanel {
  readonly element = el("section", {
    class: "model-panel",
    "data-testid": "model-panel",
    "aria-labelledby": "model-panel-title",
  });
  private error: string | null = null;
  private busy = false;
  private memory: MemoryUsage | null = null;

  constructor(
    private readonly model: Value<ModelState>,
    private readonly downloads: () => DownloadOption[],
    /** Whether an answer is being written now (switching stops it). */
    private readonly answering: () => boolean,
    private readonly handlers: ModelPanelHandlers,
    /** Model folders loaded lately, newest first. */
    private readonly recent: Value<RecentModel[]>,
  ) {
    model.subscribe(() => this.render());
    recent.subscribe(() => this.render());
    this.render();
  }

  /** Shows the memory in use now (in place: a choice being made in the panel stays as it is). */
  showMemory(usage: MemoryUsage | null): void {
    this.memory = usage;
    const fact = this.element.querySelector(`[data-fact="${MEMORY_FACT}"]`);
    if (fact) fact.textContent = describeMemory(usage);
  }

  /** Draws the panel again (when the dialog opens: the answer may have started meanwhile). */
  refresh(): void {
    this.error = null;
    this.render();
  }

  private render(): void {
    const state = this.model.get();
    const focused = document.activeElement instanceof HTMLElement ? document.activeElement.dataset.testid : undefined;
    this.element.replaceChildren(
      el("h2", { id: "model-panel-title" }, "Model"),
      ...this.body(state),
      this.error === null
        ? ""
        : el("p", { class: "form-error", role: "alert", "data-testid": "model-error" }, this.error),
    );
    if (focused) this.element.querySelector<HTMLElement>(`[data-testid="${focused}"]`)?.focus();
  }

  private body(state: ModelState): (HTMLElement | string)[] {
    switch (state.state) {
      case "ready":
        return [
          el(
            "dl",
            { class: "model-facts", "data-testid": "model-facts" },
            ...[
              ...describeCheckpoint(state.checkpoint, state.contextWindow),
              [MEMORY_FACT, describeMemory(this.memory)] as [string, string],
            ].flatMap(([label, value]) => [el("dt", {}, label), el("dd", { "data-fact": label }, value)]),
          ),
          this.answering()
            ? el("p", { class: "field-help" }, "Switching stops the answer being written; what it wrote is kept.")
            : "",
          ...(state.download?.failed
            ? [
                el(
                  "p",
                  { class: "form-error", role: "alert", "data-testid": "model-download-failed" },
                  state.download.failed,
                ),
              ]
            : []),
          state.download && !state.download.failed ? this.sideDownload(state.download) : this.actions(true),
          state.download && !state.download.failed ? "" : this.recentRow(state.dir),
        ];
      case "loading":
        return [
          el("p", { role: "status", "data-testid": "model-panel-status" }, `Loading ${state.name}: ${state.stage}`),
        ];
      case "downloading":
        return [
          el("p", { role: "status", "data-testid": "model-panel-status" }, downloadLine(state.progress)),
          this.cancel(),
        ];
      case "failed":
        return [
          el("p", { "data-testid": "model-panel-status" }, state.message),
          this.actions(false),
          this.recentRow(null),
        ];
      case "none":
        return [
          el("p", { "data-testid": "model-panel-status" }, "No model is loaded."),
          this.actions(false),
          this.recentRow(null),
        ];
    }
  }

  /** "Recent models": the folders loaded lately other than `inUse`, one button each. */
  private recentRow(inUse: string | null): HTMLElement | string {
    const others = this.recent.get().filter((recent) => recent.dir !== inUse);
    if (others.length === 0) return "";
    return el(
      "div",
      { class: "recent-models", "data-testid": "model-recent" },
      el("h3", { class: "label", id: "model-recent-title" }, "Recent models"),
      el(
        "ul",
        { "aria-labelledby": "model-recent-title" },
        ...others.map((recent) => {
          const open = el(
            "button",
            { type: "button", class: "recent-model", disabled: this.busy, "data-dir": recent.dir },
            el("span", { class: "recent-name" }, recent.name),
            el("span", { class: "recent-dir" }, recent.dir),
          );
          open.addEventListener("click", () => void this.run(() => this.handlers.openRecent(recent.dir)));
          return el("li", {}, open);
        }),
      ),
    );
  }

  /** Another checkpoint downloading while this one answers: how far, and Cancel. */
  private sideDownload(download: SideDownload): HTMLElement {
    const name = this.downloads().find((option) => option.repo === download.repo)?.label ?? download.repo;
    return el(
      "div",
      {},
      el(
        "p",
        { role: "status", "data-testid": "model-panel-status" },
        download.progress ? `${name}. ${downloadLine(download.progress)}` : `${name}: starting the download…`,
      ),
      el(
        "p",
        { class: "field-help" },
        "The model in use keeps answering; the new one takes its place once it is here.",
      ),
      this.cancel(),
    );
  }

  private cancel(): HTMLElement {
    const cancel = el("button", { type: "button", "data-testid": "model-cancel-download" }, "Cancel Download");
    cancel.addEventListener("click", () => void this.run(() => this.handlers.cancelDownload()));
    return el("div", { class: "model-actions" }, cancel);
  }

  private actions(loaded: boolean): HTMLElement {
    const choose = el(
      "button",
      { type: "button", "data-testid": "model-choose-folder", disabled: this.busy },
      "Choose Folder…",
    );
    choose.addEventListener("click", () => void this.run(() => this.handlers.chooseFolder()));
    const options = this.downloads();
    const select = el(
      "select",
      { "aria-label": "Checkpoint to download", "data-testid": "model-download-choice", disabled: this.busy },
      ...options.map((option) => el("option", { value: option.repo }, option.label)),
    );
    const download = el(
      "button",
      { type: "button", "data-testid": "model-download", disabled: this.busy || options.length === 0 },
      "Download",
    );
    download.addEventListener("click", () => void this.run(() => this.handlers.download(select.value)));
    const row = el("div", { class: "model-actions" }, choose, select, download);
    if (loaded) {
      const forget = el("button", { type: "button", "data-testid": "model-forget", disabled: this.busy }, "Forget");
      forget.addEventListener("click", () => void this.run(() => this.handlers.forget()));
      row.append(forget);
    }
    return row;
  }

  private async run(action: () => Promise<void>): Promise<void> {
    this.busy = true;
    this.error = null;
    this.render();
    try {
      await action();
    } catch (error) {
      this.error = errorMessage(error);
    } finally {
      this.busy = false;
      this.render();
    }
  }
}

/** "Downloading: 2.0 GB of 8.0 GB (25%), 2 min left". */
function downloadLine(progress: DownloadProgress): string {
  const percent = progress.bytesTotal > 0 ? Math.floor((progress.bytesDone / progress.bytesTotal) * 100) : 0;
  return `Downloading: ${formatBytes(progress.bytesDone)} of ${formatBytes(progress.bytesTotal)} (${percent}%), ${formatEta(progress.etaSeconds)}`;
}
