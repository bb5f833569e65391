/**
 * A chat's own system prompt: the header button that says which prompt applies, and the small
 * editor that picks a preset or takes the person's own text. A chat without a prompt of its own
 * follows the default in Settings.
 */
import { el, uniqueId } from "../dom";
import { formatInteger } from "../format";

export interface SystemPromptPreset {
  name: string;
  text: string;
}

/** Built-in prompts to start from; "None" sends no system turn at all. */
export const SYSTEM_PROMPT_PRESETS: readonly SystemPromptPreset[] = [
  { name: "None", text: "" },
  {
    name: "Concise",
    text: "Answer briefly and directly. Skip preambles and summaries; use lists only when they help.",
  },
  {
    name: "Explain like a teacher",
    text: "Explain step by step, as a patient teacher would: start from what the reader likely knows, define new terms, and give a small example. End by checking the key idea in one sentence.",
  },
  {
    name: "Code reviewer",
    text: "You are a careful code reviewer. Point out bugs, unclear names, missing error handling and security problems first, then style. Quote the lines you mean and suggest concrete fixes.",
  },
  {
    name: "Translator to English",
    text: "Translate everything the user writes into natural, fluent English, keeping its meaning, tone and formatting. Reply with the translation only.",
  },
];

/** Which prompt a chat uses, in a word for its header button and in a sentence for its tooltip. */
export function describeSystemPrompt(own: string | null, defaultPrompt: string): { label: string; detail: string } {
  if (own === null) {
    return {
      label: "Default",
      detail: defaultPrompt.trim()
        ? `This chat uses the default system prompt from Settings: ${defaultPrompt.trim()}`
        : "This chat uses the default from Settings, which is empty: no system prompt.",
    };
  }
  const preset = SYSTEM_PROMPT_PRESETS.find((p) => p.text === own.trim());
  if (own.trim() === "") return { label: "None", detail: "This chat sends no system prompt." };
  return {
    label: preset?.name ?? "Custom",
    detail: `This chat uses its own system prompt: ${own.trim()}`,
  };
}

/** The value a choice of the editor stands for: `null` follows the default. */
const DEFAULT_CHOICE = "default";
const CUSTOM_CHOICE = "custom";

export interface SystemPromptEditorOptions {
  /** The chat's own prompt, or null when it follows the default. */
  own: string | null;
  defaultPrompt: string;
  /** The longest prompt, in characters (`SettingsLimits.systemPromptChars`). */
  maxChars: number;
  /** Stores the choice; a rejection is shown in the editor, which stays open. */
  save(prompt: string | null): Promise<void>;
}

/**
 * Opens the editor over `host`. Resolves once it closes: with true when a choice was saved,
 * false when it was cancelled (Esc, Cancel).
 */
export function openSystemPromptEditor(host: HTMLElement, options: SystemPromptEditorOptions): Promise<boolean> {
  const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
  const selectId = uniqueId("system-prompt-preset");
  const textId = uniqueId("system-prompt-text");
  const noteId = uniqueId("system-prompt-note");
  const errorId = uniqueId("system-prompt-error");
  const select = el(
    "select",
    { id: selectId, "data-testid": "system-prompt-preset" },
    el("option", { value: DEFAULT_CHOICE }, "Default (from Settings)"),
    ...SYSTEM_PROMPT_PRESETS.map((preset, index) => el("option", { value: String(index) }, preset.name)),
    el("option", { value: CUSTOM_CHOICE }, "Custom"),
  );
  const text = el("textarea", {
    id: textId,
    rows: "6",
    "aria-describedby": `${noteId} ${errorId}`,
    "data-testid": "system-prompt-text",
  });
  const note = el("p", { class: "field-help", id: noteId });
  const error = el("p", { class: "field-error", id: errorId, role: "alert", hidden: true });
  const cancel = el("button", { type: "button", "data-testid": "system-prompt-cancel" }, "Cancel");
  const save = el("button", { type: "submit", class: "primary", "data-testid": "system-prompt-save" }, "Save");
  const form = el(
    "form",
    { class: "system-prompt-form", novalidate: true },
    el("div", { class: "field" }, el("label", { for: selectId }, "Preset"), select),
    el("div", { class: "field" }, el("label", { for: textId }, "Instructions"), text, note, error),
    el("div", { class: "dialog-actions" }, cancel, save),
  );
  const dialog = el(
    "dialog",
    {
      class: "system-prompt-dialog",
      "aria-labelledby": "system-prompt-title",
      "data-testid": "system-prompt-dialog",
    },
    el("h1", { id: "system-prompt-title" }, "System prompt"),
    el("p", { class: "dialog-lead" }, "What the model reads before this chat. A change applies from the next answer."),
    form,
  );

  const own = options.own;
  const presetIndex = own === null ? -1 : SYSTEM_PROMPT_PRESETS.findIndex((p) => p.text === own.trim());
  select.value = own === null ? DEFAULT_CHOICE : presetIndex >= 0 ? String(presetIndex) : CUSTOM_CHOICE;
  text.value = own ?? options.defaultPrompt;
  /** What the person wrote last as their own text, brought back when they pick Custom again. */
  let custom = presetIndex < 0 && own !== null ? own : "";

  const showError = (message: string | null) => {
    error.hidden = message === null;
    error.textContent = message ?? "";
    if (message === null) text.removeAttribute("aria-invalid");
    else text.setAttribute("aria-invalid", "true");
  };
  const tooLong = () => {
    const count = [...text.value].length;
    return count > options.maxChars
      ? `This prompt is ${formatInteger(count)} characters; it can be at most ${formatInteger(options.maxChars)}.`
      : null;
  };
  const refresh = () => {
    const following = select.value === DEFAULT_CHOICE;
    text.readOnly = following;
    note.textContent = following
      ? options.defaultPrompt.trim()
        ? "This chat follows the default prompt from Settings (shown here); change it there for every chat."
        : "This chat follows the default from Settings, which is empty: no system prompt is sent."
      : `This chat uses its own prompt, not the default from Settings. Up to ${formatInteger(options.maxChars)} characters.`;
    showError(tooLong());
  };

  select.addEventListener("change", () => {
    if (select.value === DEFAULT_CHOICE) text.value = options.defaultPrompt;
    else if (select.value === CUSTOM_CHOICE) text.value = custom;
    else text.value = SYSTEM_PROMPT_PRESETS[Number(select.value)]?.text ?? "";
    refresh();
  });
  text.addEventListener("input", () => {
    if (select.value === DEFAULT_CHOICE) return;
    custom = text.value;
    const match = SYSTEM_PROMPT_PRESETS.findIndex((p) => p.text === text.value.trim());
    select.value = match >= 0 ? String(match) : CUSTOM_CHOICE;
    refresh();
  });
  refresh();

  host.append(dialog);
  return new Promise((resolve) => {
    let saved = false;
    dialog.addEventListener("close", () => {
      dialog.remove();
      opener?.focus();
      resolve(saved);
    });
    // Esc closes without saving (the browser does it for a modal dialog; this covers the rest).
    dialog.addEventListener("keydown", (event) => {
      if (event.key !== "Escape") return;
      event.preventDefault();
      event.stopPropagation();
      dialog.close();
    });
    cancel.addEventListener("click", () => dialog.close());
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const problem = tooLong();
      if (problem) {
        showError(problem);
        text.focus();
        return;
      }
      const prompt = select.value === DEFAULT_CHOICE ? null : text.value.trim();
      save.disabled = true;
      options.save(prompt).then(
        () => {
          saved = true;
          dialog.close();
        },
        (reason: unknown) => {
          save.disabled = false;
          showError(reason instanceof Error ? reason.message : String(reason));
        },
      );
    });
    dialog.showModal();
    (select.value === DEFAULT_CHOICE ? select : text).focus();
  });
}
