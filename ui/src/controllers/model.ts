/** The model: its state from the backend, the first-run screen's choices, and the memory it uses. */
import * as api from "../api";
import type { MemoryUsage, ModelState } from "../api";
import { errorMessage } from "../api";
import { Value } from "../store";
import type { StatusBar } from "../views/status-bar";
import type { Shared } from "./shared";

const MEMORY_POLL_MS = 3000;

export interface ModelHooks {
  /** Forgetting the model leaves Settings for the model picker, on a new chat. */
  forgotten(): void;
}

export class ModelController {
  private memoryTimer: number | undefined;
  /** The memory in use, as last read (`null`: not read yet, or it could not be). */
  readonly memory = new Value<MemoryUsage | null>(null);

  constructor(
    private readonly shared: Shared,
    private readonly statusBar: StatusBar,
    private readonly hooks: ModelHooks,
  ) {}

  apply(state: ModelState): void {
    const { model, setup } = this.shared.state;
    const wasReady = model.get().state === "ready";
    model.set(state);
    if (state.state === "ready" || state.state === "downloading" || state.state === "loading")
      setup.patch({ error: null });
    if (state.state === "ready" && !wasReady) void this.refreshMemory();
    // A load adds to the recent list; Forget and failures show it to go back.
    if (state.state !== "loading" && state.state !== "downloading") void this.refreshRecent();
  }

  /** Loads a folder of the recent list (the first-run screen's buttons). */
  async openRecent(dir: string): Promise<void> {
    const { setup } = this.shared.state;
    setup.patch({ busy: true, error: null });
    try {
      this.apply(await api.openRecentModel(dir));
    } catch (error) {
      setup.patch({ error: errorMessage(error) });
    } finally {
      setup.patch({ busy: false });
    }
  }

  /** Reads the recent model folders again; an unreadable list is an empty one. */
  async refreshRecent(): Promise<void> {
    try {
      this.shared.state.recentModels.set(await api.recentModels());
    } catch {
      this.shared.state.recentModels.set([]);
    }
  }

  async chooseFolder(): Promise<void> {
    const { setup } = this.shared.state;
    setup.patch({ busy: true, error: null });
    try {
      this.apply(await api.chooseModelFolder());
    } catch (error) {
      setup.patch({ error: errorMessage(error) });
    } finally {
      setup.patch({ busy: false });
    }
  }

  /** Unloads the model and goes back to the model picker, on a new chat. */
  async forget(): Promise<void> {
    this.apply(await api.forgetModel());
    this.hooks.forgotten();
  }

  async download(): Promise<void> {
    const { setup } = this.shared.state;
    setup.patch({ busy: true, error: null });
    try {
      await api.downloadModel();
    } catch (error) {
      setup.patch({ error: errorMessage(error) });
    } finally {
      setup.patch({ busy: false });
    }
  }

  async cancelDownload(): Promise<void> {
    try {
      await api.cancelDownload();
    } catch (error) {
      this.shared.toasts.show(`Could not cancel the download: ${errorMessage(error)}`);
    }
  }

  /** Shows the memory in use in the status bar, every few seconds while the window is visible. */
  pollMemory(): void {
    const tick = () => {
      if (document.visibilityState !== "hidden") void this.refreshMemory();
      this.memoryTimer = window.setTimeout(tick, MEMORY_POLL_MS);
    };
    tick();
  }

  destroy(): void {
    window.clearTimeout(this.memoryTimer);
  }

  /** Reads the memory in use now, for the status bar and whoever watches `memory`. */
  async refreshMemory(): Promise<void> {
    let usage: MemoryUsage | null;
    try {
      usage = await api.memoryUsage();
    } catch {
      usage = null;
    }
    this.statusBar.setMemory(usage);
    this.memory.set(usage);
  }
}
