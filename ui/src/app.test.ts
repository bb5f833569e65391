import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { ApiError, appStatus, type AppStatus } from "./api";
import { mountApp } from "./app";

vi.mock("./api", async (importOriginal) => ({
  ...(await importOriginal<typeof import("./api")>()),
  appStatus: vi.fn(),
}));

const noModel: AppStatus = {
  model: null,
  modelsDir: "/Users/ada/Library/Application Support/app.gemmadesk.desktop/models",
  version: "0.1.0",
};

let root: HTMLElement;

beforeEach(() => {
  root = document.createElement("div");
  document.body.append(root);
});

afterEach(() => {
  root.remove();
  vi.mocked(appStatus).mockReset();
});

function heading(): string | undefined {
  return root.querySelector("main h1")?.textContent ?? undefined;
}

describe("first run", () => {
  it("says no model is installed and shows the models folder", async () => {
    vi.mocked(appStatus).mockResolvedValue(noModel);

    await mountApp(root);

    expect(heading()).toBe("No model installed yet");
    expect(root.querySelector("#models-dir")?.textContent).toBe(noModel.modelsDir);
    expect(root.querySelector("main")?.hasAttribute("aria-busy")).toBe(false);
    expect(root.querySelector("aside")?.textContent).toContain("Version 0.1.0");
  });

  it("renders the folder path as text, never as markup", async () => {
    const modelsDir = "/tmp/<img src=x onerror=alert(1)>/models";
    vi.mocked(appStatus).mockResolvedValue({ ...noModel, modelsDir });

    await mountApp(root);

    expect(root.querySelector("#models-dir")?.textContent).toBe(modelsDir);
    expect(root.querySelector("img")).toBeNull();
  });

  it("offers no action that does nothing: every button is disabled and explained", async () => {
    vi.mocked(appStatus).mockResolvedValue(noModel);

    await mountApp(root);

    const buttons = [...root.querySelectorAll("button")];
    expect(buttons.length).toBeGreaterThan(0);
    for (const button of buttons) {
      expect(button.disabled).toBe(true);
      const note = root.querySelector(`#${button.getAttribute("aria-describedby")}`);
      expect(note?.textContent).toMatch(/coming/);
    }
  });
});

describe("startup", () => {
  it("shows loading until the status arrives", async () => {
    let resolve: (status: AppStatus) => void = () => {};
    vi.mocked(appStatus).mockReturnValue(new Promise((r) => (resolve = r)));

    const mounted = mountApp(root);

    expect(root.querySelector("main")?.getAttribute("aria-busy")).toBe("true");
    expect(heading()).toBeUndefined();
    resolve(noModel);
    await mounted;
    expect(heading()).toBe("No model installed yet");
  });

  it("names the installed model instead of the first-run screen", async () => {
    vi.mocked(appStatus).mockResolvedValue({
      ...noModel,
      model: { name: "Gemma 4 E4B", dir: "/models/gemma-4-e4b" },
    });

    await mountApp(root);

    expect(heading()).toBe("Gemma 4 E4B is ready");
    expect(root.textContent).not.toContain("No model installed yet");
  });

  it("shows the backend's error message as an alert", async () => {
    vi.mocked(appStatus).mockRejectedValue(
      new ApiError("io", "could not create the models folder /data/models: permission denied"),
    );

    await mountApp(root);

    const alert = root.querySelector('[role="alert"]');
    expect(alert?.querySelector("h1")?.textContent).toBe("Gemma Desk could not start");
    expect(alert?.textContent).toContain("permission denied");
  });
});
