/**
 * Tooltips the window draws itself. WebKit's native `title` tooltips linger: one stays on screen
 * after the pointer has moved on, over the next control. These go the moment the pointer leaves
 * their element, a button is pressed, a key is typed, or the view scrolls.
 *
 * Any element with a `title` gets one: on the first hover its title moves to `data-tooltip` (so
 * the native tooltip never shows) and, where the element has no label of its own, to its
 * accessible description. Code may keep setting `title`: the next hover moves the new text.
 */

/** How long the pointer rests on an element before its tooltip shows. */
export const TOOLTIP_DELAY_MS = 500;
/** Space between the element and its tooltip, in pixels. */
const GAP = 6;

/** Starts tooltips for `doc`; returns what stops them. */
export function installTooltips(doc: Document = document): () => void {
  const tip = doc.createElement("div");
  tip.className = "tooltip";
  tip.setAttribute("role", "tooltip");
  tip.dataset.testid = "tooltip";
  tip.hidden = true;
  doc.body.append(tip);
  let anchor: HTMLElement | null = null;
  let timer: ReturnType<typeof setTimeout> | undefined;

  const hide = () => {
    clearTimeout(timer);
    timer = undefined;
    anchor = null;
    tip.hidden = true;
  };

  const show = (target: HTMLElement) => {
    const text = target.dataset.tooltip ?? "";
    if (!target.isConnected || text.trim() === "") return hide();
    // A modal dialog is drawn above everything else: its controls' tooltips go inside it.
    const host = target.closest("dialog[open]") ?? doc.body;
    if (tip.parentElement !== host) host.append(tip);
    tip.textContent = text;
    tip.hidden = false;
    const box = target.getBoundingClientRect();
    const width = tip.offsetWidth;
    const height = tip.offsetHeight;
    const view = doc.defaultView;
    const viewWidth = view?.innerWidth ?? 0;
    const viewHeight = view?.innerHeight ?? 0;
    const below = box.bottom + GAP;
    const top = below + height > viewHeight && box.top - GAP - height >= 0 ? box.top - GAP - height : below;
    const centered = box.left + box.width / 2 - width / 2;
    const left = Math.max(4, Math.min(centered, viewWidth - width - 4));
    tip.style.top = `${Math.round(top)}px`;
    tip.style.left = `${Math.round(left)}px`;
  };

  const onOver = (event: Event) => {
    const target =
      event.target instanceof Element ? event.target.closest<HTMLElement>("[title], [data-tooltip]") : null;
    if (!target) return;
    const title = target.getAttribute("title");
    if (title !== null) {
      target.removeAttribute("title");
      target.dataset.tooltip = title;
      const labelled = target.hasAttribute("aria-label") || target.hasAttribute("aria-labelledby");
      if (!labelled && !target.hasAttribute("aria-describedby")) target.setAttribute("aria-description", title);
    }
    if (target === anchor) return;
    hide();
    anchor = target;
    timer = setTimeout(() => {
      if (anchor === target) show(target);
    }, TOOLTIP_DELAY_MS);
  };

  const onOut = (event: Event) => {
    if (!anchor) return;
    const next = (event as MouseEvent).relatedTarget;
    if (next instanceof Node && anchor.contains(next)) return;
    hide();
  };

  const listeners: [EventTarget, string, EventListener, boolean][] = [
    [doc, "mouseover", onOver, true],
    [doc, "mouseout", onOut, true],
    [doc, "pointerdown", hide, true],
    [doc, "keydown", hide, true],
    [doc, "scroll", hide, true],
    [doc, "wheel", hide, true],
  ];
  const view = doc.defaultView;
  if (view) listeners.push([view, "blur", hide, false]);
  for (const [target, type, listener, capture] of listeners) target.addEventListener(type, listener, capture);
  return () => {
    for (const [target, type, listener, capture] of listeners) target.removeEventListener(type, listener, capture);
    hide();
    tip.remove();
  };
}
