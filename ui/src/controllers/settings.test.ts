// @vitest-environment jsdom
// The window's Settings: the generation settings and Faster answers.
// Whole-window tests run in jsdom (see test/window.ts).
import "../test/dialog-polyfill";

import { describe, expect, it, vi } from "vitest";

import { drafterProgress } from "../test/backend";
import { drafterName } from "../views/faster-answers";
import { callsOf, handle } from "../test/fake-tauri";
import { root, backend, settle, mount, $, press, click, useWindow } from "../test/window";

vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));

useWindow();

describe("settings", () => {
  it("opens with Cmd+, and saves valid settings", async () => {
    await mount();
    press(document.body, ",", { metaKey: true });
    await settle();
    const dialog = $("settings-dialog") as HTMLDialogElement;
    expect(dialog.open).toBe(true);
    const temperature = $("setting-temperature") as HTMLInputElement;
    expect(temperature.value).toBe("1");
    temperature.value = "0.7";
    ($("setting-thinking") as HTMLInputElement).checked = true;
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings").at(-1)?.args).toEqual({
      settings: { ...backend.settings, temperature: 0.7, thinking: true },
    });
    expect(dialog.open).toBe(false);
  });

  it("keeps Save and Cancel outside the part that scrolls, and says what acts at once", async () => {
    backend.localApi = { ...backend.localApi, enabled: true, running: true };
    await mount();
    click($("settings"));
    await settle();
    const body = $("settings-body") as HTMLElement;
    const footer = $("settings-footer") as HTMLElement;
    // Every section scrolls inside the body; the footer is beside it, never in it.
    for (const panel of ["model-panel", "faster-panel", "local-api-panel", "tools-panel"])
      expect(body.contains($(panel)), panel).toBe(true);
    expect(body.contains($("setting-temperature"))).toBe(true);
    expect(body.contains(footer)).toBe(false);
    expect(footer.contains($("settings-save"))).toBe(true);
    expect(footer.contains($("settings-cancel"))).toBe(true);
    expect($("settings-rule")?.textContent).toBe(
      "Model, Faster answers, Local API, Quick ask and Tools act at once. Save applies the answer settings.",
    );
    // Save, outside the form, still submits it.
    ($("setting-topK") as HTMLInputElement).value = "20";
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings").at(-1)?.args).toEqual({ settings: { ...backend.settings, topK: 20 } });
  });

  it("refuses invalid values with a message next to the field", async () => {
    await mount();
    click($("settings"));
    await settle();
    const topP = $("setting-topP") as HTMLInputElement;
    topP.value = "3";
    ($("setting-maxTokens") as HTMLInputElement).value = "1.5";
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings")).toHaveLength(0);
    expect(topP.getAttribute("aria-invalid")).toBe("true");
    const describedBy = topP.getAttribute("aria-describedby")?.split(" ") ?? [];
    const messagesText = describedBy.map((id) => root.querySelector(`#${id}`)?.textContent).join(" ");
    expect(messagesText).toContain("Top P must be between 0.01 and 1.");
    expect(root.textContent).toContain("Maximum answer length must be a whole number.");
    expect(document.activeElement).toBe(topP);

    // Fixing a value clears its error at once; the other stays until it is fixed too.
    topP.value = "0.9";
    topP.dispatchEvent(new Event("input", { bubbles: true }));
    expect(topP.hasAttribute("aria-invalid")).toBe(false);
    expect(root.textContent).not.toContain("Top P must be");
    expect(root.textContent).toContain("Maximum answer length must be a whole number.");
    // Typing in a field with no error shown shows none yet.
    const temperature = $("setting-temperature") as HTMLInputElement;
    temperature.value = "-";
    temperature.dispatchEvent(new Event("input", { bubbles: true }));
    expect(temperature.hasAttribute("aria-invalid")).toBe(false);
  });

  it("checks the limits the backend sends, not limits of its own", async () => {
    backend.status.settingsLimits = {
      ...backend.status.settingsLimits,
      contextLength: { min: 1024, max: 8192 },
      imageTokenBudgets: [70, 280],
    };
    await mount();
    click($("settings"));
    await settle();
    const context = $("setting-contextLength") as HTMLInputElement;
    expect([context.min, context.max]).toEqual(["1024", "8192"]);
    const budgets = [...($("setting-imageTokenBudget") as HTMLSelectElement).options].map((o) => o.value);
    expect(budgets).toEqual(["70", "280"]);
    expect(($("setting-imageTokenBudget") as HTMLSelectElement).value).toBe("280");
    context.value = "16384";
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings")).toHaveLength(0);
    expect(root.textContent).toContain("Context length must be between 1,024 and 8,192.");
  });

  it("shows the backend's validation error", async () => {
    handle("save_settings", () => {
      throw { kind: "invalidInput", message: "Context length exceeds what this model supports." };
    });
    await mount();
    click($("settings"));
    await settle();
    click($("settings-save"));
    await settle();
    expect(($("settings-dialog") as HTMLDialogElement).open).toBe(true);
    expect(root.querySelector(".settings-form .form-error")?.textContent).toBe(
      "Context length exceeds what this model supports.",
    );
  });
});

describe("faster answers (Settings)", () => {
  async function openFaster(): Promise<HTMLElement> {
    await mount();
    click($("settings"));
    await settle();
    return $("faster-panel") as HTMLElement;
  }

  it("names what to download when no assistant model is found, and switches on and off", async () => {
    const panel = await openFaster();
    const status = () => panel.querySelector('[data-testid="faster-status"]')?.textContent ?? "";
    const toggle = () => panel.querySelector<HTMLInputElement>('[data-testid="faster-toggle"]');
    expect(status()).toContain("No assistant model was found: download mlx-community/gemma-4-E4B-it-assistant-bf16");
    expect(toggle()?.checked).toBe(true);
    const box = toggle() as HTMLInputElement;
    box.checked = false;
    box.dispatchEvent(new Event("change"));
    await settle();
    expect(callsOf("set_faster_answers").at(-1)?.args).toEqual({ on: false });
    expect(status()).toContain(
      "Off: answers come from the model alone. When on, the assistant model gemma-4-E4B-it-assistant-bf16 drafts them.",
    );
    expect(toggle()?.checked).toBe(false);
    const again = toggle() as HTMLInputElement;
    again.checked = true;
    again.dispatchEvent(new Event("change"));
    await settle();
    expect(status()).toContain("drafts 3 tokens at a time and the model checks them");
  });

  it("downloads the assistant model with progress and Cancel, then says it drafts", async () => {
    const panel = await openFaster();
    click(panel.querySelector('[data-testid="faster-download"]'));
    await settle();
    expect(callsOf("download_drafter")).toHaveLength(1);
    backend.fasterChanged({ state: "downloading", progress: drafterProgress(53_000_000) });
    const status = () => panel.querySelector('[data-testid="faster-status"]')?.textContent ?? "";
    expect(status()).toContain("Downloading the assistant model: 53 MB of 159 MB, 12 MB/s");
    expect(status()).toContain("Answers come from the model alone until it is here.");
    const bar = panel.querySelector('[data-testid="faster-download-progress"]');
    expect([bar?.getAttribute("value"), bar?.getAttribute("max")]).toEqual(["53000000", "159000000"]);
    expect(panel.querySelector('[data-testid="faster-download"]')).toBeNull();
    click(panel.querySelector('[data-testid="faster-cancel-download"]'));
    await settle();
    expect(callsOf("cancel_drafter_download")).toHaveLength(1);
    backend.fasterChanged({
      state: "on",
      drafter: "/models/gemma-4-E4B-it-assistant-bf16",
      blockSize: 4,
      parameters: 78_517_764,
    });
    expect(status()).toContain(
      "On: the assistant model gemma-4-E4B-it-assistant-bf16, checked to fit the model in use, drafts 3 tokens at a time",
    );
    expect(status()).not.toContain("/models/");
    expect(panel.querySelector('[data-testid="faster-folder"]')?.textContent).toBe(
      "Folder: /models/gemma-4-E4B-it-assistant-bf16",
    );
    expect(panel.querySelector('[data-testid="faster-download-progress"]')).toBeNull();
  });

  it("says why the last download of the assistant model stopped, and offers it again", async () => {
    backend.faster = {
      state: "missing",
      repo: "mlx-community/gemma-4-E4B-it-assistant-bf16",
      modelsDir: "/models",
      failed:
        "The download stopped: cannot reach huggingface.co; check the internet connection. Download again to resume it: what arrived is kept.",
    };
    const panel = await openFaster();
    expect(panel.querySelector('[data-testid="faster-download-failed"]')?.textContent).toContain(
      "cannot reach huggingface.co",
    );
    expect(panel.querySelector('[data-testid="faster-download"]')?.textContent).toBe(
      "Download Assistant Model (159 MB)",
    );
  });

  it("names a drafter from the Hugging Face cache by its repository, not its snapshot hash", () => {
    expect(
      drafterName(
        "/Users/ada/.cache/huggingface/hub/models--mlx-community--gemma-4-E4B-it-assistant-bf16/snapshots/0a1b2c",
      ),
    ).toBe("mlx-community/gemma-4-E4B-it-assistant-bf16");
    expect(drafterName("/models/gemma-4-E4B-it-assistant-bf16/")).toBe("gemma-4-E4B-it-assistant-bf16");
  });

  it("says why a drafter cannot be used, and a refused switch in words", async () => {
    backend.faster = {
      state: "refused",
      drafter: "/x/assistant",
      reason: "the drafter does not fit this model: its sliding_window is 64, the model's is 512",
    };
    handle("set_faster_answers", () => {
      throw { kind: "invalid", message: "The engine has stopped." };
    });
    const panel = await openFaster();
    expect(panel.querySelector('[data-testid="faster-status"]')?.textContent).toBe(
      "The assistant model assistant cannot be used: the drafter does not fit this model: its sliding_window is 64, the model's is 512. Answers come from the model alone.",
    );
    const box = panel.querySelector<HTMLInputElement>('[data-testid="faster-toggle"]') as HTMLInputElement;
    box.checked = false;
    box.dispatchEvent(new Event("change"));
    await settle();
    expect(panel.querySelector('[data-testid="faster-error"]')?.textContent).toBe("The engine has stopped.");
  });
});

describe("the context length the machine chose", () => {
  const eightGbMac = { tokens: 8192, memoryBytes: 8 * 2 ** 30, mac: true };

  it("is shown in words, stays the machine's when other settings are saved, and a typed one is the user's", async () => {
    backend.settings = { ...backend.settings, contextLength: 8192, machineContext: eightGbMac };
    await mount();
    click($("settings"));
    await settle();
    expect($("model-panel")?.textContent).toContain(
      "8,192 tokens — chosen for this Mac's 8 GB; change it under Answers",
    );
    const context = $("setting-contextLength") as HTMLInputElement;
    const help = context.getAttribute("aria-describedby")?.split(" ")[0] ?? "";
    expect(root.querySelector(`#${help}`)?.textContent).toContain(
      "8,192 was chosen for this Mac's 8 GB; change it here.",
    );
    expect(($("setting-contextLength-default") as HTMLElement).hidden).toBe(true);

    ($("setting-topK") as HTMLInputElement).value = "20";
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings").at(-1)?.args).toEqual({
      settings: { ...backend.settings, topK: 20, contextLengthChosen: false },
    });

    click($("settings"));
    await settle();
    context.value = "12000";
    context.dispatchEvent(new Event("input", { bubbles: true }));
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings").at(-1)?.args).toEqual({
      settings: { ...backend.settings, contextLength: 12_000, contextLengthChosen: true },
    });
  });

  it("comes back with “Use the default” once the user has chosen one", async () => {
    backend.settings = {
      ...backend.settings,
      contextLength: 32_768,
      contextLengthChosen: true,
      machineContext: eightGbMac,
    };
    await mount();
    click($("settings"));
    await settle();
    expect($("model-panel")?.textContent).toContain("32,768 tokens — your choice (this Mac's default: 8,192)");
    const reset = $("setting-contextLength-default") as HTMLButtonElement;
    expect(reset.hidden).toBe(false);
    click(reset);
    expect(($("setting-contextLength") as HTMLInputElement).value).toBe("8192");
    click($("settings-save"));
    await settle();
    expect(callsOf("save_settings").at(-1)?.args).toEqual({
      settings: { ...backend.settings, contextLength: 8192, contextLengthChosen: false },
    });
  });
});

describe("releasing the image and audio encoders", () => {
  it("applies a period at once, without Save, and the panel says it", async () => {
    await mount();
    click($("settings"));
    await settle();
    const select = $("model-tower-idle") as HTMLSelectElement;
    expect(select.value).toBe("");
    select.value = "30";
    select.dispatchEvent(new Event("change", { bubbles: true }));
    await settle();
    expect(callsOf("set_tower_idle").at(-1)?.args).toEqual({ secs: 30 });
    expect(callsOf("save_settings")).toHaveLength(0);
    expect(($("model-tower-idle") as HTMLSelectElement).value).toBe("30");
    expect($("model-tower-idle-help")?.textContent).toContain(
      "Released 30 seconds after their last use (your choice).",
    );
  });
});
