/**
 * Settings → Local API: the switch that serves the loaded model to other programs on this
 * computer (OpenAI-compatible, 127.0.0.1 only, keyed), its address, port, key, allowed browser
 * origins, ready-to-paste examples, and the live request log.
 */
import { errorMessage, type ApiLogEntry, type LocalApiChange, type LocalApiStatus } from "../api";
import { checkboxField, el } from "../dom";

export interface LocalApiHandlers {
  load(): Promise<LocalApiStatus>;
  /** Applies a change and answers where the API then stands; rejects in words. */
  set(change: LocalApiChange): Promise<LocalApiStatus>;
  regenerateKey(): Promise<LocalApiStatus>;
  log(): Promise<ApiLogEntry[]>;
  /** Copies text to the clipboard; true on success. */
  copy(text: string): Promise<boolean>;
}

/** Rows the log shows, newest first. */
const LOG_ROWS = 50;

export type SnippetKind = "curl" | "python" | "node";

/** A ready-to-run example calling this API with the real address, model id and key. */
export function snippet(kind: SnippetKind, address: string, model: string, key: string): string {
  switch (kind) {
    case "curl":
      return [
        `curl ${address}/chat/completions \\`,
        `  -H "Authorization: Bearer ${key}" \\`,
        `  -H "Content-Type: application/json" \\`,
        `  -d '{"model": "${model}", "messages": [{"role": "user", "content": "Hello!"}]}'`,
      ].join("\n");
    case "python":
      return [
        "from openai import OpenAI",
        "",
        `client = OpenAI(base_url="${address}", api_key="${key}")`,
        "answer = client.chat.completions.create(",
        `    model="${model}",`,
        '    messages=[{"role": "user", "content": "Hello!"}],',
        ")",
        "print(answer.choices[0].message.content)",
      ].join("\n");
    case "node":
      return [
        'import OpenAI from "openai";',
        "",
        `const client = new OpenAI({ baseURL: "${address}", apiKey: "${key}" });`,
        "const answer = await client.chat.completions.create({",
        `  model: "${model}",`,
        '  messages: [{ role: "user", content: "Hello!" }],',
        "});",
        "console.log(answer.choices[0].message.content);",
      ].join("\n");
  }
}

/** Answers at once as typed, or why they cannot be. */
export function parseParallel(text: string, status: LocalApiStatus): number | string {
  const answers = Number(text.trim());
  if (text.trim() === "" || !Number.isInteger(answers) || answers < 1 || answers > status.maxParallel)
    return `Answers at once must be a whole number from 1 to ${status.maxParallel}.`;
  return answers;
}

/** The port as typed, or why it cannot be used. */
export function parsePort(text: string, status: LocalApiStatus): number | string {
  const port = Number(text.trim());
  if (text.trim() === "" || !Number.isInteger(port) || port < status.minPort || port > status.maxPort)
    return `The port must be a whole number between ${status.minPort} and ${status.maxPort}.`;
  return port;
}

/** A log row's time, as hours:minutes:seconds. */
function clock(atMs: number): string {
  const at = new Date(atMs);
  return [at.getHours(), at.getMinutes(), at.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

export class LocalApiPanel {
  readonly element = el("section", {
    class: "model-panel local-api-panel",
    "data-testid": "local-api-panel",
    "aria-labelledby": "local-api-title",
  });
  private status: LocalApiStatus | null = null;
  private entries: ApiLogEntry[] = [];
  private error: string | null = null;
  private notice = "";
  private keyShown = false;
  private busy = false;
  private originsDraft: string | null = null;

  constructor(private readonly handlers: LocalApiHandlers) {
    this.render();
  }

  /** Reads where it stands and the log so far (when the dialog opens). */
  refresh(): void {
    this.error = null;
    void this.run(() => this.handlers.load());
    this.handlers.log().then(
      (entries) => {
        this.entries = entries.slice(-LOG_ROWS).reverse();
        this.render();
      },
      () => {},
    );
  }

  /** Shows where it stands (the backend's `local-api` events). */
  show(status: LocalApiStatus): void {
    this.status = status;
    this.render();
  }

  /** A request ended (the backend's `api-request` events): the log's newest row. */
  logged(entry: ApiLogEntry): void {
    this.entries = [entry, ...this.entries].slice(0, LOG_ROWS);
    this.render();
  }

  /** How many answers are asked for now (the backend's `api-activity` events). */
  activity(answering: number): void {
    if (this.status === null) return;
    this.status = { ...this.status, answering };
    this.render();
  }

  private change(patch: Partial<LocalApiChange>): void {
    const status = this.status;
    if (status === null) return;
    const change: LocalApiChange = {
      enabled: status.enabled,
      port: status.port,
      allowedOrigins: status.allowedOrigins,
      verbose: status.verbose,
      parallel: status.parallel,
      ...patch,
    };
    void this.run(() => this.handlers.set(change));
  }

  private render(): void {
    const status = this.status;
    const title = el("h2", { id: "local-api-title" }, "Local API");
    if (status === null) {
      this.element.replaceChildren(title, el("p", { class: "field-help" }, "Reading…"));
      return;
    }
    const toggle = el("input", {
      type: "checkbox",
      id: "local-api-enabled",
      "data-testid": "local-api-toggle",
      "aria-describedby": "local-api-state",
      disabled: this.busy,
    });
    toggle.checked = status.enabled;
    toggle.addEventListener("change", () => this.change({ enabled: toggle.checked }));
    this.element.replaceChildren(
      title,
      checkboxField(toggle, "Serve the model to other programs on this computer"),
      el(
        "p",
        { class: "field-help", id: "local-api-state", "data-testid": "local-api-state", role: "status" },
        this.describe(status),
      ),
      status.error === null
        ? ""
        : el("p", { class: "form-error", role: "alert", "data-testid": "local-api-error" }, status.error),
      this.error === null
        ? ""
        : el("p", { class: "form-error", role: "alert", "data-testid": "local-api-change-error" }, this.error),
      status.enabled ? this.details(status) : "",
    );
  }

  private describe(status: LocalApiStatus): string {
    if (!status.enabled)
      return "Off. When on, programs on this computer can use the model through an OpenAI-compatible API at 127.0.0.1, with a key.";
    if (!status.running) return "On, but not running.";
    const model = status.modelId === null ? "no model is loaded yet (requests get 503)" : `serving ${status.modelId}`;
    const answering =
      status.answering > 0
        ? ` Answering ${status.answering} ${status.answering === 1 ? "request" : "requests"}; your own chats go first.`
        : "";
    return `On: ${model}.${answering}`;
  }

  private details(status: LocalApiStatus): HTMLElement {
    const key = status.key ?? "";
    const model = status.modelId ?? "MODEL";
    return el(
      "div",
      { class: "local-api-details" },
      this.row(
        "Address",
        el("code", { "data-testid": "local-api-address" }, status.address),
        this.copyButton("address", status.address),
      ),
      this.portRow(status),
      this.parallelRow(status),
      this.keyRow(key),
      this.originsRow(status),
      this.verboseRow(status),
      el(
        "div",
        { class: "field local-api-examples" },
        el("span", { class: "field-label" }, "Examples"),
        el(
          "div",
          { class: "field-row" },
          ...(["curl", "python", "node"] as const).map((kind) =>
            this.copyButton(
              kind,
              snippet(kind, status.address, model, key),
              `Copy ${kind === "curl" ? "curl" : kind === "python" ? "Python" : "Node"} example`,
            ),
          ),
        ),
      ),
      this.notice === ""
        ? ""
        : el("p", { class: "field-help", role: "status", "data-testid": "local-api-notice" }, this.notice),
      this.logTable(),
    );
  }

  private row(label: string, ...children: (HTMLElement | string)[]): HTMLElement {
    return el(
      "div",
      { class: "field" },
      el("span", { class: "field-label" }, label),
      el("div", { class: "field-row" }, ...children),
    );
  }

  private copyButton(what: string, text: string, label = "Copy"): HTMLElement {
    const button = el("button", { type: "button", "data-testid": `local-api-copy-${what}` }, label);
    button.addEventListener("click", () => {
      void this.handlers.copy(text).then((ok) => {
        this.notice = ok
          ? `Copied the ${what === "address" || what === "key" ? what : `${what} example`}.`
          : "Could not copy to the clipboard.";
        this.render();
      });
    });
    return button;
  }

  private portRow(status: LocalApiStatus): HTMLElement {
    return this.numberRow({
      id: "port",
      label: "Port",
      value: status.port,
      min: status.minPort,
      max: status.maxPort,
      help: `${status.defaultPort} unless changed. A port in use by another program is refused, never swapped.`,
      parse: (text) => parsePort(text, status),
      apply: (port) => this.change({ port }),
    });
  }

  private parallelRow(status: LocalApiStatus): HTMLElement {
    return this.numberRow({
      id: "parallel",
      label: "Answers at once",
      value: status.parallel,
      min: 1,
      max: status.maxParallel,
      help: `${status.defaultParallel} unless changed. Requests beyond it wait for one to end; your own chats never wait. Each answer is the one it would be alone.`,
      parse: (text) => parseParallel(text, status),
      apply: (parallel) => this.change({ parallel }),
    });
  }

  /** A whole-number field applied when left: a value `parse` refuses is said, not sent. */
  private numberRow(field: {
    id: string;
    label: string;
    value: number;
    min: number;
    max: number;
    help: string;
    parse: (text: string) => number | string;
    apply: (value: number) => void;
  }): HTMLElement {
    const id = `local-api-${field.id}`;
    const input = el("input", {
      type: "number",
      id,
      "data-testid": id,
      min: String(field.min),
      max: String(field.max),
      step: "1",
      disabled: this.busy,
    });
    input.value = String(field.value);
    input.addEventListener("change", () => {
      const value = field.parse(input.value);
      if (typeof value === "string") {
        this.error = value;
        this.render();
        return;
      }
      field.apply(value);
    });
    return el(
      "div",
      { class: "field" },
      el("label", { for: id }, field.label),
      input,
      el("p", { class: "field-help" }, field.help),
    );
  }

  private keyRow(key: string): HTMLElement {
    const input = el("input", {
      type: this.keyShown ? "text" : "password",
      readonly: true,
      "data-testid": "local-api-key",
      "aria-label": "API key",
      class: "local-api-key",
    });
    input.value = key;
    const show = el(
      "button",
      { type: "button", "data-testid": "local-api-key-toggle" },
      this.keyShown ? "Hide" : "Show",
    );
    show.addEventListener("click", () => {
      this.keyShown = !this.keyShown;
      this.render();
    });
    const regenerate = el(
      "button",
      { type: "button", "data-testid": "local-api-regenerate", disabled: this.busy },
      "Regenerate",
    );
    regenerate.addEventListener("click", () => void this.run(() => this.handlers.regenerateKey()));
    return this.row("API key", input, show, this.copyButton("key", key), regenerate);
  }

  private originsRow(status: LocalApiStatus): HTMLElement {
    const area = el("textarea", {
      id: "local-api-origins",
      "data-testid": "local-api-origins",
      rows: "3",
      placeholder: "https://app.example.com",
      spellcheck: "false",
    });
    area.value = this.originsDraft ?? status.allowedOrigins.join("\n");
    area.addEventListener("input", () => {
      this.originsDraft = area.value;
    });
    area.addEventListener("change", () => {
      const allowedOrigins = area.value
        .split("\n")
        .map((line) => line.trim())
        .filter((line) => line !== "");
      this.change({ allowedOrigins });
    });
    return el(
      "div",
      { class: "field" },
      el("label", { for: "local-api-origins" }, "Allowed browser origins"),
      area,
      el(
        "p",
        { class: "field-help" },
        "One per line, as scheme://host[:port]. Web pages from other origins get no answers. Empty: none.",
      ),
    );
  }

  private verboseRow(status: LocalApiStatus): HTMLElement {
    const box = el("input", {
      type: "checkbox",
      id: "local-api-verbose",
      "data-testid": "local-api-verbose",
      disabled: this.busy,
    });
    box.checked = status.verbose;
    box.addEventListener("change", () => this.change({ verbose: box.checked }));
    return checkboxField(box, "Keep request bodies in the log (verbose)");
  }

  private logTable(): HTMLElement {
    if (this.entries.length === 0)
      return el("p", { class: "field-help", "data-testid": "local-api-log-empty" }, "No requests yet.");
    const tokens = (n: number | null) => (n === null ? "—" : n.toLocaleString("en-US"));
    return el(
      "table",
      { class: "local-api-log", "data-testid": "local-api-log" },
      el(
        "thead",
        {},
        el(
          "tr",
          {},
          ...["Time", "Client", "Path", "Status", "In", "Out", "ms"].map((h) => el("th", { scope: "col" }, h)),
        ),
      ),
      el(
        "tbody",
        {},
        ...this.entries.map((entry) =>
          el(
            "tr",
            { "data-testid": "local-api-log-row" },
            el("td", {}, clock(entry.atMs)),
            el("td", { title: entry.client }, entry.client === "" ? "—" : entry.client),
            el(
              "td",
              {},
              `${entry.method} ${entry.path}`,
              entry.body === null
                ? ""
                : el(
                    "details",
                    {},
                    el("summary", {}, "Body"),
                    el("pre", { "data-testid": "local-api-log-body" }, entry.body),
                  ),
            ),
            el("td", {}, String(entry.status)),
            el("td", {}, tokens(entry.promptTokens)),
            el("td", {}, tokens(entry.completionTokens)),
            el("td", {}, entry.ms.toLocaleString("en-US")),
          ),
        ),
      ),
    );
  }

  private async run(action: () => Promise<LocalApiStatus>): Promise<void> {
    this.busy = true;
    this.error = null;
    this.render();
    try {
      this.status = await action();
      this.originsDraft = null;
    } catch (error) {
      this.error = errorMessage(error);
    } finally {
      this.busy = false;
      this.render();
    }
  }
}
