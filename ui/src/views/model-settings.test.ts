import { describe, expect, it } from "vitest";

import type { ModelState, RecentModel } from "../api";
import { READY } from "../test/backend";
import { Value } from "../store";
import { describeMemory, formatGigabytes, ModelPanel } from "./model-settings";

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
