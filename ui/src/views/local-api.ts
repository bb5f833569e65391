/**
 * Settings → Local API: the switch that serves the loaded model to other programs on this
 * computer (OpenAI-compatible, 127.0.0.1 only, keyed), its address, port, key, allowed browser
 * origins, ready-to-paste examples, and the live request log.
 *
 * Its elements are built once and updated in place as the status, the log and the activity
 * change: a control is never swapped for a copy while someone reaches for it.
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

/** A whole-number field applied when left: a value its `parse` refuses is said, not sent. */
interface NumberRow {
  input: HTMLInputElement;
  help: HTMLElement;
  element: HTMLElement;
}

export class LocalApiPanel {
  readonly element = el("section", {
    class: "model-panel local-api-panel",
    "data-testid": "local-api-panel",
    "aria-labelledby": "local-api-title",
  });
  private status: LocalApiStatus | null = null;
  /** The status the fields were last filled from: a field changes only when its value did. */
  private filled: LocalApiStatus | null = null;
  private entries: ApiLogEntry[] = [];
  private keyShown = false;
  private busy = false;
  private originsDraft: string | null = null;

  private readonly reading = el("p", { class: "field-help" }, "Reading…");
  private readonly toggle = el("input", {
    type: "checkbox",
    id: "local-api-enabled",
    "data-testid": "local-api-toggle",
    "aria-describedby": "local-api-state",
  });
  private readonly toggleField = checkboxField(this.toggle, "Serve the model to other programs on this computer");
  private readonly state = el("p", {
    class: "field-help",
    id: "local-api-state",
    "data-testid": "local-api-state",
    role: "status",
  });
  private readonly statusError = el("p", {
    class: "form-error",
    role: "alert",
    "data-testid": "local-api-error",
    hidden: true,
  });
  private readonly changeError = el("p", {
    class: "form-error",
    role: "alert",
    "data-testid": "local-api-change-error",
    hidden: true,
  });
  private readonly address = el("code", { "data-testid": "local-api-address" });
  private readonly port = this.numberRow(
    "port",
    "Port",
    (text, status) => parsePort(text, status),
    (port) => this.change({ port }),
  );
  private readonly parallel = this.numberRow(
    "parallel",
    "Answers at once",
    (text, status) => parseParallel(text, status),
    (parallel) => this.change({ parallel }),
  );
  private readonly key = el("input", {
    type: "password",
    readonly: true,
    "data-testid": "local-api-key",
    "aria-label": "API key",
    class: "local-api-key",
  });
  private readonly keyToggle = el("button", { type: "button", "data-testid": "local-api-key-toggle" }, "Show");
  private readonly regenerate = el("button", { type: "button", "data-testid": "local-api-regenerate" }, "Regenerate");
  private readonly origins = el("textarea", {
    id: "local-api-origins",
    "data-testid": "local-api-origins",
    rows: "3",
    placeholder: "https://app.example.com",
    spellcheck: "false",
  });
  private readonly verbose = el("input", {
    type: "checkbox",
    id: "local-api-verbose",
    "data-testid": "local-api-verbose",
  });
  private readonly notice = el("p", {
    class: "field-help",
    role: "status",
    "data-testid": "local-api-notice",
    hidden: true,
  });
  private readonly log = el("div", { class: "local-api-log-slot" });
  private readonly details: HTMLElement;

  constructor(private readonly handlers: LocalApiHandlers) {
    this.toggle.addEventListener("change", () => this.change({ enabled: this.toggle.checked }));
    this.keyToggle.addEventListener("click", () => {
      this.keyShown = !this.keyShown;
      this.update();
    });
    this.regenerate.addEventListener("click", () => void this.run(() => this.handlers.regenerateKey()));
    this.origins.addEventListener("input", () => {
      this.originsDraft = this.origins.value;
    });
    this.origins.addEventListener("change", () => {
      const allowedOrigins = this.origins.value
        .split("\n")
        .map((line) => line.trim())
        .filter((line) => line !== "");
      this.change({ allowedOrigins });
    });
    this.verbose.addEventListener("change", () => this.change({ verbose: this.verbose.checked }));
    this.details = el(
      "div",
      { class: "local-api-details" },
      this.row(
        "Address",
        this.address,
        this.copyButton("address", (status) => status.address),
      ),
      this.port.element,
      this.parallel.element,
      this.row(
        "API key",
        this.key,
        this.keyToggle,
        this.copyButton("key", (status) => status.key ?? ""),
        this.regenerate,
      ),
      el(
        "div",
        { class: "field" },
        el("label", { for: "local-api-origins" }, "Allowed browser origins"),
        this.origins,
        el(
          "p",
          { class: "field-help" },
          "One per line, as scheme://host[:port]. Web pages from other origins get no answers. Empty: none.",
        ),
      ),
      checkboxField(this.verbose, "Keep request bodies in the log (verbose)"),
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
              (status) => snippet(kind, status.address, status.modelId ?? "MODEL", status.key ?? ""),
              `Copy ${kind === "curl" ? "curl" : kind === "python" ? "Python" : "Node"} example`,
            ),
          ),
        ),
      ),
      this.notice,
      this.log,
    );
    this.element.append(
      el("h2", { id: "local-api-title" }, "Local API"),
      this.reading,
      this.toggleField,
      this.state,
      this.statusError,
      this.changeError,
      this.details,
    );
    this.showLog();
    this.update();
  }

  /** Reads where it stands and the log so far (when the dialog opens). */
  refresh(): Promise<void> {
    this.showChangeError(null);
    // Read without marking the panel busy: the controls stay usable while it comes.
    const status = this.handlers.load().then(
      (status) => this.show(status),
      (error) => this.showChangeError(`Could not read the Local API's state: ${errorMessage(error)}`),
    );
    const log = this.handlers.log().then(
      (entries) => {
        this.entries = entries.slice(-LOG_ROWS).reverse();
        this.showLog();
      },
      () => {},
    );
    return Promise.all([status, log]).then(() => {});
  }

  /** Shows where it stands (the backend's `local-api` events). */
  show(status: LocalApiStatus): void {
    this.status = status;
    this.update();
  }

  /** A request ended (the backend's `api-request` events): the log's newest row. */
  logged(entry: ApiLogEntry): void {
    this.entries = [entry, ...this.entries].slice(0, LOG_ROWS);
    this.showLog();
  }

  /** How many answers are asked for now (the backend's `api-activity` events). */
  activity(answering: number): void {
    if (this.status === null) return;
    this.status = { ...this.status, answering };
    this.state.textContent = this.describe(this.status);
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

  /** Brings every element in line with the status, changing only what differs. */
  private update(): void {
    const status = this.status;
    const shown = status !== null;
    this.reading.hidden = shown;
    this.toggleField.hidden = !shown;
    this.state.hidden = !shown;
    this.details.hidden = !status?.enabled;
    for (const control of [this.toggle, this.port.input, this.parallel.input, this.regenerate, this.verbose])
      control.disabled = this.busy;
    this.key.type = this.keyShown ? "text" : "password";
    this.keyToggle.textContent = this.keyShown ? "Hide" : "Show";
    if (status === null) return;
    const before = this.filled;
    this.filled = status;
    this.toggle.checked = status.enabled;
    setText(this.state, this.describe(status));
    this.statusError.hidden = status.error === null;
    setText(this.statusError, status.error ?? "");
    setText(this.address, status.address);
    if (before?.port !== status.port) this.port.input.value = String(status.port);
    this.port.input.min = String(status.minPort);
    this.port.input.max = String(status.maxPort);
    setText(
      this.port.help,
      `${status.defaultPort} unless changed. A port in use by another program is refused, never swapped.`,
    );
    if (before?.parallel !== status.parallel) this.parallel.input.value = String(status.parallel);
    this.parallel.input.max = String(status.maxParallel);
    setText(
      this.parallel.help,
      `${status.defaultParallel} unless changed. Requests beyond it wait for one to end; your own chats never wait. Each answer is the one it would be alone.`,
    );
    if (this.key.value !== (status.key ?? "")) this.key.value = status.key ?? "";
    const origins = this.originsDraft ?? status.allowedOrigins.join("\n");
    if (this.origins.value !== origins) this.origins.value = origins;
    this.verbose.checked = status.verbose;
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

  private showChangeError(message: string | null): void {
    this.changeError.hidden = message === null;
    setText(this.changeError, message ?? "");
  }

  private row(label: string, ...children: (HTMLElement | string)[]): HTMLElement {
    return el(
      "div",
      { class: "field" },
      el("span", { class: "field-label" }, label),
      el("div", { class: "field-row" }, ...children),
    );
  }

  /** Copies what `text` makes of the status shown when it is clicked. */
  private copyButton(what: string, text: (status: LocalApiStatus) => string, label = "Copy"): HTMLElement {
    const button = el("button", { type: "button", "data-testid": `local-api-copy-${what}` }, label);
    button.addEventListener("click", () => {
      if (this.status === null) return;
      void this.handlers.copy(text(this.status)).then((ok) => {
        this.notice.hidden = false;
        this.notice.textContent = ok
          ? `Copied the ${what === "address" || what === "key" ? what : `${what} example`}.`
          : "Could not copy to the clipboard.";
      });
    });
    return button;
  }

  private numberRow(
    id: string,
    label: string,
    parse: (text: string, status: LocalApiStatus) => number | string,
    apply: (value: number) => void,
  ): NumberRow {
    const inputId = `local-api-${id}`;
    const input = el("input", { type: "number", id: inputId, "data-testid": inputId, min: "1", step: "1" });
    input.addEventListener("change", () => {
      if (this.status === null) return;
      const value = parse(input.value, this.status);
      if (typeof value === "string") {
        this.showChangeError(value);
        return;
      }
      apply(value);
    });
    const help = el("p", { class: "field-help" });
    return { input, help, element: el("div", { class: "field" }, el("label", { for: inputId }, label), input, help) };
  }

  /** The log's rows; only the log is redrawn as requests come, never the controls. */
  private showLog(): void {
    if (this.entries.length === 0) {
      this.log.replaceChildren(
        el("p", { class: "field-help", "data-testid": "local-api-log-empty" }, "No requests yet."),
      );
      return;
    }
    const tokens = (n: number | null) => (n === null ? "—" : n.toLocaleString("en-US"));
    this.log.replaceChildren(
      el(
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
      ),
    );
  }

  private async run(action: () => Promise<LocalApiStatus>): Promise<void> {
    this.busy = true;
    this.showChangeError(null);
    this.update();
    try {
      this.status = await action();
      this.originsDraft = null;
    } catch (error) {
      this.showChangeError(errorMessage(error));
    } finally {
      this.busy = false;
      this.update();
    }
  }
}

/** Sets an element's text only when it differs (an unchanged status is not announced again). */
function setText(element: HTMLElement, text: string): void {
  if (element.textContent !== text) element.textContent = text;
}
