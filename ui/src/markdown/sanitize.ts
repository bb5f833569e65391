/**
 * Model output is untrusted: every piece of HTML that markdown-it and KaTeX produce goes through
 * DOMPurify before it reaches the page, and comes out as a DOM fragment, never as a string.
 *
 * The CSP forbids inline style attributes, so the few styles we do keep (KaTeX layout, table
 * column alignment) are filtered here, carried as `data-safe-style`, and applied through CSSOM.
 */
import DOMPurify from "dompurify";

const purify = DOMPurify(window);

const FORBID_TAGS = [
  "style",
  "link",
  "meta",
  "base",
  "form",
  "input",
  "button",
  "textarea",
  "select",
  "option",
  "iframe",
  "frame",
  "object",
  "embed",
  "img",
  "picture",
  "source",
  "video",
  "audio",
  "track",
  "image",
  "use",
  "foreignObject",
  "animate",
  "set",
  "template",
  "dialog",
];

const CONFIG = {
  RETURN_DOM_FRAGMENT: true as const,
  FORBID_TAGS,
  FORBID_ATTR: ["id", "name", "target", "srcset", "action", "formaction", "xlink:href", "tabindex"],
  ALLOW_DATA_ATTR: false,
  // KaTeX's MathML keeps the TeX source for screen readers and copying.
  ADD_TAGS: ["semantics", "annotation"],
  ADD_ATTR: ["encoding"],
  ALLOWED_URI_REGEXP: /^(?:https?|mailto):/i,
};

/** Properties KaTeX sets inline for layout. */
const KATEX_PROPERTIES = new Set([
  "height",
  "width",
  "min-width",
  "max-width",
  "vertical-align",
  "top",
  "bottom",
  "left",
  "right",
  "position",
  "margin",
  "margin-top",
  "margin-right",
  "margin-bottom",
  "margin-left",
  "padding-left",
  "padding-right",
  "border-style",
  "border-width",
  "border-color",
  "border-top-width",
  "border-right-width",
  "border-bottom-width",
  "border-left-width",
  "border-right-style",
  "border-bottom-style",
  "color",
  "background-color",
  "text-shadow",
]);

const SAFE_VALUE = /^[\w\s.,%#()+\-*/]*$/;
const UNSAFE_VALUE = /url|expression|image|attr|var|env|@|\\/i;

function safeDeclarations(element: Element, css: string): string {
  const inMath = element.closest(".katex, .katex-display") !== null;
  const inCell = element.tagName === "TH" || element.tagName === "TD";
  const kept: string[] = [];
  for (const declaration of css.split(";")) {
    const colon = declaration.indexOf(":");
    if (colon < 0) continue;
    const property = declaration.slice(0, colon).trim().toLowerCase();
    const value = declaration.slice(colon + 1).trim();
    if (!value || !SAFE_VALUE.test(value) || UNSAFE_VALUE.test(value)) continue;
    const allowed =
      (inMath && KATEX_PROPERTIES.has(property)) ||
      (inCell && property === "text-align" && /^(left|right|center)$/.test(value));
    if (allowed) kept.push(`${property}:${value}`);
  }
  return kept.join(";");
}

purify.addHook("afterSanitizeAttributes", (node) => {
  if (!(node instanceof Element) || !node.hasAttribute("style")) return;
  const safe = safeDeclarations(node, node.getAttribute("style") ?? "");
  node.removeAttribute("style");
  if (safe) node.setAttribute("data-safe-style", safe);
});

/** Sanitizes HTML into a fragment of inert DOM: no scripts, handlers, styles or unsafe links. */
export function sanitizeToFragment(html: string): DocumentFragment {
  if (!purify.isSupported) {
    // Without a DOM DOMPurify can trust, show the markup as text rather than risk it.
    const fragment = document.createDocumentFragment();
    fragment.append(html);
    return fragment;
  }
  const fragment = purify.sanitize(html, CONFIG);
  for (const element of fragment.querySelectorAll<HTMLElement | SVGElement>("[data-safe-style]")) {
    for (const declaration of (element.getAttribute("data-safe-style") ?? "").split(";")) {
      const colon = declaration.indexOf(":");
      if (colon > 0) element.style.setProperty(declaration.slice(0, colon), declaration.slice(colon + 1));
    }
    element.removeAttribute("data-safe-style");
  }
  finishLinks(fragment);
  return fragment;
}

/** Keeps only http(s) links, marked external; anything else becomes its plain text. */
function finishLinks(fragment: DocumentFragment): void {
  for (const link of fragment.querySelectorAll("a")) {
    const url = externalUrl(link.getAttribute("href"));
    if (!url) {
      link.replaceWith(...link.childNodes);
      continue;
    }
    link.setAttribute("href", url);
    link.setAttribute("rel", "noopener noreferrer");
    link.setAttribute("title", url);
    link.classList.add("external-link");
  }
}

/** The URL when it is absolute http or https, else null. */
export function externalUrl(href: string | null): string | null {
  if (!href) return null;
  try {
    const url = new URL(href);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}
