/** A tiny element builder. Strings always become text nodes, never HTML. */

type Attributes = Record<string, string | boolean | undefined>;
export type Child = Node | string | null | undefined | false;

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Attributes = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === false) continue;
    element.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child);
  }
  return element;
}

/** A button that shows only an icon: the label goes to assistive tech and the tooltip. */
export function iconButton(label: string, icon: SVGElement, attributes: Attributes = {}): HTMLButtonElement {
  return el("button", { type: "button", class: "icon-button", "aria-label": label, title: label, ...attributes }, icon);
}

let nextId = 0;

/** A document-unique id for label/description wiring. */
export function uniqueId(prefix: string): string {
  nextId += 1;
  return `${prefix}-${nextId}`;
}

/** A checkbox with its label beside it (the label names the box by its `id`), and whatever
 * follows below it (help, an error). */
export function checkboxField(input: HTMLInputElement, label: string, ...below: Child[]): HTMLDivElement {
  return el(
    "div",
    { class: "field checkbox" },
    el("div", { class: "field-row" }, input, el("label", { for: input.id }, label)),
    ...below,
  );
}
