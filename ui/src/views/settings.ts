/** The settings dialog: every generation setting, validated before it is saved. */
import { errorMessage, type Settings, type SettingsLimits } from "../api";
import { checkboxField, el, uniqueId } from "../dom";
import type { Value } from "../store";

/** How the image budgets are offered; a budget not named here shows as its number. */
const BUDGET_LABELS: Record<number, string> = {
  70: "70 — fastest",
  280: "280 — balanced",
  1120: "1120 — finest detail",
};

/** How long opening waits for the panels above the form to read their state before it focuses a field. */
const PANELS_WAIT_MS = 1000;

type NumberKey = "temperature" | "topP" | "topK" | "maxTokens" | "contextLength";

const CONTEXT_HELP = "Tokens of conversation the model keeps in view. Longer uses more memory.";

/** A number setting as the form shows it; its limits come from the backend (`SettingsLimits`). */
interface NumberField {
  key: NumberKey;
  label: string;
  help: string;
  step: number;
  integer: boolean;
  slider: boolean;
}

const NUMBER_FIELDS: NumberField[] = [
  {
    key: "temperature",
    label: "Temperature",
    help: "Higher is more varied, 0 always picks the likeliest word.",
    step: 0.05,
    integer: false,
    slider: true,
  },
  {
    key: "topP",
    label: "Top P",
    help: "Samples from the smallest set of words whose probabilities add up to this.",
    step: 0.01,
    integer: false,
    slider: true,
  },
  {
    key: "topK",
    label: "Top K",
    help: "Samples from this many likeliest words; 0 turns the limit off.",
    step: 1,
    integer: true,
    slider: false,
  },
  {
    key: "maxTokens",
    label: "Maximum answer length",
    help: "Tokens per answer (a token is about ¾ of a word).",
    step: 1,
    integer: true,
    slider: false,
  },
  {
    key: "contextLength",
    label: "Context length",
    help: CONTEXT_HELP,
    step: 1,
    integer: true,
    slider: false,
  },
];

/**
 * The context length's help, with where its value comes from: "8,192 was chosen for this Mac's
 * 8 GB; change it here." until the user sets one.
 */
export function contextLengthHelp(settings: Settings): string {
  const machine = settings.machineContext;
  if (!machine) return CONTEXT_HELP;
  const device = machine.mac ? "Mac" : "computer";
  const tokens = machine.tokens.toLocaleString("en-US");
  if (settings.contextLengthChosen) return `${CONTEXT_HELP} Your choice; this ${device}'s default is ${tokens}.`;
  const memory = machine.memoryBytes ? `${Math.round(machine.memoryBytes / 2 ** 30)} GB` : "memory";
  return `${CONTEXT_HELP} ${tokens} was chosen for this ${device}'s ${memory}; change it here.`;
}

/** Field errors in words, keyed by setting; empty when the settings are valid. */
export function validateSettings(settings: Settings, limits: SettingsLimits): Partial<Record<keyof Settings, string>> {
  const errors: Partial<Record<keyof Settings, string>> = {};
  for (const field of NUMBER_FIELDS) {
    const value = settings[field.key];
    const { min, max } = limits[field.key];
    if (!Number.isFinite(value)) errors[field.key] = `${field.label} must be a number.`;
    else if (field.integer && !Number.isInteger(value)) errors[field.key] = `${field.label} must be a whole number.`;
    else if (value < min || value > max)
      errors[field.key] =
        `${field.label} must be between ${min.toLocaleString("en-US")} and ${max.toLocaleString("en-US")}.`;
  }
  if (!errors.maxTokens && !errors.contextLength && settings.maxTokens > settings.contextLength)
    errors.maxTokens = "The maximum answer length cannot exceed the context length.";
  const promptChars = [...settings.systemPrompt].length;
  if (promptChars > limits.systemPromptChars)
    errors.systemPrompt = `The system prompt is ${promptChars.toLocaleString("en-US")} characters; it can be at most ${limits.systemPromptChars.toLocaleString("en-US")}.`;
  if (!limits.imageTokenBudgets.includes(settings.imageTokenBudget))
    errors.imageTokenBudget = `Image detail must be one of ${limits.imageTokenBudgets.join(", ")}.`;
  return errors;
}

export interface SettingsDialogHandlers {
  load(): Promise<Settings>;
  save(settings: Settings): Promise<Settings>;
}

export class SettingsDialog {
  readonly element: HTMLDialogElement;
  private readonly form = el("form", { class: "settings-form", id: uniqueId("settings-form"), novalidate: true });
  private readonly formError = el("p", { class: "form-error", role: "alert", hidden: true });
  private readonly inputs = new Map<keyof Settings, HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement>();
  private readonly errors = new Map<keyof Settings, HTMLElement>();
  private readonly saveButton = el(
    "button",
    { type: "submit", class: "primary", "data-testid": "settings-save" },
    "Save",
  );
  private opener: HTMLElement | null = null;
  /** The settings as read; whether the context length was typed since (then it is the user's). */
  private loaded: Settings | null = null;
  private contextTyped = false;
  private contextHelp: HTMLElement | null = null;
  private readonly contextDefault = el(
    "button",
    { type: "button", class: "link", hidden: true, "data-testid": "setting-contextLength-default" },
    "Use the default",
  );

  constructor(
    private readonly handlers: SettingsDialogHandlers,
    private readonly limits: Value<SettingsLimits | null>,
    /** Shown above the generation settings (Settings → Model); `refresh` settles once it has read its state. */
    private readonly modelPanel: { element: HTMLElement; refresh(): Promise<unknown> | void } | null = null,
  ) {
    const cancel = el("button", { type: "button", "data-testid": "settings-cancel" }, "Cancel");
    cancel.addEventListener("click", () => this.close());
    this.form.append(
      this.formError,
      this.textField(
        "systemPrompt",
        "System prompt",
        "Instructions the model reads before every chat that has no prompt of its own (set one from a chat's header).",
      ),
      ...NUMBER_FIELDS.map((field) => this.numberField(field)),
      this.imageBudgetField(),
      this.thinkingField(),
    );
    // An error shown for a field clears (or follows) as the value is fixed; no new ones while typing.
    this.form.addEventListener("input", () => this.revalidate());
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      void this.submit();
    });
    // One rule (docs/SETTINGS.md): the sections above act at once and say where they stand;
    // the answer settings below apply together on Save. The footer stays in view, outside the
    // part that scrolls, and says so.
    this.saveButton.setAttribute("form", this.form.id);
    this.element = el(
      "dialog",
      { class: "settings-dialog", "data-testid": "settings-dialog", "aria-labelledby": "settings-title" },
      el("h1", { id: "settings-title" }, "Settings"),
      el(
        "div",
        { class: "settings-body", "data-testid": "settings-body" },
        this.modelPanel?.element ?? "",
        el(
          "section",
          { class: "settings-answers", "aria-labelledby": "settings-answers-title" },
          el("h2", { id: "settings-answers-title" }, "Answers"),
          this.form,
        ),
      ),
      el(
        "div",
        { class: "dialog-actions settings-footer", "data-testid": "settings-footer" },
        el(
          "p",
          { class: "settings-rule", "data-testid": "settings-rule" },
          "Model, Faster answers, Local API, Quick ask and Tools act at once. Save applies the answer settings.",
        ),
        cancel,
        this.saveButton,
      ),
    );
    this.element.addEventListener("close", () => this.opener?.focus());
    this.showLimits(limits.get());
    limits.subscribe((value) => this.showLimits(value));
  }

  get isOpen(): boolean {
    return this.element.open;
  }

  /** Opens the dialog with `focus` focused (the system prompt unless another field is asked for). */
  async open(focus: "systemPrompt" | NumberKey = "systemPrompt"): Promise<void> {
    if (this.element.open) return;
    this.opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    this.showError(null);
    this.clearFieldErrors();
    const panels = Promise.resolve(this.modelPanel?.refresh()).catch(() => {});
    this.saveButton.disabled = true;
    this.element.showModal();
    try {
      this.fill(await this.handlers.load());
      this.saveButton.disabled = false;
    } catch (error) {
      this.showError(`Could not read the settings: ${errorMessage(error)}`);
    }
    // The panels above the form grow as they read their state: scrolled before that, the field
    // would be pushed out of view. A panel slow to answer does not hold the focus back for long.
    await Promise.race([panels, new Promise((resolve) => setTimeout(resolve, PANELS_WAIT_MS))]);
    if (!this.element.open) return;
    const field = this.inputs.get(focus);
    field?.focus({ preventScroll: true });
    field?.scrollIntoView?.({ block: "center" });
  }

  close(): void {
    if (this.element.open) this.element.close();
  }

  private fill(settings: Settings): void {
    this.loaded = settings;
    this.contextTyped = false;
    this.contextHelp?.replaceChildren(contextLengthHelp(settings));
    this.contextDefault.hidden = !(settings.contextLengthChosen && settings.machineContext);
    for (const [key, input] of this.inputs) {
      const value = settings[key];
      if (typeof value === "object") continue; // the machine's context: shown in words, not a field
      if (input instanceof HTMLInputElement && input.type === "checkbox") input.checked = Boolean(value);
      else input.value = String(value);
      if (input instanceof HTMLInputElement) this.syncSlider(input);
    }
  }

  private read(): Settings {
    const value = (key: keyof Settings) => this.inputs.get(key)?.value ?? "";
    const number = (key: keyof Settings) => (value(key).trim() === "" ? Number.NaN : Number(value(key)));
    const thinking = this.inputs.get("thinking");
    return {
      systemPrompt: value("systemPrompt"),
      temperature: number("temperature"),
      topP: number("topP"),
      topK: number("topK"),
      maxTokens: number("maxTokens"),
      contextLength: number("contextLength"),
      thinking: thinking instanceof HTMLInputElement ? thinking.checked : false,
      imageTokenBudget: number("imageTokenBudget"),
      contextLengthChosen: this.contextTyped || (this.loaded?.contextLengthChosen ?? false),
      machineContext: this.loaded?.machineContext ?? null,
    };
  }

  private async submit(): Promise<void> {
    const settings = this.read();
    const limits = this.limits.get();
    // Without limits yet the backend's own check (the same limits) still refuses bad values.
    const errors = limits ? validateSettings(settings, limits) : {};
    this.clearFieldErrors();
    const invalid = Object.keys(errors) as (keyof Settings)[];
    if (invalid.length > 0) {
      for (const key of invalid) this.showFieldError(key, errors[key] ?? "");
      this.inputs.get(invalid[0] as keyof Settings)?.focus();
      return;
    }
    this.saveButton.disabled = true;
    try {
      this.fill(await this.handlers.save(settings));
      this.close();
    } catch (error) {
      this.showError(errorMessage(error));
    } finally {
      this.saveButton.disabled = false;
    }
  }

  private revalidate(): void {
    this.showError(null);
    const limits = this.limits.get();
    if (!limits) return;
    const errors = validateSettings(this.read(), limits);
    for (const [key, error] of this.errors) {
      if (error.hidden) continue;
      const message = errors[key];
      if (message) this.showFieldError(key, message);
      else {
        error.textContent = "";
        error.hidden = true;
        this.inputs.get(key)?.removeAttribute("aria-invalid");
      }
    }
  }

  private showError(message: string | null): void {
    this.formError.hidden = message === null;
    this.formError.textContent = message ?? "";
  }

  private clearFieldErrors(): void {
    for (const [key, error] of this.errors) {
      error.textContent = "";
      error.hidden = true;
      this.inputs.get(key)?.removeAttribute("aria-invalid");
    }
  }

  private showFieldError(key: keyof Settings, message: string): void {
    const error = this.errors.get(key);
    if (!error) return;
    error.textContent = message;
    error.hidden = false;
    this.inputs.get(key)?.setAttribute("aria-invalid", "true");
  }

  private describe(
    key: keyof Settings,
    help: string,
  ): { helpId: string; helpEl: HTMLElement; errorEl: HTMLElement; errorId: string } {
    const helpId = uniqueId(`help-${key}`);
    const errorId = uniqueId(`error-${key}`);
    const errorEl = el("p", { class: "field-error", id: errorId, hidden: true });
    this.errors.set(key, errorEl);
    return { helpId, errorId, errorEl, helpEl: el("p", { class: "field-help", id: helpId }, help) };
  }

  private textField(key: "systemPrompt", label: string, help: string): HTMLElement {
    const id = uniqueId(key);
    const { helpId, errorId, helpEl, errorEl } = this.describe(key, help);
    const input = el("textarea", {
      id,
      name: key,
      rows: "4",
      "aria-describedby": `${helpId} ${errorId}`,
      "data-testid": `setting-${key}`,
    });
    this.inputs.set(key, input);
    return el("div", { class: "field wide" }, el("label", { for: id }, label), input, helpEl, errorEl);
  }

  private numberField(field: NumberField): HTMLElement {
    const id = uniqueId(field.key);
    const { helpId, errorId, helpEl, errorEl } = this.describe(field.key, field.help);
    const input = el("input", {
      id,
      name: field.key,
      type: "number",
      inputmode: field.integer ? "numeric" : "decimal",
      step: String(field.step),
      "aria-describedby": `${helpId} ${errorId}`,
      "data-testid": `setting-${field.key}`,
    });
    this.inputs.set(field.key, input);
    const row = el("div", { class: "field-row" });
    if (field.key === "contextLength") this.contextField(input, helpEl);
    if (field.slider) {
      const slider = el("input", {
        type: "range",
        class: "field-slider",
        step: String(field.step),
        "aria-label": field.label,
        tabindex: "-1",
      });
      slider.addEventListener("input", () => {
        input.value = slider.value;
      });
      input.addEventListener("input", () => this.syncSlider(input));
      row.append(slider);
    }
    row.append(input);
    const reset = field.key === "contextLength" ? this.contextDefault : "";
    return el("div", { class: "field" }, el("label", { for: id }, field.label), row, helpEl, reset, errorEl);
  }

  /** The context length typed is the user's; "Use the default" goes back to the machine's. */
  private contextField(input: HTMLInputElement, help: HTMLElement): void {
    input.addEventListener("input", () => (this.contextTyped = true));
    this.contextDefault.addEventListener("click", () => {
      const machine = this.loaded?.machineContext;
      if (!this.loaded || !machine) return;
      this.loaded = { ...this.loaded, contextLengthChosen: false };
      this.contextTyped = false;
      input.value = String(machine.tokens);
      help.replaceChildren(contextLengthHelp({ ...this.loaded, contextLength: machine.tokens }));
      this.contextDefault.hidden = true;
      this.revalidate();
    });
    this.contextHelp = help;
  }

  /** Puts the backend's limits on the fields: each number's range, the image budgets offered. */
  private showLimits(limits: SettingsLimits | null): void {
    if (!limits) return;
    for (const field of NUMBER_FIELDS) {
      const { min, max } = limits[field.key];
      const input = this.inputs.get(field.key);
      const slider = input?.parentElement?.querySelector(".field-slider");
      for (const element of [input, slider]) {
        element?.setAttribute("min", String(min));
        element?.setAttribute("max", String(max));
      }
    }
    const select = this.inputs.get("imageTokenBudget");
    if (!(select instanceof HTMLSelectElement)) return;
    const chosen = select.value;
    select.replaceChildren(
      ...limits.imageTokenBudgets.map((budget) =>
        el("option", { value: String(budget) }, BUDGET_LABELS[budget] ?? String(budget)),
      ),
    );
    if (chosen) select.value = chosen;
  }

  private syncSlider(input: HTMLInputElement): void {
    const slider = input.parentElement?.querySelector<HTMLInputElement>(".field-slider");
    if (slider && input.value !== "") slider.value = input.value;
  }

  private imageBudgetField(): HTMLElement {
    const id = uniqueId("imageTokenBudget");
    const { helpId, errorId, helpEl, errorEl } = this.describe(
      "imageTokenBudget",
      "Tokens per image. More sees finer detail but takes longer and fills the context sooner.",
    );
    const select = el("select", {
      id,
      name: "imageTokenBudget",
      "aria-describedby": `${helpId} ${errorId}`,
      "data-testid": "setting-imageTokenBudget",
    });
    this.inputs.set("imageTokenBudget", select);
    return el("div", { class: "field" }, el("label", { for: id }, "Image detail"), select, helpEl, errorEl);
  }

  private thinkingField(): HTMLElement {
    const id = uniqueId("thinking");
    const { helpId, errorId, helpEl, errorEl } = this.describe(
      "thinking",
      "Lets the model reason before answering; slower, often better on hard questions.",
    );
    const input = el("input", {
      id,
      name: "thinking",
      type: "checkbox",
      "aria-describedby": `${helpId} ${errorId}`,
      "data-testid": "setting-thinking",
    });
    this.inputs.set("thinking", input);
    return checkboxField(input, "Thinking", helpEl, errorEl);
  }
}
