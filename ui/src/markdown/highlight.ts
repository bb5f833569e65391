/** Syntax highlighting for code fences: highlight.js core with a handful of common languages. */
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import c from "highlight.js/lib/languages/c";
import cpp from "highlight.js/lib/languages/cpp";
import css from "highlight.js/lib/languages/css";
import diff from "highlight.js/lib/languages/diff";
import go from "highlight.js/lib/languages/go";
import java from "highlight.js/lib/languages/java";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import markdown from "highlight.js/lib/languages/markdown";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import shell from "highlight.js/lib/languages/shell";
import sql from "highlight.js/lib/languages/sql";
import swift from "highlight.js/lib/languages/swift";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import yaml from "highlight.js/lib/languages/yaml";

const languages = {
  bash,
  c,
  cpp,
  css,
  diff,
  go,
  java,
  javascript,
  json,
  markdown,
  python,
  rust,
  shell,
  sql,
  swift,
  typescript,
  xml,
  yaml,
};
for (const [name, language] of Object.entries(languages)) hljs.registerLanguage(name, language);

export interface HighlightedCode {
  /** Escaped HTML: highlight.js spans around escaped text, or just the escaped text. */
  html: string;
  /** The canonical language name when it is one we highlight. */
  language: string | null;
}

/** Highlights `code` as `label` (a fence's info word, e.g. "py"); unknown labels stay plain. */
export function highlightCode(code: string, label: string): HighlightedCode {
  const language = label ? hljs.getLanguage(label) : undefined;
  if (!language) return { html: escapeHtml(code), language: null };
  const name = Object.keys(languages).find((key) => hljs.getLanguage(key) === language) ?? null;
  try {
    return { html: hljs.highlight(code, { language: label, ignoreIllegals: true }).value, language: name };
  } catch {
    return { html: escapeHtml(code), language: null };
  }
}

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}
