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
  type Settings,
  type SideDownload,
  type TowerIdle,
} from "../api";
import { el } from "../dom";
import { formatBytes, formatEta, formatInteger } from "../format";
import { Value } from "../store";

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
  /** Sets how long the image and audio encoders stay after their last use (`null`: the machine's); rejects in words. */
  setTowerIdle(secs: number | null): Promise<void>;
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
const CONTEXT_FACT = "Context length";

/** "8 GB": a machine's memory as it is sold (binary gigabytes, whole). */
export function formatMachineMemory(bytes: number): string {
  return `${Math.round(bytes / 2 ** 30)} GB`;
}

/**
 * Where the context length comes from, in words: the machine's choice ("8,192 tokens — chosen
 * for this Mac's 8 GB; change it under Answers") or the user's.
 */
export function describeContextLength(settings: Settings): string {
  const tokens = `${formatInteger(settings.contextLength)} tokens`;
  const machine = settings.machineContext;
  const device = machine?.mac ? "Mac" : "computer";
  const memory = machine?.memoryBytes ? ` ${formatMachineMemory(machine.memoryBytes)}` : "";
  if (settings.contextLengthChosen) {
    return machine && machine.tokens !== settings.contextLength
      ? `${tokens} — your choice (this ${device}'s default: ${formatInteger(machine.tokens)})`
      : `${tokens} — your choice`;
  }
  if (!machine) return `${tokens} — the default; change it under Answers`;
  return `${tokens} — chosen for this ${device}'s${memory || " memory"}; change it under Answers`;
}

/**
 * The periods offered for "Release the image and audio encoders after", in seconds (the backend's
 * `TOWER_IDLE_CHOICES` in src-tauri/src/settings.rs, which refuses any other).
 */
export const TOWER_IDLE_CHOICES = [0, 30, 300, 1800];

/** When the encoders go now, and whose choice that is, in words. */
export function describeTowerIdle(idle: TowerIdle): string {
  const when =
    idle.secs === 0
      ? "Released right after the question that used them"
      : `Released ${formatTowerIdle(idle.secs)} after their last use`;
  return `${when} (${idle.chosen ? "your choice" : "the default for this machine's memory"}).`;
}

/** "30 seconds", "5 minutes", "right after the question". */
export function formatTowerIdle(secs: number): string {
  if (secs === 0) return "right after the question";
  if (secs < 60) return `${secs} seconds`;
  const minutes = Math.round(secs / 60);
  return minutes === 1 ? "1 minute" : `${minutes} minutes`;
}

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
    /** The answer settings as they apply (the context length's fact). */
    private readonly settings: Value<Settings | null> = new Value<Settings | null>(null),
  ) {
    model.subscribe(() => this.render());
    recent.subscribe(() => this.render());
    settings.subscribe((value) => {
      const fact = this.element.querySelector(`[data-fact="${CONTEXT_FACT}"]`);
      if (fact && value) fact.textContent = describeContextLength(value);
    });
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
              ...this.contextFact(),
            ].flatMap(([label, value]) => [el("dt", {}, label), el("dd", { "data-fact": label }, value)]),
          ),
          this.towerIdleField(state.towerIdle),
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

  /** The context length and where it comes from, once the settings are read. */
  private contextFact(): [string, string][] {
    const settings = this.settings.get();
    return settings ? [[CONTEXT_FACT, describeContextLength(settings)]] : [];
  }

  /** "Release the image and audio encoders after": applied at once (docs/SETTINGS.md). */
  private towerIdleField(idle: TowerIdle): HTMLElement {
    const id = "model-tower-idle";
    const select = el(
      "select",
      { id, "data-testid": "model-tower-idle", disabled: this.busy },
      el("option", { value: "" }, `The default here (${formatTowerIdle(idle.machineSecs)})`),
      ...TOWER_IDLE_CHOICES.map((secs) => el("option", { value: String(secs) }, formatTowerIdle(secs))),
    );
    select.value = idle.chosen ? String(idle.secs) : "";
    select.addEventListener("change", () => {
      const secs = select.value === "" ? null : Number(select.value);
      void this.run(() => this.handlers.setTowerIdle(secs));
    });
    return el(
      "div",
      { class: "field" },
      el("label", { for: id }, "Release the image and audio encoders after"),
      select,
      el(
        "p",
        { class: "field-help", "data-testid": "model-tower-idle-help" },
        `${describeTowerIdle(idle)} Kept, they hold memory (about 0.9 GB for Gemma 4 E4B); released, the next image or recording reads them again first.`,
      ),
    );
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
