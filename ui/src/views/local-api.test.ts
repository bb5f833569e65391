import { describe, expect, it, vi } from "vitest";

import type { ApiLogEntry, LocalApiChange, LocalApiStatus } from "../api";
import { LOCAL_API_OFF } from "../test/backend";
import { LocalApiPanel, parseParallel, parsePort, snippet, type LocalApiHandlers } from "./local-api";

const KEY = "gd-0123456789abcdefghijklmnopqrstuvwxyzABCDEFG";

const OFF: LocalApiStatus = LOCAL_API_OFF;
const ON: LocalApiStatus = { ...OFF, enabled: true, running: true, key: KEY };

const ENTRY: ApiLogEntry = {
  atMs: new Date(2026, 11, 4, 21, 5, 9).getTime(),
  client: "OpenAI/Python 2.8.1",
  method: "POST",
  path: "/v1/chat/completions",
  status: 200,
  promptTokens: 1234,
  completionTokens: 56,
  ms: 1830,
  body: null,
};

const flush = () => new Promise((resolve) => setTimeout(resolve, 0));
const $ = <T extends HTMLElement = HTMLElement>(panel: LocalApiPanel, id: string) =>
  panel.element.querySelector<T>(`[data-testid="${id}"]`);

function panelWith(status: LocalApiStatus, overrides: Partial<LocalApiHandlers> = {}) {
  const copy = vi.fn<(text: string) => Promise<boolean>>(() => Promise.resolve(true));
  const handlers = {
    copy,
    load: vi.fn(() => Promise.resolve(status)),
    set: vi.fn((change: LocalApiChange) => Promise.resolve({ ...ON, ...change, running: change.enabled })),
    regenerateKey: vi.fn(() => Promise.resolve({ ...ON, key: "gd-new-key-0123456789abcdefghijklmnopqrstuv" })),
    log: vi.fn(() => Promise.resolve([] as ApiLogEntry[])),
    ...overrides,
  };
  const panel = new LocalApiPanel(handlers);
  document.body.append(panel.element);
  void panel.refresh();
  return { panel, handlers, copy };
}

describe("snippets", () => {
  it("carry the real address, model id and key, ready to run", () => {
    const address = "http://127.0.0.1:8000/v1";
    const curl = snippet("curl", address, "gemma-4-e4b-it-4bit", KEY);
    expect(curl).toContain("curl http://127.0.0.1:8000/v1/chat/completions");
    expect(curl).toContain(`-H "Authorization: Bearer ${KEY}"`);
    const body = /-d '(.*)'/.exec(curl)?.[1] ?? "";
    expect(JSON.parse(body)).toEqual({ model: "gemma-4-e4b-it-4bit", messages: [{ role: "user", content: "Hello!" }] });
    const python = snippet("python", address, "gemma-4-e4b-it-4bit", KEY);
    expect(python).toContain("from openai import OpenAI");
    expect(python).toContain(`OpenAI(base_url="${address}", api_key="${KEY}")`);
    expect(python).toContain('model="gemma-4-e4b-it-4bit"');
    const node = snippet("node", address, "gemma-4-e4b-it-4bit", KEY);
    expect(node).toContain('import OpenAI from "openai";');
    expect(node).toContain(`new OpenAI({ baseURL: "${address}", apiKey: "${KEY}" })`);
  });
});

describe("parsePort", () => {
  it("takes whole numbers in range and says why others are refused", () => {
    expect(parsePort(" 8000 ", OFF)).toBe(8000);
    for (const bad of ["80", "70000", "80.5", "", "abc"])
      expect(parsePort(bad, OFF)).toBe("The port must be a whole number between 1024 and 65535.");
  });
});

describe("parseParallel", () => {
  it("takes 1 to the most answers at once and says why others are refused", () => {
    expect(parseParallel(" 2 ", OFF)).toBe(2);
    expect(parseParallel("8", OFF)).toBe(8);
    for (const bad of ["0", "9", "2.5", "", "many"])
      expect(parseParallel(bad, OFF)).toBe("Answers at once must be a whole number from 1 to 8.");
  });
});

describe("the Local API panel", () => {
  it("sets how many answers are written at once, refusing what is out of range without asking", async () => {
    const { panel, handlers } = panelWith(ON);
    await flush();
    const input = $<HTMLInputElement>(panel, "local-api-parallel");
    expect(input?.value).toBe("4");
    if (input) input.value = "12";
    input?.dispatchEvent(new Event("change"));
    await flush();
    expect(handlers.set).not.toHaveBeenCalled();
    expect($(panel, "local-api-change-error")?.textContent).toBe("Answers at once must be a whole number from 1 to 8.");
    const again = $<HTMLInputElement>(panel, "local-api-parallel");
    if (again) again.value = "2";
    again?.dispatchEvent(new Event("change"));
    await flush();
    expect(handlers.set).toHaveBeenCalledWith(expect.objectContaining({ parallel: 2, enabled: true }));
    expect($<HTMLInputElement>(panel, "local-api-parallel")?.value).toBe("2");
    panel.element.remove();
  });

  it("is off by default and turns on through the switch, showing address and key", async () => {
    const { panel, handlers } = panelWith(OFF);
    await flush();
    expect($<HTMLInputElement>(panel, "local-api-toggle")?.checked).toBe(false);
    expect($(panel, "local-api-state")?.textContent).toContain("Off.");
    expect(($(panel, "local-api-address")?.closest(".local-api-details") as HTMLElement).hidden).toBe(true);

    const toggle = $<HTMLInputElement>(panel, "local-api-toggle");
    if (toggle) toggle.checked = true;
    toggle?.dispatchEvent(new Event("change"));
    await flush();
    expect(handlers.set).toHaveBeenCalledWith({
      enabled: true,
      port: 7341,
      allowedOrigins: [],
      verbose: false,
      parallel: 4,
    });
    expect($(panel, "local-api-address")?.textContent).toBe("http://127.0.0.1:7341/v1");
    expect($(panel, "local-api-state")?.textContent).toBe("On: serving gemma-4-e4b-it-4bit.");
    const key = $<HTMLInputElement>(panel, "local-api-key");
    expect(key?.type).toBe("password");
    expect(key?.value).toBe(KEY);
    $(panel, "local-api-key-toggle")?.click();
    expect($<HTMLInputElement>(panel, "local-api-key")?.type).toBe("text");
    panel.element.remove();
  });

  it("copies the address, the key and each example filled in", async () => {
    const { panel, copy } = panelWith(ON);
    await flush();
    $(panel, "local-api-copy-address")?.click();
    $(panel, "local-api-copy-key")?.click();
    $(panel, "local-api-copy-python")?.click();
    await flush();
    expect(copy.mock.calls.map((c) => c[0])).toEqual([
      "http://127.0.0.1:7341/v1",
      KEY,
      snippet("python", "http://127.0.0.1:7341/v1", "gemma-4-e4b-it-4bit", KEY),
    ]);
    expect($(panel, "local-api-notice")?.textContent).toBe("Copied the python example.");
    copy.mockResolvedValueOnce(false);
    $(panel, "local-api-copy-curl")?.click();
    await flush();
    expect($(panel, "local-api-notice")?.textContent).toBe("Could not copy to the clipboard.");
    panel.element.remove();
  });

  it("shows a busy port in words next to the switch, and refuses an out-of-range port without asking", async () => {
    const busy = {
      ...ON,
      running: false,
      port: 8080,
      error: "port 8080 on 127.0.0.1 is already in use by another program; choose another port",
    };
    const { panel, handlers } = panelWith(ON, { set: vi.fn(() => Promise.resolve(busy)) });
    await flush();
    const port = $<HTMLInputElement>(panel, "local-api-port");
    if (port) port.value = "8080";
    port?.dispatchEvent(new Event("change"));
    await flush();
    expect(handlers.set).toHaveBeenCalledWith(expect.objectContaining({ port: 8080 }));
    expect($(panel, "local-api-error")?.textContent).toContain("port 8080 on 127.0.0.1 is already in use");
    expect($<HTMLInputElement>(panel, "local-api-toggle")?.checked).toBe(true);
    expect($(panel, "local-api-state")?.textContent).toBe("On, but not running.");

    const again = $<HTMLInputElement>(panel, "local-api-port");
    if (again) again.value = "99999";
    again?.dispatchEvent(new Event("change"));
    await flush();
    expect(handlers.set).toHaveBeenCalledTimes(1);
    expect($(panel, "local-api-change-error")?.textContent).toBe(
      "The port must be a whole number between 1024 and 65535.",
    );
    panel.element.remove();
  });

  it("sends origins one per line and shows the backend's refusal in words", async () => {
    const set = vi.fn(() =>
      Promise.reject(new Error("`https://*.x` is not an origin: wildcards are not allowed; list each origin")),
    );
    const { panel } = panelWith(ON, { set });
    await flush();
    const origins = $<HTMLTextAreaElement>(panel, "local-api-origins");
    if (origins) origins.value = "http://localhost:3000\n\n  https://*.x  ";
    origins?.dispatchEvent(new Event("input"));
    origins?.dispatchEvent(new Event("change"));
    await flush();
    expect(set).toHaveBeenCalledWith(
      expect.objectContaining({ allowedOrigins: ["http://localhost:3000", "https://*.x"] }),
    );
    expect($(panel, "local-api-change-error")?.textContent).toContain("wildcards are not allowed");
    expect($<HTMLTextAreaElement>(panel, "local-api-origins")?.value).toContain("https://*.x");
    panel.element.remove();
  });

  it("regenerates the key and shows the new one", async () => {
    const { panel, handlers } = panelWith(ON);
    await flush();
    $(panel, "local-api-regenerate")?.click();
    await flush();
    expect(handlers.regenerateKey).toHaveBeenCalledTimes(1);
    expect($<HTMLInputElement>(panel, "local-api-key")?.value).toBe("gd-new-key-0123456789abcdefghijklmnopqrstuv");
    panel.element.remove();
  });

  it("lists requests newest first, bodies only when the backend kept them, and says when it is answering", async () => {
    const { panel } = panelWith(ON, { log: vi.fn(() => Promise.resolve([ENTRY])) });
    await flush();
    panel.logged({
      ...ENTRY,
      path: "/v1/models",
      method: "GET",
      status: 401,
      promptTokens: null,
      completionTokens: null,
      ms: 2,
      client: "curl/8.5.0",
    });
    panel.logged({ ...ENTRY, body: '{"messages": "secret"}', atMs: ENTRY.atMs + 1000 });
    const rows = [...panel.element.querySelectorAll('[data-testid="local-api-log-row"]')].map((row) =>
      [...row.querySelectorAll("td")].map((cell) => cell.firstChild?.textContent),
    );
    expect(rows).toEqual([
      ["21:05:10", "OpenAI/Python 2.8.1", "POST /v1/chat/completions", "200", "1,234", "56", "1,830"],
      ["21:05:09", "curl/8.5.0", "GET /v1/models", "401", "—", "—", "2"],
      ["21:05:09", "OpenAI/Python 2.8.1", "POST /v1/chat/completions", "200", "1,234", "56", "1,830"],
    ]);
    const bodies = panel.element.querySelectorAll('[data-testid="local-api-log-body"]');
    expect([...bodies].map((b) => b.textContent)).toEqual(['{"messages": "secret"}']);

    panel.activity(2);
    expect($(panel, "local-api-state")?.textContent).toBe(
      "On: serving gemma-4-e4b-it-4bit. Answering 2 requests; your own chats go first.",
    );
    panel.element.remove();
  });

  it("keeps its controls in place as the status, the log and the activity change", async () => {
    const { panel } = panelWith(OFF);
    expect($(panel, "local-api-toggle")?.closest("[hidden]")).not.toBeNull(); // "Reading…" until it came
    await flush();
    const ids = ["local-api-toggle", "local-api-port", "local-api-key", "local-api-origins", "local-api-copy-key"];
    const before = ids.map((id) => $(panel, id));
    expect($(panel, "local-api-toggle")?.closest("[hidden]")).toBeNull();
    panel.show(ON);
    panel.activity(1);
    panel.show({ ...ON, answering: 0 });
    void panel.refresh();
    await flush();
    panel.logged(ENTRY);
    expect(ids.map((id) => $(panel, id))).toEqual(before);
    expect(before.every((element) => element?.isConnected)).toBe(true);
    expect($(panel, "local-api-log-row")).not.toBeNull();
    panel.element.remove();
  });

  it("keeps a port being typed while requests come and go", async () => {
    const { panel } = panelWith(ON);
    await flush();
    const port = $<HTMLInputElement>(panel, "local-api-port");
    if (port) port.value = "80";
    panel.activity(1);
    panel.show({ ...ON, answering: 1 });
    expect(port?.value).toBe("80");
    panel.show({ ...ON, port: 8000, address: "http://127.0.0.1:8000/v1" });
    expect(port?.value).toBe("8000");
    panel.element.remove();
  });
});
