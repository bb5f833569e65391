/** What every controller of the window reaches, and the rules about the context window they share. */
import type { ContextNeed } from "../api";
import type { AppState, ContextFull } from "../state";
import type { Generations } from "../stream";
import type { Toasts } from "../views/toasts";

/** The window's state, the answers being written, and the notes in the corner. */
export interface Shared {
  readonly root: HTMLElement;
  readonly state: AppState;
  readonly generations: Generations;
  readonly toasts: Toasts;
}

/** Ids of a message being sent and of its attachments, until the backend gives theirs. */
export const PENDING_PREFIX = "pending:";

/** The tokens a conversation can hold now: the configured length, within the model's limit. */
export function contextWindow(state: AppState): number | null {
  const model = state.model.get();
  const limit = model.state === "ready" ? model.contextWindow : null;
  const configured = state.settings.get()?.contextLength ?? null;
  if (limit && configured) return Math.min(limit, configured);
  return limit ?? configured;
}

/** Tokens the open chat can still take: the context window less what its last answer left in it. */
export function contextRoom(state: AppState): number | null {
  const window = contextWindow(state);
  if (state.model.get().state !== "ready" || window === null) return null;
  const last = [...state.chat.get().messages].reverse().find((message) => message.usage);
  const used = last?.usage ? last.usage.promptTokens + last.usage.generatedTokens : 0;
  return window - used;
}

/** The context notice's state for a `contextFull` error of `conversationId`. */
export function contextFullOf(conversationId: string | null, need: ContextNeed | null): ContextFull {
  return {
    conversationId,
    reason: need?.alone ? "message" : "conversation",
    needed: need?.needed ?? null,
    window: need?.window ?? null,
  };
}

/** The context notice's words: one wording per case, numbers grouped; advice only for what helps. */
export function contextNoticeText(full: ContextFull): { title: string; detail: string } {
  const n = (value: number) => value.toLocaleString("en-US");
  const holds = full.window === null ? null : `The context window holds ${n(full.window)} tokens.`;
  const sentences = (...parts: (string | null)[]) => parts.filter((p) => p !== null).join(" ");
  switch (full.reason) {
    case "message":
      return {
        title: "This message is too long for the context window.",
        detail: sentences(
          full.needed === null ? null : `It is ${n(full.needed)} tokens on its own.`,
          holds,
          "Shorten it, or raise the context length.",
        ),
      };
    case "conversation":
      return {
        title: "This conversation no longer fits in the context window.",
        detail: sentences(
          full.needed === null ? null : `It needs ${n(full.needed)} tokens.`,
          holds,
          "Start a new chat, or raise the context length.",
        ),
      };
    case "cutOff":
      return {
        title: "The answer was cut off: the context window is full.",
        detail: sentences(
          full.window === null
            ? "The conversation filled the context window."
            : `The conversation reached ${n(full.window)} tokens.`,
          "Start a new chat, or raise the context length.",
        ),
      };
  }
}
