/**
 * The whole window in a test: the app mounted on the fake backend (`backend.ts`) behind the fake
 * Tauri bridge, animation frames run by hand, and helpers that act as a person would.
 *
 * A test file mocks the bridge and calls `useWindow()` at its top:
 *
 *   vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
 *   vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));
 *   useWindow();
 *
 * The window renders model output through DOMPurify, which needs a DOM whose NodeIterator
 * survives node removal (happy-dom's does not), so these files run in jsdom.
 */
import { afterEach, beforeEach, vi } from "vitest";

import type { Sent } from "../api";
import { mountApp, type App } from "../app";
import { FakeBackend } from "./backend";
import { resetTauri } from "./fake-tauri";

export let root: HTMLElement;
export let app: App;
export let backend: FakeBackend;
let frames: FrameRequestCallback[];

/** A fresh backend and an empty page before each test; the window taken down after it. */
export function useWindow(): void {
  beforeEach(() => {
    resetTauri();
    backend = new FakeBackend();
    frames = [];
    vi.spyOn(window, "requestAnimationFrame").mockImplementation((callback) => {
      frames.push(callback);
      return frames.length;
    });
    root = document.createElement("div");
    root.className = "app";
    document.body.append(root);
  });

  afterEach(() => {
    app?.destroy();
    root.remove();
    document.body.replaceChildren();
    vi.restoreAllMocks();
  });
}

export async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 0));
}

export async function mount(): Promise<void> {
  app = await mountApp(root);
  await settle();
}

/** Runs the frames requested so far; returns how many there were. */
export function runFrames(): number {
  const pending = frames.splice(0);
  for (const frame of pending) frame(performance.now());
  return pending.length;
}

/** How many frames are requested and not run yet. */
export function pendingFrames(): number {
  return frames.length;
}

/** Forgets the frames requested so far without running them. */
export function dropFrames(): void {
  frames.length = 0;
}

/** Runs frames until no render is pending (a slow render makes the next ones wait). */
export async function drainFrames(): Promise<void> {
  for (let i = 0; i < 200 && frames.length > 0; i++) {
    runFrames();
    if (frames.length > 0) await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

export function $(testId: string): HTMLElement | null {
  return root.querySelector(`[data-testid="${testId}"]`);
}

export function $$(testId: string): HTMLElement[] {
  return [...root.querySelectorAll<HTMLElement>(`[data-testid="${testId}"]`)];
}

export function composer(): HTMLTextAreaElement {
  return $("composer") as HTMLTextAreaElement;
}

export function press(target: Element, key: string, init: KeyboardEventInit = {}): KeyboardEvent {
  const event = new KeyboardEvent("keydown", { key, bubbles: true, cancelable: true, ...init });
  target.dispatchEvent(event);
  return event;
}

export function type(text: string): void {
  const field = composer();
  field.value = text;
  field.dispatchEvent(new Event("input", { bubbles: true }));
}

export async function sendText(text: string): Promise<Sent> {
  type(text);
  press(composer(), "Enter");
  await settle();
  return backend.lastSent;
}

export function messages(): HTMLElement[] {
  return $$("message");
}

export function click(element: Element | null): void {
  if (!element) throw new Error("nothing to click");
  (element as HTMLElement).click();
}
