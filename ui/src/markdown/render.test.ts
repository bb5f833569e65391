// @vitest-environment jsdom
// DOMPurify is specified against real browsers and jsdom; happy-dom's tree walking skips nodes.
import { describe, expect, it } from "vitest";

import { loadMath } from "./math";
import { renderMarkdown } from "./render";

function render(text: string): HTMLElement {
  const root = document.createElement("div");
  root.append(renderMarkdown(text).fragment);
  return root;
}

describe("markdown", () => {
  it("renders headings, emphasis and lists", () => {
    const root = render("# Title\n\nSome **bold** and *soft* text.\n\n- one\n- two\n\n1. first\n2. second\n");
    expect(root.querySelector("h1")?.textContent).toBe("Title");
    expect(root.querySelector("strong")?.textContent).toBe("bold");
    expect(root.querySelector("em")?.textContent).toBe("soft");
    expect([...root.querySelectorAll("ul > li")].map((li) => li.textContent)).toEqual(["one", "two"]);
    expect([...root.querySelectorAll("ol > li")].map((li) => li.textContent)).toEqual(["first", "second"]);
  });

  it("highlights fenced code by language and adds a copy button", () => {
    const root = render("```python\ndef add(a, b):\n    return a + b\n```\n");
    const code = root.querySelector(".code-block pre code");
    expect(code?.classList.contains("language-python")).toBe(true);
    expect(code?.querySelector(".hljs-keyword")?.textContent).toBe("def");
    expect(code?.textContent).toBe("def add(a, b):\n    return a + b\n");
    expect(root.querySelector(".code-lang")?.textContent).toBe("python");
    expect(root.querySelector('[data-testid="copy-code"]')?.getAttribute("aria-label")).toBe("Copy python code");
  });

  it("resolves language aliases and leaves unknown languages as plain escaped text", () => {
    expect(render("```ts\nconst x: number = 1;\n```").querySelector("code")?.className).toBe(
      "hljs language-typescript",
    );
    const plain = render("```brainfart\n<b>not bold</b>\n```").querySelector("code");
    expect(plain?.className).toBe("hljs");
    expect(plain?.textContent).toBe("<b>not bold</b>\n");
    expect(plain?.querySelector("b")).toBeNull();
  });

  it("renders tables with their column alignment", () => {
    const root = render("| Name | Size |\n|:-----|-----:|\n| a | 1 |\n| b | 22 |\n");
    expect(root.querySelector(".table-wrap > table")).not.toBeNull();
    expect([...root.querySelectorAll("th")].map((th) => th.textContent)).toEqual(["Name", "Size"]);
    expect(root.querySelectorAll("tbody tr")).toHaveLength(2);
    const right = root.querySelector<HTMLElement>("tbody td:nth-child(2)");
    expect(right?.style.textAlign).toBe("right");
  });

  it("turns bare URLs into external links", () => {
    const link = render("See https://example.com/docs for more.").querySelector("a");
    expect(link?.getAttribute("href")).toBe("https://example.com/docs");
    expect(link?.getAttribute("rel")).toBe("noopener noreferrer");
  });

  it("keeps `$` amounts as text and does not load math for them", () => {
    const rendered = renderMarkdown("It costs $5 and $10 today.");
    expect(rendered.hasMath).toBe(false);
    const root = document.createElement("div");
    root.append(rendered.fragment);
    expect(root.textContent?.trim()).toBe("It costs $5 and $10 today.");
  });

  it("detects math and renders it with KaTeX once loaded", async () => {
    const before = renderMarkdown("Euler: $e^{i\\pi} + 1 = 0$ and\n\n$$\n\\int_0^1 x\\,dx\n$$\n");
    expect(before.hasMath).toBe(true);
    await loadMath();
    const root = render("Euler: $e^{i\\pi} + 1 = 0$ and \\(a_1\\)\n\n$$\n\\int_0^1 x\\,dx\n$$\n");
    expect(root.querySelectorAll(".katex")).toHaveLength(3);
    expect(root.querySelector(".math-display .katex-display")).not.toBeNull();
    expect(root.querySelector("math annotation")?.textContent).toBe("e^{i\\pi} + 1 = 0");
    expect(root.querySelector("[style]")?.getAttribute("style") ?? "").not.toMatch(/url|expression/);
  });
});
