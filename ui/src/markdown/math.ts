/**
 * Math in model output: a markdown-it plugin that recognises `$…$`, `$$…$$`, `\(…\)` and `\[…\]`,
 * and renders them with KaTeX once it is loaded. KaTeX is imported lazily, only when a parsed
 * message actually contains math; until then the source shows as plain text.
 */
import type { MarkdownIt, StateBlock, StateInline } from "markdown-it";

import { escapeHtml } from "./highlight";

type RenderToString = typeof import("katex").renderToString;

let renderTex: RenderToString | null = null;
let loading: Promise<void> | null = null;

/** Whether KaTeX is loaded and math renders as math. */
export function mathLoaded(): boolean {
  return renderTex !== null;
}

/** Loads KaTeX (once). Resolves when math can render. */
export function loadMath(): Promise<void> {
  loading ??= import("./katex-entry").then((katex) => {
    renderTex = katex.renderToString;
  });
  return loading;
}

/** Key under which rendering reports, in markdown-it's env, that the text had math. */
export const HAS_MATH = "hasMath";

export function mathPlugin(md: MarkdownIt): void {
  md.inline.ruler.before("escape", "math_inline", mathInline);
  md.block.ruler.before("fence", "math_block", mathBlock, {
    alt: ["paragraph", "reference", "blockquote", "list"],
  });
  md.renderer.rules.math_inline = (tokens, idx, _options, env) => {
    const token = tokens[idx];
    if (!token) return "";
    if (env) env[HAS_MATH] = true;
    return renderMath(token.content, token.info === "display", token.markup);
  };
  md.renderer.rules.math_block = (tokens, idx, _options, env) => {
    const token = tokens[idx];
    if (!token) return "";
    if (env) env[HAS_MATH] = true;
    return `<div class="math-display">${renderMath(token.content, true, token.markup)}</div>\n`;
  };
}

function renderMath(tex: string, display: boolean, markup: string): string {
  if (renderTex) {
    try {
      return renderTex(tex, {
        displayMode: display,
        throwOnError: false,
        output: "htmlAndMathml",
        trust: false,
        strict: "ignore",
        maxSize: 50,
        maxExpand: 1000,
      });
    } catch {
      // Fall through to the source text.
    }
  }
  const [open, close] = delimiters(markup);
  return `<span class="math-source">${escapeHtml(open + tex + close)}</span>`;
}

function delimiters(markup: string): [string, string] {
  switch (markup) {
    case "\\(":
      return ["\\(", "\\)"];
    case "\\[":
      return ["\\[", "\\]"];
    case "$$":
      return ["$$", "$$"];
    default:
      return ["$", "$"];
  }
}

const DOLLAR = 0x24;
const BACKSLASH = 0x5c;

function isSpace(code: number): boolean {
  return code === 0x20 || code === 0x09 || code === 0x0a || code === 0x0d;
}

function isDigit(code: number): boolean {
  return code >= 0x30 && code <= 0x39;
}

function pushMath(state: StateInline, content: string, markup: string, display: boolean): void {
  const token = state.push("math_inline", "math", 0);
  token.content = content;
  token.markup = markup;
  token.info = display ? "display" : "";
}

/** `\(…\)`, `\[…\]`, `$$…$$` and `$…$` inside a paragraph. */
function mathInline(state: StateInline, silent: boolean): boolean {
  const { src, pos: start } = state;
  const code = src.charCodeAt(start);

  if (code === BACKSLASH) {
    const opener = src[start + 1];
    if (opener !== "(" && opener !== "[") return false;
    const close = opener === "(" ? "\\)" : "\\]";
    const end = src.indexOf(close, start + 2);
    if (end < 0 || end > state.posMax) return false;
    const content = src.slice(start + 2, end);
    if (!content.trim()) return false;
    if (!silent) pushMath(state, content, `\\${opener}`, opener === "[");
    state.pos = end + 2;
    return true;
  }

  if (code !== DOLLAR) return false;

  if (src.charCodeAt(start + 1) === DOLLAR) {
    const end = src.indexOf("$$", start + 2);
    if (end < 0 || end > state.posMax) return false;
    const content = src.slice(start + 2, end);
    if (!content.trim()) return false;
    if (!silent) pushMath(state, content, "$$", true);
    state.pos = end + 2;
    return true;
  }

  // Pandoc's rule: `$` opens when followed by non-space, closes when preceded by non-space and
  // not followed by a digit, so prices like "$5 and $10" stay text.
  const first = src.charCodeAt(start + 1);
  if (Number.isNaN(first) || isSpace(first)) return false;
  let end = start + 1;
  for (;;) {
    end = src.indexOf("$", end);
    if (end < 0 || end >= state.posMax) return false;
    const before = src.charCodeAt(end - 1);
    const after = src.charCodeAt(end + 1);
    if (before === BACKSLASH) {
      end += 1;
      continue;
    }
    if (!isSpace(before) && !isDigit(after)) break;
    end += 1;
  }
  if (!silent) pushMath(state, src.slice(start + 1, end), "$", false);
  state.pos = end + 1;
  return true;
}

/** `$$` or `\[` at the start of a line, up to the line that ends with `$$` or `\]`. */
function mathBlock(state: StateBlock, startLine: number, endLine: number, silent: boolean): boolean {
  if ((state.sCount[startLine] ?? 0) - state.blkIndent >= 4) return false;
  const start = (state.bMarks[startLine] ?? 0) + (state.tShift[startLine] ?? 0);
  const firstLine = state.src.slice(start, state.eMarks[startLine]);
  let open: string;
  let close: string;
  if (firstLine.startsWith("$$")) [open, close] = ["$$", "$$"];
  else if (firstLine.startsWith("\\[")) [open, close] = ["\\[", "\\]"];
  else return false;

  const rest = firstLine.slice(open.length).trimEnd();
  const lines: string[] = [];
  let last = startLine;
  if (rest.length >= close.length && rest.endsWith(close)) {
    lines.push(rest.slice(0, -close.length));
  } else {
    if (rest.includes(close)) return false; // `$$a$$ more text`: inline math in a paragraph
    lines.push(rest);
    let closed = false;
    for (let line = startLine + 1; line < endLine; line++) {
      const lineStart = (state.bMarks[line] ?? 0) + (state.tShift[line] ?? 0);
      const text = state.src.slice(lineStart, state.eMarks[line]).trimEnd();
      if (text.endsWith(close)) {
        lines.push(text.slice(0, -close.length));
        last = line;
        closed = true;
        break;
      }
      lines.push(text);
    }
    if (!closed) return false;
  }
  const content = lines.join("\n");
  if (!content.trim()) return false;
  if (silent) return true;

  state.line = last + 1;
  const token = state.push("math_block", "math", 0);
  token.block = true;
  token.content = content;
  token.markup = open;
  token.map = [startLine, state.line];
  return true;
}
