import { describe, expect, it, vi } from "vitest";

import type { McpImported } from "../bindings/McpImported";
import type { ServerConfig } from "../bindings/ServerConfig";
import type { ServerView } from "../bindings/ServerView";
import type { ToolView } from "../bindings/ToolView";
import { describeState, parseServer, ToolsPanel, type ToolsPanelHandlers } from "./tools-settings";

const flush = () => new Promise((resolve) => setTimeout(resolve, 0));
const $ = <T extends HTMLElement = HTMLElement>(root: ParentNode, id: string) =>
  root.querySelector<T>(`[data-testid="${id}"]`);
const $$ = (root: ParentNode, id: string) => [...root.querySelectorAll<HTMLElement>(`[data-testid="${id}"]`)];

const CONFIG: ServerConfig = {
  name: "everything",
  enabled: false,
  transport: {
    kind: "stdio",
    command: "npx",
    args: ["-y", "@modelcontextprotocol/server-everything"],
    env: {},
    cwd: null,
  },
};
const LINE = "npx -y @modelcontextprotocol/server-everything";
const OFF: ServerView = { config: CONFIG, state: { state: "stopped" }, commandLine: LINE, confirmed: false };
const STARTING: ServerView = {
  ...OFF,
  config: { ...CONFIG, enabled: true },
  confirmed: true,
  state: { state: "starting" },
};
const READY: ServerView = { ...STARTING, state: { state: "ready", tools: 2 } };
const TOOLS: ToolView[] = [
  {
    name: "echo",
    description: "Echoes back the input <b>bold</b>",
    inputSchema: { type: "object", properties: { message: { type: "string" } } },
    enabled: true,
  },
  {
    name: "add",
    description: "Adds two numbers",
    inputSchema: { type: "object", properties: { a: {}, b: {} } },
    enabled: false,
  },
];

function panelWith(views: ServerView[], overrides: Partial<ToolsPanelHandlers> = {}) {
  const list = vi.fn<() => Promise<ServerView[]>>(() => Promise.resolve(views));
  const handlers = {
    list,
    tools: vi.fn(() => Promise.resolve(TOOLS)),
    setEnabled: vi.fn((_name: string, enabled: boolean) => Promise.resolve(enabled ? STARTING : OFF)),
    setToolEnabled: vi.fn(() => Promise.resolve()),
    save: vi.fn((config: ServerConfig) => Promise.resolve({ ...OFF, config })),
    remove: vi.fn(() => Promise.resolve()),
    importFile: vi.fn(() => Promise.resolve<McpImported | null>({ added: ["time"], skipped: ["everything"] })),
    ...overrides,
  };
  const panel = new ToolsPanel(handlers);
  document.body.replaceChildren(panel.element);
  return { panel, handlers, list };
}

describe("the states", () => {
  it("say starting, ready with N tools, failed with the error", () => {
    expect(describeState({ state: "starting" })).toBe("Starting…");
    expect(describeState({ state: "ready", tools: 1 })).toBe("Ready: 1 tool");
    expect(describeState({ state: "ready", tools: 12 })).toBe("Ready: 12 tools");
    expect(describeState({ state: "failed", error: "npx was not found", stderr_tail: "", hint: "" })).toBe(
      "Failed: npx was not found",
    );
  });
});

describe("the form", () => {
  it("reads a command, its arguments a line each and its environment", () => {
    const config = parseServer({ name: " fs ", command: "npx", args: "-y\n\npkg /tmp\n", env: "TOKEN=a=b\n", url: "" });
    expect(config).toEqual({
      name: "fs",
      enabled: false,
      transport: { kind: "stdio", command: "npx", args: ["-y", "pkg /tmp"], env: { TOKEN: "a=b" }, cwd: null },
    });
    expect(
      parseServer({ name: "h", command: "", args: "", env: "", url: "http://127.0.0.1:3001/mcp" }).transport,
    ).toEqual({
      kind: "http",
      url: "http://127.0.0.1:3001/mcp",
    });
    expect(() => parseServer({ name: "", command: "x", args: "", env: "", url: "" })).toThrow("name");
    expect(() => parseServer({ name: "a", command: "x", args: "", env: "NOVALUE", url: "" })).toThrow("NAME=value");
  });
});

describe("ToolsPanel", () => {
  it("shows the exact command line and starts nothing until the user confirms it", async () => {
    const { panel, handlers } = panelWith([OFF]);
    await panel.refresh();
    const toggle = $<HTMLInputElement>(panel.element, "tools-server-toggle");
    expect($(panel.element, "tools-server-state")?.textContent).toBe("Off");
    toggle?.click();
    expect(handlers.setEnabled).not.toHaveBeenCalled();
    expect(toggle?.checked).toBe(false);
    const confirm = $(panel.element, "tools-confirm");
    expect(confirm?.hidden).toBe(false);
    expect($(panel.element, "tools-confirm-command")?.textContent).toBe(LINE);
    $(panel.element, "tools-confirm-start")?.click();
    await flush();
    expect(handlers.setEnabled).toHaveBeenCalledWith("everything", true, LINE);
    expect($(panel.element, "tools-server-state")?.textContent).toBe("Starting…");
    expect(toggle?.checked).toBe(true);
  });

  it("follows events in place: the same controls, the tools listed with their switches", async () => {
    const { panel, handlers } = panelWith([STARTING]);
    await panel.refresh();
    const toggle = $<HTMLInputElement>(panel.element, "tools-server-toggle");
    toggle?.focus();
    panel.show(READY);
    await flush();
    expect($(panel.element, "tools-server-state")?.textContent).toBe("Ready: 2 tools");
    // Not rebuilt: the switch a person was on is the same element, still focused.
    expect($(panel.element, "tools-server-toggle")).toBe(toggle);
    expect(document.activeElement).toBe(toggle);
    const tools = $$(panel.element, "tools-tool");
    expect(tools.map((t) => t.dataset.tool)).toEqual(["echo", "add"]);
    const switches = $$(panel.element, "tools-tool-toggle") as HTMLInputElement[];
    expect(switches.map((s) => s.checked)).toEqual([true, false]);
    const description = $(panel.element, "tools-tool-description");
    // The server's text is shown as text.
    expect(description?.textContent).toBe("Echoes back the input <b>bold</b> Parameters: message.");
    expect(description?.querySelector("b")).toBeNull();

    // Another event for the same server: the tool rows stay the same elements.
    panel.show(READY);
    await flush();
    expect($$(panel.element, "tools-tool")[0]).toBe(tools[0]);
    expect(handlers.tools).toHaveBeenCalledTimes(1);

    switches[0]?.click();
    await flush();
    expect(handlers.setToolEnabled).toHaveBeenCalledWith("everything", "echo", false);
    expect(switches[0]?.checked).toBe(false);
  });

  it("shows a failure with the tail of stderr and what to do", async () => {
    const { panel } = panelWith([READY]);
    await panel.refresh();
    await flush();
    panel.show({
      ...READY,
      state: { state: "failed", error: "the server exited", stderr_tail: "Error: EACCES", hint: "Check the command." },
    });
    expect($(panel.element, "tools-server-state")?.textContent).toBe("Failed: the server exited");
    expect($(panel.element, "tools-server-stderr")?.hidden).toBe(false);
    expect($(panel.element, "tools-server-stderr")?.textContent).toBe("Error: EACCES");
    expect($(panel.element, "tools-server-hint")?.textContent).toBe("Check the command.");
    expect($$(panel.element, "tools-tool")).toHaveLength(0);
  });

  it("switching a tool that cannot be saved puts the switch back and says why", async () => {
    const { panel } = panelWith([READY], { setToolEnabled: vi.fn(() => Promise.reject(new Error("disk full"))) });
    await panel.refresh();
    await flush();
    const first = $$(panel.element, "tools-tool-toggle")[0] as HTMLInputElement;
    first.click();
    await flush();
    expect(first.checked).toBe(true);
    expect($(panel.element, "tools-message")?.textContent).toBe("disk full");
  });

  it("adds, edits, removes and imports", async () => {
    const { panel, handlers, list } = panelWith([]);
    await panel.refresh();
    $(panel.element, "tools-add")?.click();
    const form = $(panel.element, "tools-form");
    expect(form?.hidden).toBe(false);
    $<HTMLInputElement>(panel.element, "tools-form-name")!.value = "time";
    $<HTMLInputElement>(panel.element, "tools-form-command")!.value = "uvx";
    $<HTMLTextAreaElement>(panel.element, "tools-form-args")!.value = "mcp-server-time";
    $(panel.element, "tools-form-save")?.click();
    await flush();
    expect(handlers.save).toHaveBeenCalledWith(
      {
        name: "time",
        enabled: false,
        transport: { kind: "stdio", command: "uvx", args: ["mcp-server-time"], env: {}, cwd: null },
      },
      null,
    );
    expect(form?.hidden).toBe(true);
    expect($$(panel.element, "tools-server").map((r) => r.dataset.server)).toEqual(["time"]);

    $(panel.element, "tools-server-edit")?.click();
    expect($<HTMLInputElement>(panel.element, "tools-form-command")?.value).toBe("uvx");
    $<HTMLInputElement>(panel.element, "tools-form-name")!.value = "clock";
    $(panel.element, "tools-form-save")?.click();
    await flush();
    expect(handlers.save).toHaveBeenLastCalledWith(expect.objectContaining({ name: "clock" }), "time");
    expect($$(panel.element, "tools-server").map((r) => r.dataset.server)).toEqual(["clock"]);

    $(panel.element, "tools-server-remove")?.click();
    await flush();
    expect(handlers.remove).toHaveBeenCalledWith("clock");
    expect($$(panel.element, "tools-server")).toHaveLength(0);

    list.mockResolvedValue([OFF, { ...OFF, config: { ...CONFIG, name: "time" } }]);
    $(panel.element, "tools-import")?.click();
    await flush();
    await flush();
    expect($$(panel.element, "tools-server").map((r) => r.dataset.server)).toEqual(["everything", "time"]);
    expect($(panel.element, "tools-message")?.textContent).toBe(
      "Imported 1 server, each off until you switch it on. Already here, left as they were: everything.",
    );
  });
});
