/**
 * Markdown from the model to inert DOM: markdown-it (raw HTML off, linkify) → highlight.js for
 * code fences → KaTeX for math when loaded → DOMPurify. Code blocks get a copy button.
 */
import MarkdownIt from "markdown-it";

import { copyText } from "../clipboard";
import { el } from "../dom";
import { announce } from "../live";
import { escapeHtml, highlightCode } from "./highlight";
import { HAS_MATH, mathLoaded, mathPlugin } from "./math";
import { externalUrl, sanitizeToFragment } from "./sanitize";

const md = new MarkdownIt({ html: false, linkify: true, typographer: false, breaks: false });
md.linkify.set({ fuzzyEmail: false });
// Only absolute http(s) links become links; everything else stays as the text it was.
md.validateLink = (url) => externalUrl(url.trim()) !== null;
md.use(mathPlugin);

md.renderer.rules.fence = (tokens, idx) => {
  const token = tokens[idx];
  if (!token) return "";
  const label = token.info.trim().split(/\s+/)[0] ?? "";
  return codeBlock(token.content, label);
};
md.renderer.rules.code_block = (tokens, idx) => codeBlock(tokens[idx]?.content ?? "", "");

// Images never load (nothing leaves the machine); they become a link to their address.
md.renderer.rules.image = (tokens, idx, options, env, self) => {
  const token = tokens[idx];
  if (!token) return "";
  const src = token.attrGet("src");
  const alt = self.renderInlineAsText(token.children ?? [], options, env);
  const label = `Image: ${alt || String(src)}`;
  return `<a href="${escapeHtml(String(src))}">${escapeHtml(label)}</a>`;
};

function codeBlock(code: string, label: string): string {
  const { html, language } = highlightCode(code, label);
  const shown = language ?? label.toLowerCase();
  const className = language ? `hljs language-${language}` : "hljs";
  const header = `<div class="code-header"><span class="code-lang">${escapeHtml(shown || "text")}</span></div>`;
  return `<div class="code-block">${header}<pre><code class="${className}">${html}</code></pre></div>\n`;
}

export interface RenderedMarkdown {
  fragment: DocumentFragment;
  /** The text contains math; when KaTeX is not loaded yet it shows as source text. */
  hasMath: boolean;
}

/** Renders untrusted markdown into a sanitized fragment. */
export function renderMarkdown(text: string): RenderedMarkdown {
  const env: Record<string, unknown> = {};
  const html = md.render(text, env);
  const fragment = sanitizeToFragment(html);
  decorate(fragment);
  return { fragment, hasMath: env[HAS_MATH] === true };
}

/** Whether rendering `text` now would show math as source because KaTeX is not loaded yet. */
export function needsMath(rendered: RenderedMarkdown): boolean {
  return rendered.hasMath && !mathLoaded();
}

function decorate(fragment: DocumentFragment): void {
  for (const block of fragment.querySelectorAll<HTMLElement>(".code-block")) {
    const code = block.querySelector("code");
    const label = block.querySelector(".code-lang");
    const language = label?.textContent === "text" ? "" : (label?.textContent ?? "");
    const copy = el(
      "button",
      {
        type: "button",
        class: "code-copy",
        "data-testid": "copy-code",
        "aria-label": language ? `Copy ${language} code` : "Copy code",
      },
      "Copy",
    );
    copy.addEventListener("click", () => {
      void copyText(code?.textContent ?? "").then((ok) => flash(copy, ok ? "Copied" : "Copy failed"));
    });
    label?.after(copy);
  }
  for (const table of fragment.querySelectorAll("table")) {
    const wrap = el("div", { class: "table-wrap" });
    table.replaceWith(wrap);
    wrap.append(table);
  }
}

/** Briefly shows `label` on a button, then restores its text. */
export function flash(button: HTMLElement, label: string): void {
  const original = button.dataset.label ?? button.textContent ?? "";
  button.dataset.label = original;
  button.textContent = label;
  announce(label);
  window.setTimeout(() => {
    button.textContent = original;
  }, 1500);
}
