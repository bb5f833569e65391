/**
 * Settings → Tools: the MCP servers the user added (docs/TOOLS.md). Each server's state
 * (starting, ready with N tools, failed with the tail of its stderr and what to do), a switch to
 * start or stop it (the first start shows the exact command line and asks to confirm), its tools
 * with a switch each, and add / edit / import. Events update the rows in place: nothing a person
 * may be reaching for is rebuilt.
 */
import { errorMessage } from "../api";
import type { McpImported } from "../bindings/McpImported";
import type { ServerConfig } from "../bindings/ServerConfig";
import type { ServerState } from "../bindings/ServerState";
import type { ServerView } from "../bindings/ServerView";
import type { ToolView } from "../bindings/ToolView";
import { checkboxField, el, uniqueId } from "../dom";

export interface ToolsPanelHandlers {
  list(): Promise<ServerView[]>;
  tools(name: string): Promise<ToolView[]>;
  /** The first start needs the command line the user confirmed. */
  setEnabled(name: string, enabled: boolean, confirmedCommandLine: string | null): Promise<ServerView>;
  setToolEnabled(server: string, tool: string, enabled: boolean): Promise<void>;
  save(config: ServerConfig, previous: string | null): Promise<ServerView>;
  remove(name: string): Promise<void>;
  /** Asks for a file; null when the user cancelled. */
  importFile(): Promise<McpImported | null>;
}

/** What a server's row says about its state. */
export function describeState(state: ServerState): string {
  switch (state.state) {
    case "stopped":
      return "Off";
    case "starting":
      return "Starting…";
    case "ready":
      return `Ready: ${state.tools} ${state.tools === 1 ? "tool" : "tools"}`;
    case "failed":
      return `Failed: ${state.error}`;
  }
}

/** The form's text as a server; throws a message in words when a field is not usable. */
export function parseServer(fields: {
  name: string;
  command: string;
  args: string;
  env: string;
  url: string;
}): ServerConfig {
  const name = fields.name.trim();
  if (name === "") throw new Error("Give the server a name.");
  if (fields.url.trim() !== "") {
    return { name, enabled: false, transport: { kind: "http", url: fields.url.trim() } };
  }
  const command = fields.command.trim();
  if (command === "") throw new Error("Give the command that starts the server (or its URL).");
  const args = fields.args.split("\n").filter((line) => line.trim() !== "");
  const env: Record<string, string> = {};
  for (const line of fields.env.split("\n")) {
    if (line.trim() === "") continue;
    const at = line.indexOf("=");
    if (at <= 0) throw new Error(`Write each environment variable as NAME=value: "${line.trim()}" is not.`);
    env[line.slice(0, at).trim()] = line.slice(at + 1);
  }
  return { name, enabled: false, transport: { kind: "stdio", command, args, env, cwd: null } };
}

interface Row {
  element: HTMLElement;
  toggle: HTMLInputElement;
  state: HTMLElement;
  detail: HTMLPreElement;
  hint: HTMLElement;
  commandLine: HTMLElement;
  confirm: HTMLElement;
  tools: HTMLElement;
  toolRows: Map<string, { element: HTMLElement; toggle: HTMLInputElement; description: HTMLElement }>;
  view: ServerView;
}

export class ToolsPanel {
  readonly element = el("section", {
    class: "model-panel tools-panel",
    "data-testid": "tools-panel",
    "aria-labelledby": "tools-panel-title",
  });
  private readonly list = el("div", { class: "tools-servers", "data-testid": "tools-servers" });
  private readonly message = el("p", { class: "panel-note", "data-testid": "tools-message", role: "status" });
  private readonly rows = new Map<string, Row>();
  private readonly form = el("form", { class: "tools-form", "data-testid": "tools-form", hidden: "" });
  private readonly inputs = {
    name: el("input", { type: "text", "data-testid": "tools-form-name", "aria-label": "Name" }),
    command: el("input", { type: "text", "data-testid": "tools-form-command", "aria-label": "Command" }),
    args: el("textarea", { rows: "3", "data-testid": "tools-form-args", "aria-label": "Arguments, one a line" }),
    env: el("textarea", { rows: "2", "data-testid": "tools-form-env", "aria-label": "Environment, NAME=value a line" }),
    url: el("input", { type: "text", "data-testid": "tools-form-url", "aria-label": "Or a loopback URL" }),
  };
  private editing: string | null = null;

  constructor(private readonly handlers: ToolsPanelHandlers) {
    const add = el("button", { type: "button", "data-testid": "tools-add" }, "Add server…");
    add.addEventListener("click", () => this.openForm(null));
    const importButton = el("button", { type: "button", "data-testid": "tools-import" }, "Import…");
    importButton.addEventListener("click", () => void this.importFile());
    const save = el("button", { type: "submit", "data-testid": "tools-form-save" }, "Save");
    const cancel = el("button", { type: "button", "data-testid": "tools-form-cancel" }, "Cancel");
    cancel.addEventListener("click", () => (this.form.hidden = true));
    this.form.append(
      ...Object.values(this.inputs).map((input) =>
        el("label", { class: "field" }, input.getAttribute("aria-label") ?? "", input),
      ),
      el("div", { class: "dialog-actions" }, cancel, save),
    );
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      void this.submit();
    });
    this.element.append(
      el("h2", { id: "tools-panel-title" }, "Tools"),
      el(
        "p",
        { class: "panel-note" },
        "MCP servers give the model tools. A server runs only once you switch it on; its command line is shown first.",
      ),
      this.list,
      this.message,
      el("div", { class: "dialog-actions" }, importButton, add),
      this.form,
    );
  }

  /** Reads every server again; rows already shown are updated, not rebuilt. */
  async refresh(): Promise<void> {
    try {
      const views = await this.handlers.list();
      const names = new Set(views.map((view) => view.config.name));
      for (const [name, row] of this.rows) {
        if (!names.has(name)) {
          row.element.remove();
          this.rows.delete(name);
        }
      }
      for (const view of views) this.show(view);
    } catch (error) {
      this.say(`Could not read the servers: ${errorMessage(error)}`);
    }
  }

  /** A server's state changed (an event, or an answer): its row follows in place. */
  show(view: ServerView): void {
    const name = view.config.name;
    const row = this.rows.get(name) ?? this.addRow(view);
    const wasReady = row.view.state.state === "ready" && row.toolRows.size > 0;
    row.view = view;
    row.toggle.checked = view.config.enabled;
    row.state.textContent = describeState(view.state);
    row.state.dataset.state = view.state.state;
    row.commandLine.textContent = view.commandLine;
    const failed = view.state.state === "failed" ? view.state : null;
    row.detail.hidden = !failed?.stderr_tail;
    row.detail.textContent = failed?.stderr_tail ?? "";
    row.hint.hidden = !failed;
    row.hint.textContent = failed?.hint ?? "";
    if (view.state.state === "ready") {
      if (!wasReady || row.toolRows.size !== view.state.tools) void this.loadTools(row);
    } else {
      for (const tool of row.toolRows.values()) tool.element.remove();
      row.toolRows.clear();
    }
  }

  private addRow(view: ServerView): Row {
    const name = view.config.name;
    const toggle = el("input", {
      type: "checkbox",
      id: uniqueId("tools-server"),
      "data-testid": "tools-server-toggle",
    });
    const state = el("span", { class: "tools-state", "data-testid": "tools-server-state" });
    const detail = el("pre", { class: "tools-stderr", "data-testid": "tools-server-stderr", hidden: "" });
    const hint = el("p", { class: "panel-note", "data-testid": "tools-server-hint", hidden: "" });
    const commandLine = el("code", { "data-testid": "tools-server-command" });
    const start = el("button", { type: "button", "data-testid": "tools-confirm-start" }, "Start it");
    const keepOff = el("button", { type: "button", "data-testid": "tools-confirm-cancel" }, "Cancel");
    const confirm = el(
      "div",
      { class: "tools-confirm", "data-testid": "tools-confirm", role: "alertdialog", hidden: "" },
      el("p", {}, "This runs the command below on your computer, with your permissions:"),
      el("code", { "data-testid": "tools-confirm-command" }),
      el("div", { class: "dialog-actions" }, keepOff, start),
    );
    const edit = el("button", { type: "button", "data-testid": "tools-server-edit" }, "Edit…");
    const remove = el("button", { type: "button", "data-testid": "tools-server-remove" }, "Remove");
    const tools = el("ul", { class: "tools-list", "data-testid": "tools-list" });
    const element = el(
      "div",
      { class: "tools-server", "data-testid": "tools-server", "data-server": name },
      checkboxField(toggle, name, state),
      commandLine,
      detail,
      hint,
      confirm,
      tools,
      el("div", { class: "dialog-actions" }, edit, remove),
    );
    const row: Row = { element, toggle, state, detail, hint, commandLine, confirm, tools, toolRows: new Map(), view };
    toggle.addEventListener("change", () => {
      const on = toggle.checked;
      if (on && !row.view.confirmed) {
        // Not started until the user has seen the exact command line and agreed.
        toggle.checked = false;
        const shown = confirm.querySelector("code");
        if (shown) shown.textContent = row.view.commandLine;
        confirm.hidden = false;
        start.focus();
        return;
      }
      void this.setEnabled(row, on, null);
    });
    start.addEventListener("click", () => {
      confirm.hidden = true;
      void this.setEnabled(row, true, row.view.commandLine);
    });
    keepOff.addEventListener("click", () => {
      confirm.hidden = true;
      toggle.focus();
    });
    edit.addEventListener("click", () => this.openForm(row.view));
    remove.addEventListener("click", () => void this.remove(row.view.config.name));
    this.rows.set(name, row);
    this.list.append(element);
    return row;
  }

  private async setEnabled(row: Row, on: boolean, confirmed: string | null): Promise<void> {
    try {
      this.show(await this.handlers.setEnabled(row.view.config.name, on, confirmed));
      this.say("");
    } catch (error) {
      row.toggle.checked = row.view.config.enabled;
      this.say(errorMessage(error));
    }
  }

  private async loadTools(row: Row): Promise<void> {
    const server = row.view.config.name;
    let tools: ToolView[];
    try {
      tools = await this.handlers.tools(server);
    } catch (error) {
      this.say(`Could not read the tools of ${server}: ${errorMessage(error)}`);
      return;
    }
    const names = new Set(tools.map((tool) => tool.name));
    for (const [name, tool] of row.toolRows) {
      if (!names.has(name)) {
        tool.element.remove();
        row.toolRows.delete(name);
      }
    }
    for (const tool of tools) {
      let shown = row.toolRows.get(tool.name);
      if (!shown) {
        const toggle = el("input", {
          type: "checkbox",
          id: uniqueId("tools-tool"),
          "data-testid": "tools-tool-toggle",
        });
        // The server's text: shown as text, never as markup.
        const description = el("p", { class: "panel-note", "data-testid": "tools-tool-description" });
        const element = el(
          "li",
          { "data-testid": "tools-tool", "data-tool": tool.name },
          checkboxField(toggle, tool.name, description),
        );
        toggle.addEventListener("change", () => {
          const on = toggle.checked;
          this.handlers.setToolEnabled(server, tool.name, on).catch((error: unknown) => {
            toggle.checked = !on;
            this.say(errorMessage(error));
          });
        });
        shown = { element, toggle, description };
        row.toolRows.set(tool.name, shown);
        row.tools.append(element);
      }
      shown.toggle.checked = tool.enabled;
      shown.description.textContent = [tool.description, parameters(tool.inputSchema)].filter(Boolean).join(" ");
    }
  }

  private openForm(view: ServerView | null): void {
    this.editing = view?.config.name ?? null;
    const transport = view?.config.transport;
    this.inputs.name.value = view?.config.name ?? "";
    this.inputs.command.value = transport?.kind === "stdio" ? transport.command : "";
    this.inputs.args.value = transport?.kind === "stdio" ? transport.args.join("\n") : "";
    this.inputs.env.value =
      transport?.kind === "stdio"
        ? Object.entries(transport.env)
            .map(([key, value]) => `${key}=${value}`)
            .join("\n")
        : "";
    this.inputs.url.value = transport?.kind === "http" ? transport.url : "";
    this.form.hidden = false;
    this.inputs.name.focus();
  }

  private async submit(): Promise<void> {
    try {
      const config = parseServer({
        name: this.inputs.name.value,
        command: this.inputs.command.value,
        args: this.inputs.args.value,
        env: this.inputs.env.value,
        url: this.inputs.url.value,
      });
      const previous = this.editing;
      if (previous !== null) {
        const old = this.rows.get(previous);
        config.enabled = old?.view.config.enabled ?? false;
        if (previous !== config.name && old) {
          old.element.remove();
          this.rows.delete(previous);
        }
      }
      this.show(await this.handlers.save(config, previous));
      this.form.hidden = true;
      this.say("");
    } catch (error) {
      this.say(errorMessage(error));
    }
  }

  private async remove(name: string): Promise<void> {
    try {
      await this.handlers.remove(name);
      this.rows.get(name)?.element.remove();
      this.rows.delete(name);
      this.say("");
    } catch (error) {
      this.say(errorMessage(error));
    }
  }

  private async importFile(): Promise<void> {
    try {
      const imported = await this.handlers.importFile();
      if (!imported) return;
      await this.refresh();
      const added = imported.added.length;
      const parts = [`Imported ${added} ${added === 1 ? "server" : "servers"}, each off until you switch it on.`];
      if (imported.skipped.length > 0) parts.push(`Already here, left as they were: ${imported.skipped.join(", ")}.`);
      this.say(parts.join(" "));
    } catch (error) {
      this.say(`Could not import: ${errorMessage(error)}`);
    }
  }

  private say(text: string): void {
    this.message.textContent = text;
  }
}

/** The names of a tool's parameters, from its JSON Schema, in words. */
export function parameters(schema: unknown): string {
  const properties = (schema as { properties?: Record<string, unknown> } | null)?.properties;
  const names = properties && typeof properties === "object" ? Object.keys(properties) : [];
  return names.length === 0 ? "No parameters." : `Parameters: ${names.join(", ")}.`;
}
