/** The bottom strip: which model is loaded (or what it is doing) and the memory in use. */
import type { MemoryUsage, ModelState } from "../api";
import { el } from "../dom";
import { formatBytes } from "../format";

export class StatusBar {
  readonly element: HTMLElement;
  private readonly model = el("span", { class: "status-model", "data-testid": "model-status" });
  private readonly dot = el("span", { class: "status-dot", "aria-hidden": "true" });
  private readonly memory = el("span", { class: "status-memory", "data-testid": "memory" });
  /** "API: on" / "API: answering", only while the local API runs. */
  private readonly api = el("span", { class: "status-api", "data-testid": "api-status", role: "status", hidden: true });
  private apiRunning = false;

  constructor() {
    this.element = el(
      "footer",
      { class: "status-bar", "aria-label": "Status" },
      el("span", { class: "status-left" }, this.dot, this.model),
      el("span", { class: "status-right" }, this.api, this.memory),
    );
    this.setModel({ state: "none" });
  }

  setModel(state: ModelState): void {
    // A stopped download is no fault of the model: no red dot for it.
    const stoppedDownload = state.state === "failed" && state.dir === null;
    this.dot.className = `status-dot ${stoppedDownload ? "none" : state.state}`;
    this.model.dataset.state = state.state;
    switch (state.state) {
      case "none":
        this.model.textContent = "No model";
        break;
      case "downloading": {
        const { bytesDone, bytesTotal } = state.progress;
        const percent = bytesTotal > 0 ? Math.floor((bytesDone / bytesTotal) * 100) : 0;
        this.model.textContent = `Downloading model… ${percent}%`;
        break;
      }
      case "loading":
        this.model.textContent = `Loading ${state.name}… ${state.stage}`;
        break;
      case "ready":
        this.model.textContent = state.name;
        this.model.title = state.dir;
        break;
      case "failed":
        // A download that stopped loaded nothing: it is no load failure. A model that could not
        // be loaded (or is gone since last time) leaves none in use.
        this.model.textContent = state.dir === null ? "No model: the download stopped" : "No model loaded";
        this.model.title = state.message;
        break;
    }
  }

  /** Whether the local API runs, and how many answers it is asked for now. */
  setApi(running: boolean, answering: number): void {
    this.apiRunning = running;
    this.setApiAnswering(answering);
  }

  setApiAnswering(answering: number): void {
    this.api.hidden = !this.apiRunning;
    this.api.dataset.answering = String(answering);
    this.api.textContent = answering > 0 ? `API: answering (${answering})` : "API: on";
    this.api.title =
      answering > 0
        ? "Other programs are using the model; your own chats go first."
        : "The local API is on (Settings).";
  }

  setMemory(usage: MemoryUsage | null): void {
    if (!usage) {
      this.memory.textContent = "";
      return;
    }
    this.memory.textContent = `Memory ${formatBytes(usage.residentBytes)}`;
    this.memory.title = [
      `App memory: ${formatBytes(usage.residentBytes)}`,
      `MLX active: ${formatBytes(usage.mlxActiveBytes)}`,
      `MLX peak: ${formatBytes(usage.mlxPeakBytes)}`,
    ].join("\n");
  }
}
