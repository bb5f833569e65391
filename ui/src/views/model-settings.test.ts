import { describe, expect, it } from "vitest";

import type { ModelState, RecentModel, Settings, TowerIdle } from "../api";
import { READY, SETTINGS } from "../test/backend";
import { Value } from "../store";
import {
  describeContextLength,
  describeMemory,
  describeTowerIdle,
  formatGigabytes,
  ModelPanel,
  type ModelPanelHandlers,
} from "./model-settings";
import { contextLengthHelp } from "./settings";

const EIGHT_GB_MAC = { tokens: 8192, memoryBytes: 8 * 2 ** 30, mac: true };

describe("the memory the model uses", () => {
  it("is told in gigabytes with one decimal", () => {
    expect(formatGigabytes(2_949_000_000)).toBe("2.9 GB");
    expect(formatGigabytes(10_060_000_000)).toBe("10.1 GB");
    expect(formatGigabytes(0)).toBe("0.0 GB");
    expect(describeMemory({ residentBytes: 3_400_000_000, mlxActiveBytes: 2_900_000_000, mlxPeakBytes: 0 })).toBe(
      "2.9 GB held by the model (the app in all: 3.4 GB)",
    );
    expect(describeMemory(null)).toBe("not known");
  });

  it("changes in place, so a checkpoint being picked in the panel stays picked", () => {
    const panel = new ModelPanel(
      new Value<ModelState>(READY),
      () => [
        { repo: "a/one", label: "One" },
        { repo: "a/two", label: "Two" },
      ],
      () => false,
      {
        chooseFolder: () => Promise.resolve(),
        download: () => Promise.resolve(),
        cancelDownload: () => Promise.resolve(),
        forget: () => Promise.resolve(),
        openRecent: () => Promise.resolve(),
        setTowerIdle: () => Promise.resolve(),
      },
      new Value<RecentModel[]>([]),
    );
    const fact = () => panel.element.querySelector('[data-fact="Memory in use"]')?.textContent;
    expect(fact()).toBe("not known");
    const choice = panel.element.querySelector<HTMLSelectElement>('[data-testid="model-download-choice"]');
    if (!choice) throw new Error("no download choice");
    choice.value = "a/two";

    panel.showMemory({ residentBytes: 5_000_000_000, mlxActiveBytes: 3_050_000_000, mlxPeakBytes: 3_500_000_000 });

    expect(fact()).toBe("3.0 GB held by the model (the app in all: 5.0 GB)");
    expect(choice.value).toBe("a/two");
    expect(panel.element.querySelector('[data-testid="model-download-choice"]')).toBe(choice);
  });
});

describe("the context length's words", () => {
  it("say the machine chose it, for how much memory, and where to change it", () => {
    const machine: Settings = { ...SETTINGS, contextLength: 8192, machineContext: EIGHT_GB_MAC };
    expect(describeContextLength(machine)).toBe("8,192 tokens — chosen for this Mac's 8 GB; change it under Answers");
    expect(contextLengthHelp(machine)).toBe(
      "Tokens of conversation the model keeps in view. Longer uses more memory. 8,192 was chosen for this Mac's 8 GB; change it here.",
    );
    const linux = { ...machine, machineContext: { tokens: 16_384, memoryBytes: 24 * 2 ** 30, mac: false } };
    expect(describeContextLength({ ...linux, contextLength: 16_384 })).toBe(
      "16,384 tokens — chosen for this computer's 24 GB; change it under Answers",
    );
  });

  it("say a length the user set is theirs, and what the machine's would be", () => {
    const chosen: Settings = {
      ...SETTINGS,
      contextLength: 32_768,
      contextLengthChosen: true,
      machineContext: EIGHT_GB_MAC,
    };
    expect(describeContextLength(chosen)).toBe("32,768 tokens — your choice (this Mac's default: 8,192)");
    expect(contextLengthHelp(chosen)).toContain("Your choice; this Mac's default is 8,192.");
    expect(describeContextLength({ ...chosen, contextLength: 8192 })).toBe("8,192 tokens — your choice");
  });

  it("before any model has loaded, name the default without a machine", () => {
    expect(describeContextLength({ ...SETTINGS, contextLength: 16_384 })).toBe(
      "16,384 tokens — the default; change it under Answers",
    );
    expect(contextLengthHelp(SETTINGS)).toBe(
      "Tokens of conversation the model keeps in view. Longer uses more memory.",
    );
  });

  it("show in Settings → Model and follow the settings as they change", () => {
    const settings = new Value<Settings | null>(null);
    const panel = new ModelPanel(
      new Value<ModelState>(READY),
      () => [],
      () => false,
      handlers(),
      new Value<RecentModel[]>([]),
      settings,
    );
    const fact = () => panel.element.querySelector('[data-fact="Context length"]')?.textContent;
    expect(fact()).toBeUndefined();
    settings.set({ ...SETTINGS, machineContext: EIGHT_GB_MAC });
    panel.refresh();
    expect(fact()).toBe("8,192 tokens — chosen for this Mac's 8 GB; change it under Answers");
    settings.set({ ...SETTINGS, contextLength: 4096, contextLengthChosen: true, machineContext: EIGHT_GB_MAC });
    expect(fact()).toBe("4,096 tokens — your choice (this Mac's default: 8,192)");
  });
});

describe("releasing the image and audio encoders", () => {
  it("is told in words, whose choice it is", () => {
    expect(describeTowerIdle({ secs: 30, machineSecs: 30, chosen: false })).toBe(
      "Released 30 seconds after their last use (the default for this machine's memory).",
    );
    expect(describeTowerIdle({ secs: 1800, machineSecs: 300, chosen: true })).toBe(
      "Released 30 minutes after their last use (your choice).",
    );
    expect(describeTowerIdle({ secs: 0, machineSecs: 300, chosen: true })).toBe(
      "Released right after the question that used them (your choice).",
    );
  });

  it("offers the machine's default and the periods, and applies a pick at once", async () => {
    const picked: (number | null)[] = [];
    const model = new Value<ModelState>(readyWith({ secs: 30, machineSecs: 30, chosen: false }));
    const panel = new ModelPanel(
      model,
      () => [],
      () => false,
      handlers({
        setTowerIdle: (secs) => {
          picked.push(secs);
          return Promise.resolve();
        },
      }),
      new Value<RecentModel[]>([]),
    );
    const select = () => panel.element.querySelector<HTMLSelectElement>('[data-testid="model-tower-idle"]');
    const shown = select();
    if (!shown) throw new Error("no encoders' period");
    expect([...shown.options].map((option) => option.textContent)).toEqual([
      "The default here (30 seconds)",
      "right after the question",
      "30 seconds",
      "5 minutes",
      "30 minutes",
    ]);
    expect(shown.value).toBe("");

    shown.value = "1800";
    shown.dispatchEvent(new Event("change"));
    await Promise.resolve();
    expect(picked).toEqual([1800]);
    // The backend's state says what now applies.
    model.set(readyWith({ secs: 1800, machineSecs: 30, chosen: true }));
    expect(select()?.value).toBe("1800");
    expect(panel.element.querySelector('[data-testid="model-tower-idle-help"]')?.textContent).toContain(
      "Released 30 minutes after their last use (your choice).",
    );
    const back = select();
    if (!back) throw new Error("no encoders' period");
    back.value = "";
    back.dispatchEvent(new Event("change"));
    await Promise.resolve();
    expect(picked).toEqual([1800, null]);
  });
});

function readyWith(towerIdle: TowerIdle): ModelState {
  if (READY.state !== "ready") throw new Error("READY is ready");
  return { ...READY, towerIdle };
}

function handlers(overrides: Partial<ModelPanelHandlers> = {}): ModelPanelHandlers {
  return {
    chooseFolder: () => Promise.resolve(),
    download: () => Promise.resolve(),
    cancelDownload: () => Promise.resolve(),
    forget: () => Promise.resolve(),
    openRecent: () => Promise.resolve(),
    setTowerIdle: () => Promise.resolve(),
    ...overrides,
  };
}
