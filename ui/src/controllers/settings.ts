/** Settings: the dialog with its panels (model, faster answers, Local API), and what saving changes. */
import * as api from "../api";
import type { Settings, UnlistenFn } from "../api";
import { copyText } from "../clipboard";
import { el } from "../dom";
import { FasterPanel } from "../views/faster-answers";
import { LocalApiPanel } from "../views/local-api";
import { ModelPanel } from "../views/model-settings";
import { QuickAskPanel } from "../quick/settings-panel";
import { ToolsPanel } from "../views/tools-settings";
import { SettingsDialog } from "../views/settings";
import type { StatusBar } from "../views/status-bar";
import type { ModelController } from "./model";
import { contextWindow, type Shared } from "./shared";

export class SettingsController {
  readonly dialog: SettingsDialog;
  private readonly fasterPanel: FasterPanel;
  private readonly localApiPanel: LocalApiPanel;
  private readonly toolsPanel: ToolsPanel;

  constructor(
    private readonly shared: Shared,
    private readonly statusBar: StatusBar,
    model: ModelController,
  ) {
    const { state, generations } = shared;
    const modelPanel = new ModelPanel(
      state.model,
      () => state.status.get()?.downloads ?? [],
      () => generations.current() !== undefined,
      {
        chooseFolder: async () => model.apply(await api.chooseModelFolder()),
        download: (repo) => api.downloadModel(repo),
        cancelDownload: () => api.cancelDownload(),
        forget: () => model.forget(),
        openRecent: async (dir) => model.apply(await api.openRecentModel(dir)),
        setTowerIdle: async (secs) => void (await api.setTowerIdle(secs)),
      },
      state.recentModels,
      state.settings,
    );
    // A model's load chooses the machine's context length: the settings as they now apply.
    state.model.subscribe((now) => {
      if (now.state === "ready")
        api.getSettings().then(
          (settings) => state.settings.set(settings),
          () => {},
        );
    });
    // The memory the model uses, read when the dialog opens and as the status bar reads it.
    model.memory.subscribe((usage) => modelPanel.showMemory(usage));
    this.fasterPanel = new FasterPanel({
      load: () => api.fasterAnswers(),
      set: (on) => api.setFasterAnswers(on),
      download: () => api.downloadDrafter(),
      cancelDownload: () => api.cancelDrafterDownload(),
    });
    this.localApiPanel = new LocalApiPanel({
      load: () => api.localApi(),
      set: (change) => api.setLocalApi(change),
      regenerateKey: () => api.regenerateApiKey(),
      log: () => api.apiLog(),
      copy: (text) => copyText(text),
    });
    const quickAskPanel = new QuickAskPanel({
      load: () => api.quickAskShortcut(),
      set: (shortcut) => api.setQuickAskShortcut(shortcut),
      open: () => api.showQuickAsk(),
    });
    this.toolsPanel = new ToolsPanel({
      list: () => api.mcpServers(),
      tools: (name) => api.mcpTools(name),
      setEnabled: (name, enabled, confirmed) => api.mcpSetEnabled(name, enabled, confirmed),
      setToolEnabled: (server, tool, enabled) => api.mcpSetToolEnabled(server, tool, enabled),
      save: (config, previous) => api.mcpSaveServer(config, previous),
      remove: (name) => api.mcpRemoveServer(name),
      importFile: () => api.mcpImportFile(),
    });
    const panels = [modelPanel, this.fasterPanel, this.localApiPanel, quickAskPanel, this.toolsPanel];
    this.dialog = new SettingsDialog(
      {
        load: async () => {
          const settings = await api.getSettings();
          state.settings.set(settings);
          return settings;
        },
        save: (settings) => this.save(settings),
      },
      state.settingsLimits,
      {
        element: el("div", {}, ...panels.map((panel) => panel.element)),
        refresh: () => {
          modelPanel.refresh();
          return Promise.all([
            model.refreshMemory(),
            this.fasterPanel.refresh(),
            this.localApiPanel.refresh(),
            quickAskPanel.refresh(),
            this.toolsPanel.refresh(),
          ]);
        },
      },
    );
  }

  /** Follows the backend's events about faster answers and the Local API. */
  async listen(): Promise<UnlistenFn[]> {
    return [
      await api.onFasterAnswers((state) => this.fasterPanel.show(state)),
      await api.onLocalApi((status) => {
        this.localApiPanel.show(status);
        this.statusBar.setApi(status.running, status.answering);
      }),
      await api.onApiRequest((entry) => this.localApiPanel.logged(entry)),
      await api.onMcpServer((view) => this.toolsPanel.show(view)),
      await api.onApiActivity(({ answering }) => {
        this.localApiPanel.activity(answering);
        this.statusBar.setApiAnswering(answering);
      }),
    ];
  }

  /** Reads the settings and where the Local API stands (at start). */
  load(): void {
    api.localApi().then(
      (local) => {
        this.localApiPanel.show(local);
        this.statusBar.setApi(local.running, local.answering);
      },
      () => {},
    );
    api.getSettings().then(
      (settings) => this.shared.state.settings.set(settings),
      () => {},
    );
  }

  private async save(settings: Settings): Promise<Settings> {
    const { state } = this.shared;
    const before = contextWindow(state) ?? 0;
    const stored = await api.saveSettings(settings);
    state.settings.set(stored);
    const full = state.contextFull.get();
    const now = contextWindow(state) ?? 0;
    // The notice goes once the window grew past the one it was about, or holds what it needed.
    if (full && (now > (full.window ?? before) || (full.needed !== null && full.needed < now)))
      state.contextFull.set(null);
    return stored;
  }
}
