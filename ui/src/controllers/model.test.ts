// @vitest-environment jsdom
// The window's model: the first-run screen, startup, and Settings → Model.
// Whole-window tests run in jsdom (see test/window.ts).
import "../test/dialog-polyfill";

import { beforeEach, describe, expect, it, vi } from "vitest";

import type { ModelState } from "../api";
import { DOWNLOADS, READY } from "../test/backend";
import { callsOf, emit, handle } from "../test/fake-tauri";
import { root, app, backend, settle, mount, $, type, sendText, click, useWindow } from "../test/window";

vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));

useWindow();

describe("first run", () => {
  beforeEach(() => {
    backend.status = { ...backend.status, model: { state: "none" } };
  });

  it("offers the download and a folder, and shows the models folder as text", async () => {
    backend.status.modelsDir = "/tmp/<img src=x onerror=alert(1)>/models";
    await mount();
    expect($("first-run")).not.toBeNull();
    expect($("download")?.textContent).toBe("Download Gemma 4 E4B (4-bit, ~5 GB)");
    expect($("choose-folder")?.textContent).toBe("Choose Folder…");
    expect(root.querySelector("#models-dir")?.textContent).toBe("/tmp/<img src=x onerror=alert(1)>/models");
    expect(root.querySelector("main img")).toBeNull();
    expect($("model-status")?.textContent).toBe("No model");
  });

  it("says “this Mac” only on macOS", async () => {
    await mount();
    expect($("first-run")?.textContent).toContain("entirely on this Mac");
    app.destroy();
    backend.status.platform = "linux";
    await mount();
    expect($("first-run")?.textContent).toContain("entirely on this computer");
    expect($("first-run")?.textContent).not.toContain("Mac");
  });

  it("shows why a chosen folder is not a usable model, in words", async () => {
    handle("choose_model_folder", () => {
      throw {
        kind: "modelInvalid",
        message: "This folder has no config.json. Choose the folder that holds the model files.",
      };
    });
    await mount();
    click($("choose-folder"));
    await settle();
    const error = $("setup-error");
    expect(error?.getAttribute("role")).toBe("alert");
    expect(error?.textContent).toBe("This folder has no config.json. Choose the folder that holds the model files.");
    expect(($("choose-folder") as HTMLButtonElement).disabled).toBe(false);
  });

  it("switches to the chat once a chosen folder loads", async () => {
    handle("choose_model_folder", () => READY);
    await mount();
    click($("choose-folder"));
    await settle();
    expect($("first-run")).toBeNull();
    expect($("composer")).not.toBeNull();
    expect($("model-status")?.textContent).toBe("Gemma 4 E4B");
  });

  it("shows download progress with bytes, speed and time left, and cancels", async () => {
    handle("download_model", () => undefined);
    handle("cancel_download", () => undefined);
    await mount();
    click($("download"));
    await settle();
    expect(callsOf("download_model")).toHaveLength(1);
    const progress: ModelState = {
      state: "downloading",
      progress: {
        file: "model.safetensors",
        filesDone: 2,
        filesTotal: 7,
        bytesDone: 1_250_000_000,
        bytesTotal: 5_000_000_000,
        bytesPerSecond: 25_000_000,
        etaSeconds: 150,
      },
    };
    emit("model-state", progress);
    expect($("download-progress")?.textContent).toContain("1.3 GB of 5.0 GB (25%)");
    expect($("download-progress")?.textContent).toContain("25 MB/s");
    expect($("download-progress")?.textContent).toContain("about 3 min left");
    expect(root.querySelector("progress")?.value).toBe(0.25);
    expect($("first-run")?.textContent).toContain("File 3 of 7");
    click($("cancel-download"));
    await settle();
    expect(callsOf("cancel_download")).toHaveLength(1);
  });

  it("keeps focus on Cancel while progress updates", async () => {
    await mount();
    const progress = (bytesDone: number): ModelState => ({
      state: "downloading",
      progress: {
        file: "a",
        filesDone: 0,
        filesTotal: 1,
        bytesDone,
        bytesTotal: 100,
        bytesPerSecond: 1,
        etaSeconds: null,
      },
    });
    emit("model-state", progress(1));
    $("cancel-download")?.focus();
    emit("model-state", progress(2));
    expect(document.activeElement).toBe($("cancel-download"));
  });

  it("shows the loading stage, then the chat when ready", async () => {
    await mount();
    emit("model-state", { state: "loading", name: "Gemma 4 E4B", dir: "/m", stage: "Reading weights (3 of 4)" });
    expect($("model-loading")?.textContent).toContain("Reading weights (3 of 4)");
    emit("model-state", READY);
    expect($("model-loading")).toBeNull();
    expect($("composer")).not.toBeNull();
  });

  it("shows a failed load with its message and the ways forward", async () => {
    await mount();
    emit("model-state", { state: "failed", dir: "/m", message: "model.safetensors is missing 12 tensors" });
    expect($("setup-error")?.textContent).toBe("model.safetensors is missing 12 tensors");
    expect(root.querySelector("#first-run-title")?.textContent).toBe("The model could not be loaded");
    expect($("download")).not.toBeNull();
    expect($("choose-folder")).not.toBeNull();
  });

  it("says a download that stopped did not finish, not that a model failed to load", async () => {
    await mount();
    emit("model-state", {
      state: "failed",
      dir: null,
      message:
        "The download stopped: huggingface.co cannot be reached. Download again to resume it: what arrived is kept.",
    });
    expect(root.querySelector("#first-run-title")?.textContent).toBe("The download did not finish");
    // The words name the button beside them.
    expect($("setup-error")?.textContent).toContain("Download again to resume it: what arrived is kept.");
    expect($("download")?.textContent).toMatch(/^Download /);
    // Nothing was loading: the status bar does not say a model failed to load, nor shows red.
    expect($("model-status")?.textContent).toBe("No model: the download stopped");
    expect(root.querySelector(".status-dot")?.classList.contains("failed")).toBe(false);
  });

  it("drops the stopped download's heading when a later action fails for its own reason", async () => {
    handle("choose_model_folder", () => {
      throw { kind: "modelInvalid", message: "/m/photos: This folder has no config.json." };
    });
    await mount();
    emit("model-state", { state: "failed", dir: null, message: "The download stopped: disk full." });
    click($("choose-folder"));
    await settle();
    expect($("setup-error")?.textContent).toBe("/m/photos: This folder has no config.json.");
    expect(root.querySelector("#first-run-title")?.textContent).toBe("That did not work");
    expect(root.querySelector("#first-run-title")?.textContent).not.toContain("download");
  });

  it("shows the models folder as a sentence, not as a field", async () => {
    backend.status.modelsDir = "/Users/ada/Models";
    await mount();
    const note = $("models-dir-note");
    expect(note?.tagName).toBe("P");
    expect(note?.textContent).toBe(
      "Downloads go to /Users/ada/Models; a model folder put there is found at the next start.",
    );
    expect(root.querySelector("main code.path, main input")).toBeNull();
    expect(root.querySelector("#models-dir-label")).toBeNull();
  });

  it("offers the recent model folders and loads one without browsing", async () => {
    backend.recent = [
      { name: "gemma-4-e4b-it-8bit", dir: "/Users/ada/Models/gemma-4-e4b-it-8bit" },
      { name: "mlx-community/gemma-4-e4b-it-4bit", dir: "/hf/snapshots/abc" },
    ];
    await mount();
    const buttons = [...root.querySelectorAll<HTMLButtonElement>('[data-testid="recent-models"] button')];
    expect(buttons.map((b) => b.textContent)).toEqual([
      "gemma-4-e4b-it-8bit/Users/ada/Models/gemma-4-e4b-it-8bit",
      "mlx-community/gemma-4-e4b-it-4bit/hf/snapshots/abc",
    ]);
    click(buttons[1] ?? null);
    await settle();
    expect(callsOf("open_recent_model").at(-1)?.args).toEqual({ dir: "/hf/snapshots/abc" });
    expect($("first-run")).toBeNull();
    expect($("model-status")?.textContent).toBe("mlx-community/gemma-4-e4b-it-4bit");
  });

  it("says why a recent folder could not be loaded, in words", async () => {
    backend.recent = [{ name: "gone", dir: "/m/gone" }];
    handle("open_recent_model", () => {
      throw { kind: "modelInvalid", message: "/m/gone: config.json is missing" };
    });
    await mount();
    click(root.querySelector('[data-testid="recent-models"] button'));
    await settle();
    expect($("setup-error")?.textContent).toBe("/m/gone: config.json is missing");
    expect($("first-run")).not.toBeNull();
  });
});

describe("startup", () => {
  it("names shortcuts with ⌘ on macOS and Ctrl elsewhere", async () => {
    await mount();
    expect($("new-chat")?.title).toBe("New Chat (⌘N)");
    expect($("settings")?.title).toBe("Settings (⌘,)");
    expect(($("search") as HTMLInputElement).placeholder).toBe("Search (⌘F)");
    app.destroy();
    backend.status.platform = "linux";
    await mount();
    expect($("new-chat")?.title).toBe("New Chat (Ctrl+N)");
    expect($("settings")?.title).toBe("Settings (Ctrl+,)");
    expect(($("search") as HTMLInputElement).placeholder).toBe("Search (Ctrl+F)");
  });

  it("shows the backend's error as an alert", async () => {
    handle("app_status", () => {
      throw { kind: "io", message: "could not create the models folder: permission denied" };
    });
    await mount();
    const alert = root.querySelector('[role="alert"]');
    expect(alert?.querySelector("h1")?.textContent).toBe("Gemma Desk could not start");
    expect(alert?.textContent).toContain("permission denied");
  });

  it("shows the model and memory in use in the status bar", async () => {
    await mount();
    expect($("model-status")?.textContent).toBe("Gemma 4 E4B");
    expect($("memory")?.textContent).toBe("Memory 3.4 GB");
  });
});

describe("settings → model", () => {
  async function openModelSettings(): Promise<HTMLElement> {
    await mount();
    click($("settings"));
    await settle();
    return $("model-panel") as HTMLElement;
  }

  function fact(panel: HTMLElement, label: string): string | null | undefined {
    return panel.querySelector(`[data-fact="${label}"]`)?.textContent;
  }

  it("describes the loaded model: name, folder, size, weights, parameters, context, towers", async () => {
    const panel = await openModelSettings();
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
    expect(fact(panel, "Folder")).toBe("/models/gemma-4-e4b");
    expect(fact(panel, "Size on disk")).toBe("5.2 GB");
    expect(fact(panel, "Weights")).toBe("4-bit (affine)");
    expect(fact(panel, "Parameters")).toBe("7.9 billion");
    expect(fact(panel, "Context limit")).toBe("8,192 tokens");
    expect(fact(panel, "Images")).toBe("yes");
    // Audio clips are attached or recorded and heard by the model: say so.
    expect(fact(panel, "Audio")).toBe("yes (attach or record a clip)");
  });

  it("shows the memory the model uses now, read again when Settings opens", async () => {
    const panel = await openModelSettings();
    expect(fact(panel, "Memory in use")).toBe("2.9 GB held by the model (the app in all: 3.4 GB)");
    handle("memory_usage", () => ({
      residentBytes: 12_340_000_000,
      mlxActiveBytes: 10_060_000_000,
      mlxPeakBytes: 11_000_000_000,
    }));
    click($("settings-cancel"));
    click($("settings"));
    await settle();
    expect(fact(panel, "Memory in use")).toBe("10.1 GB held by the model (the app in all: 12.3 GB)");
    handle("memory_usage", () => {
      throw { kind: "internal", message: "no counters" };
    });
    click($("settings-cancel"));
    click($("settings"));
    await settle();
    expect(fact(panel, "Memory in use")).toBe("not known");
  });

  it("loads another folder and shows what it is", async () => {
    if (READY.state !== "ready") throw new Error("READY is ready");
    const other: ModelState = {
      ...READY,
      name: "gemma-4-e4b-it-bf16",
      dir: "/hf/snapshots/abc",
      checkpoint: {
        ...READY.checkpoint,
        name: "gemma-4-e4b-it-bf16",
        dir: "/hf/snapshots/abc",
        quantizationBits: null,
        quantizationMode: null,
        parameters: 7_940_000_000,
        sizeBytes: 15_000_000_000,
        audio: false,
      },
    };
    handle("choose_model_folder", () => other);
    const panel = await openModelSettings();
    click($("model-choose-folder"));
    await settle();
    expect(callsOf("choose_model_folder")).toHaveLength(1);
    expect(fact(panel, "Name")).toBe("gemma-4-e4b-it-bf16");
    expect(fact(panel, "Weights")).toBe("bfloat16, not quantized");
    expect(fact(panel, "Size on disk")).toBe("15 GB");
    expect(fact(panel, "Audio")).toBe("no (this checkpoint has no audio tower)");
    expect($("model-status")?.textContent).toBe("gemma-4-e4b-it-bf16");
  });

  it("shows why a folder was refused, in words, and keeps the model in use", async () => {
    handle("choose_model_folder", () => {
      throw {
        kind: "modelInvalid",
        message: '/m/llama: This is a Llama model (model_type "llama"); Gemma Desk runs Gemma 4 E4B',
      };
    });
    const panel = await openModelSettings();
    click($("model-choose-folder"));
    await settle();
    expect($("model-error")?.getAttribute("role")).toBe("alert");
    expect($("model-error")?.textContent).toBe(
      '/m/llama: This is a Llama model (model_type "llama"); Gemma Desk runs Gemma 4 E4B',
    );
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
  });

  it("downloads the checkpoint picked from those offered, with progress and cancel", async () => {
    handle("download_model", () => undefined);
    handle("cancel_download", () => undefined);
    const panel = await openModelSettings();
    const choice = $("model-download-choice") as HTMLSelectElement;
    expect([...choice.options].map((o) => o.textContent)).toEqual(DOWNLOADS.map((d) => d.label));
    choice.value = "mlx-community/gemma-4-e4b-it-8bit";
    click($("model-download"));
    await settle();
    expect(callsOf("download_model").at(-1)?.args).toEqual({ repo: "mlx-community/gemma-4-e4b-it-8bit" });
    // The model in use stays ready, the download beside it.
    emit("model-state", {
      ...READY,
      download: {
        repo: "mlx-community/gemma-4-e4b-it-8bit",
        progress: {
          file: "model.safetensors",
          filesDone: 0,
          filesTotal: 3,
          bytesDone: 2_000_000_000,
          bytesTotal: 8_000_000_000,
          bytesPerSecond: 50_000_000,
          etaSeconds: 120,
        },
        failed: null,
      },
    });
    expect($("model-panel-status")?.textContent).toContain(
      `${DOWNLOADS[1]?.label}. Downloading: 2.0 GB of 8.0 GB (25%)`,
    );
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
    expect($("model-download")).toBeNull();
    // Chatting goes on meanwhile.
    click($("settings-cancel"));
    await settle();
    expect(($("send") as HTMLButtonElement | null)?.hidden).toBe(false);
    type("Still here?");
    expect(($("send") as HTMLButtonElement).disabled).toBe(false);
    expect(root.querySelector(".composer-hint")?.textContent ?? "").not.toContain("downloading");
    click($("settings"));
    await settle();
    click($("model-cancel-download"));
    await settle();
    expect(callsOf("cancel_download")).toHaveLength(1);
    emit("model-state", READY);
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
  });

  it("says why a download beside the model stopped, and offers the downloads again", async () => {
    const panel = await openModelSettings();
    emit("model-state", {
      ...READY,
      download: {
        repo: "mlx-community/gemma-4-e4b-it-8bit",
        progress: null,
        failed:
          "The download stopped: cannot reach huggingface.co; check the internet connection. Download again to resume it: what arrived is kept.",
      },
    });
    expect($("model-download-failed")?.textContent).toContain("cannot reach huggingface.co");
    expect($("model-download")).not.toBeNull();
    expect(fact(panel, "Name")).toBe("Gemma 4 E4B");
  });

  it("forgets the model and goes back to the model picker", async () => {
    handle("forget_model", () => ({ state: "none" }));
    await openModelSettings();
    click($("model-forget"));
    await settle();
    expect(callsOf("forget_model")).toHaveLength(1);
    expect(($("settings-dialog") as HTMLDialogElement).open).toBe(false);
    expect($("first-run")).not.toBeNull();
    expect($("download")).not.toBeNull();
  });

  it("keeps the forgotten model in the recent list so going back needs no browsing", async () => {
    backend.recent = [{ name: "Gemma 4 E4B", dir: "/models/gemma-4-e4b" }];
    handle("forget_model", () => ({ state: "none" }));
    await openModelSettings();
    // The model in use is not offered to itself.
    expect($("model-recent")).toBeNull();
    click($("model-forget"));
    await settle();
    const back = root.querySelector<HTMLButtonElement>('[data-testid="recent-models"] button');
    expect(back?.textContent).toBe("Gemma 4 E4B/models/gemma-4-e4b");
    click(back);
    await settle();
    expect(callsOf("open_recent_model").at(-1)?.args).toEqual({ dir: "/models/gemma-4-e4b" });
    expect($("first-run")).toBeNull();
  });

  it("offers the other recent models in Settings and switches to one", async () => {
    backend.recent = [
      { name: "Gemma 4 E4B", dir: "/models/gemma-4-e4b" },
      { name: "gemma-4-e4b-it-8bit", dir: "/models/gemma-4-e4b-it-8bit" },
    ];
    const panel = await openModelSettings();
    const buttons = [...panel.querySelectorAll<HTMLButtonElement>('[data-testid="model-recent"] button')];
    expect(buttons.map((b) => b.dataset.dir)).toEqual(["/models/gemma-4-e4b-it-8bit"]);
    click(buttons[0] ?? null);
    await settle();
    expect(fact(panel, "Name")).toBe("gemma-4-e4b-it-8bit");
    expect(fact(panel, "Folder")).toBe("/models/gemma-4-e4b-it-8bit");
  });

  it("shows the size of each download it offers", async () => {
    const panel = await openModelSettings();
    const options = [...panel.querySelectorAll('[data-testid="model-download-choice"] option')];
    expect(options.map((o) => o.textContent)).toEqual(DOWNLOADS.map((d) => d.label));
    for (const option of options) expect(option.textContent).toMatch(/~\d+ GB/);
  });

  it("says what loading reads, without the model's name twice", async () => {
    const panel = await openModelSettings();
    emit("model-state", {
      state: "loading",
      name: "tiny-audio-e4b",
      dir: "/m/tiny-audio-e4b",
      stage: "Reading 0.6 GB of weights",
    });
    const line = panel.querySelector('[data-testid="model-panel-status"]')?.textContent ?? "";
    expect(line).toBe("Loading tiny-audio-e4b: Reading 0.6 GB of weights");
    expect(line.split("tiny-audio-e4b")).toHaveLength(2);
  });

  it("says that switching stops the answer being written", async () => {
    await mount();
    await sendText("Tell me a story");
    backend.delta(backend.lastSent, "Once", 1);
    click($("settings"));
    await settle();
    expect($("model-panel")?.textContent).toContain("Switching stops the answer being written; what it wrote is kept.");
  });
});
