/**
 * Settings → Faster answers: speculative decoding with Gemma 4's assistant model. The switch,
 * and in words what it does now: which drafter drafts, that none was found (and where to get
 * one), or why the one found cannot be used.
 */
import { errorMessage, type FasterAnswers } from "../api";
import { checkboxField, el } from "../dom";
import { formatBytes, formatEta, formatSpeed } from "../format";

export interface FasterPanelHandlers {
  load(): Promise<FasterAnswers>;
  /** Switches it and answers where it then stands; rejects in words. */
  set(on: boolean): Promise<FasterAnswers>;
  /** Starts downloading the assistant model (progress comes through `show`). */
  download(): Promise<FasterAnswers>;
  cancelDownload(): Promise<void>;
}

/**
 * The drafter's name as people know it: the repository id for a Hugging Face cache snapshot
 * (`…/models--org--name/snapshots/<hash>`), else its folder's name.
 */
export function drafterName(dir: string): string {
  const parts = dir.split(/[\\/]/).filter(Boolean);
  const snapshots = parts.lastIndexOf("snapshots");
  const repo = snapshots > 0 ? /^models--([^-].*?)--(.+)$/.exec(parts[snapshots - 1] ?? "") : null;
  if (repo) return `${repo[1]}/${repo[2]}`;
  return parts.at(-1) ?? dir;
}

/** What the panel says under its switch. */
export function describeFaster(state: FasterAnswers): string {
  switch (state.state) {
    case "noModel":
      return "Load a model first.";
    case "off":
      return state.drafter === null
        ? "Off: answers come from the model alone."
        : `Off: answers come from the model alone. When on, the assistant model ${drafterName(state.drafter)} drafts them.`;
    case "on":
      return `On: the assistant model ${drafterName(state.drafter)}, checked to fit the model in use, drafts ${state.blockSize - 1} tokens at a time and the model checks them; the answer is the model's own. Under each answer: how many tokens each check gave.`;
    case "missing":
      return `No assistant model was found: download ${state.repo} (about 159 MB) here, or put it beside the model's folder or in ${state.modelsDir}. Answers come from the model alone meanwhile.`;
    case "downloading": {
      const { bytesDone, bytesTotal, bytesPerSecond, etaSeconds } = state.progress;
      return `Downloading the assistant model: ${formatBytes(bytesDone)} of ${formatBytes(bytesTotal)}, ${formatSpeed(bytesPerSecond)}, ${formatEta(etaSeconds)}. Answers come from the model alone until it is here.`;
    }
    case "refused":
      return `The assistant model ${drafterName(state.drafter)} cannot be used: ${state.reason}. Answers come from the model alone.`;
  }
}

export class FasterPanel {
  readonly element = el("section", {
    class: "model-panel faster-panel",
    "data-testid": "faster-panel",
    "aria-labelledby": "faster-panel-title",
  });
  private state: FasterAnswers = { state: "noModel" };
  private error: string | null = null;
  private busy = false;

  constructor(private readonly handlers: FasterPanelHandlers) {
    this.render();
  }

  /** Reads where it stands (when the dialog opens). */
  refresh(): Promise<void> {
    this.error = null;
    return this.run(() => this.handlers.load());
  }

  /** Shows where it stands now (the backend's `faster-answers` events: a download going on). */
  show(state: FasterAnswers): void {
    this.state = state;
    this.render();
  }

  private render(): void {
    const switchedOn = this.state.state !== "off" && this.state.state !== "noModel";
    const toggle = el("input", {
      type: "checkbox",
      id: "faster-answers",
      "data-testid": "faster-toggle",
      "aria-describedby": "faster-status",
      disabled: this.busy || this.state.state === "noModel",
    });
    toggle.checked = switchedOn;
    toggle.addEventListener("change", () => {
      const on = toggle.checked;
      void this.run(() => this.handlers.set(on));
    });
    this.element.replaceChildren(
      el("h2", { id: "faster-panel-title" }, "Faster answers"),
      checkboxField(toggle, "Draft answers with Gemma 4's assistant model"),
      el(
        "p",
        { class: "field-help", id: "faster-status", "data-testid": "faster-status", role: "status" },
        describeFaster(this.state),
      ),
      this.folderLine(),
      this.downloadRow(),
      this.error === null
        ? ""
        : el("p", { class: "form-error", role: "alert", "data-testid": "faster-error" }, this.error),
    );
  }

  /** The drafter's folder, in full, under the words (where it was found). */
  private folderLine(): HTMLElement | string {
    const { state } = this;
    const dir = state.state === "on" || state.state === "refused" ? state.drafter : null;
    if (dir === null) return "";
    return el(
      "p",
      { class: "field-help", "data-testid": "faster-folder" },
      "Folder: ",
      el("span", { class: "path-text" }, dir),
    );
  }

  /** Download (when none was found, with why the last try stopped), or its bar and Cancel. */
  private downloadRow(): HTMLElement | string {
    const { state } = this;
    if (state.state === "downloading") {
      const { bytesDone, bytesTotal } = state.progress;
      const cancel = el("button", { type: "button", "data-testid": "faster-cancel-download" }, "Cancel Download");
      cancel.addEventListener("click", () => {
        this.handlers.cancelDownload().catch((error: unknown) => {
          this.error = `Could not cancel the download: ${errorMessage(error)}`;
          this.render();
        });
      });
      return el(
        "div",
        { class: "faster-download" },
        el("progress", {
          max: String(Math.max(bytesTotal, 1)),
          value: String(bytesDone),
          "aria-label": "Assistant model downloaded",
          "data-testid": "faster-download-progress",
        }),
        cancel,
      );
    }
    if (state.state !== "missing") return "";
    const download = el(
      "button",
      { type: "button", class: "primary", "data-testid": "faster-download", disabled: this.busy },
      "Download Assistant Model (159 MB)",
    );
    download.addEventListener("click", () => void this.run(() => this.handlers.download()));
    return el(
      "div",
      { class: "faster-download" },
      state.failed === null
        ? ""
        : el("p", { class: "form-error", role: "alert", "data-testid": "faster-download-failed" }, state.failed),
      download,
    );
  }

  private async run(action: () => Promise<FasterAnswers>): Promise<void> {
    this.busy = true;
    this.error = null;
    this.render();
    try {
      this.state = await action();
    } catch (error) {
      this.error = errorMessage(error);
    } finally {
      this.busy = false;
      this.render();
    }
  }
}
