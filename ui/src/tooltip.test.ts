import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { iconButton } from "./dom";
import { icon } from "./icons";
import { installTooltips, TOOLTIP_DELAY_MS } from "./tooltip";

let stop: () => void;
let copy: HTMLButtonElement;
let regenerate: HTMLButtonElement;

const tip = () => document.querySelector<HTMLElement>('[data-testid="tooltip"]') as HTMLElement;
const over = (target: Element, from: Element | null = null) =>
  target.dispatchEvent(new MouseEvent("mouseover", { bubbles: true, relatedTarget: from }));
const out = (target: Element, to: Element | null = null) =>
  target.dispatchEvent(new MouseEvent("mouseout", { bubbles: true, relatedTarget: to }));

beforeEach(() => {
  vi.useFakeTimers();
  copy = iconButton("Copy message", icon("copy"));
  regenerate = iconButton("Regenerate answer", icon("regenerate"));
  document.body.replaceChildren(copy, regenerate);
  stop = installTooltips(document);
});

afterEach(() => {
  stop();
  vi.useRealTimers();
});

describe("tooltips", () => {
  it("never leaves the native tooltip on: the title becomes the window's own tooltip, shown after a rest", () => {
    over(copy);
    expect(copy.hasAttribute("title")).toBe(false);
    expect(copy.dataset.tooltip).toBe("Copy message");
    expect(copy.getAttribute("aria-label")).toBe("Copy message");
    expect(tip().hidden).toBe(true);
    vi.advanceTimersByTime(TOOLTIP_DELAY_MS);
    expect(tip().hidden).toBe(false);
    expect(tip().textContent).toBe("Copy message");
    expect(tip().getAttribute("role")).toBe("tooltip");
  });

  it("goes the moment the pointer moves on to another control, and shows that one's after its own rest", () => {
    over(copy);
    vi.advanceTimersByTime(TOOLTIP_DELAY_MS);
    out(copy, regenerate);
    over(regenerate, copy);
    expect(tip().hidden).toBe(true);
    vi.advanceTimersByTime(TOOLTIP_DELAY_MS);
    expect(tip().textContent).toBe("Regenerate answer");
  });

  it("goes on a click, a key or a scroll, and never shows for a pointer that left before the rest", () => {
    for (const end of [
      () => copy.dispatchEvent(new Event("pointerdown", { bubbles: true })),
      () => document.dispatchEvent(new KeyboardEvent("keydown", { key: "a" })),
      () => document.dispatchEvent(new Event("scroll")),
    ]) {
      over(copy);
      vi.advanceTimersByTime(TOOLTIP_DELAY_MS);
      expect(tip().hidden).toBe(false);
      end();
      expect(tip().hidden).toBe(true);
      out(copy);
    }
    over(copy);
    out(copy);
    vi.advanceTimersByTime(TOOLTIP_DELAY_MS * 2);
    expect(tip().hidden).toBe(true);
  });

  it("shows inside an open dialog, which is drawn above the rest of the window", () => {
    const dialog = document.createElement("dialog");
    const save = iconButton("Save settings", icon("copy"));
    dialog.append(save);
    document.body.append(dialog);
    dialog.setAttribute("open", "");
    over(save);
    vi.advanceTimersByTime(TOOLTIP_DELAY_MS);
    expect(tip().hidden).toBe(false);
    expect(tip().parentElement).toBe(dialog);
    out(save);
    over(copy);
    vi.advanceTimersByTime(TOOLTIP_DELAY_MS);
    expect(tip().parentElement).toBe(document.body);
  });

  it("follows a title the code changes later, and describes an element with no label of its own", () => {
    const stats = document.createElement("div");
    stats.title = "Prompt: 12 tokens";
    stats.append(document.createElement("span"));
    document.body.append(stats);
    over(stats.firstElementChild as Element);
    expect(stats.getAttribute("aria-description")).toBe("Prompt: 12 tokens");
    vi.advanceTimersByTime(TOOLTIP_DELAY_MS);
    expect(tip().textContent).toBe("Prompt: 12 tokens");
    out(stats);
    copy.title = "Copied";
    over(copy);
    vi.advanceTimersByTime(TOOLTIP_DELAY_MS);
    expect(tip().textContent).toBe("Copied");
  });
});
