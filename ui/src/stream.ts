/**
 * Streaming bookkeeping. Deltas arrive far faster than the screen refreshes, so rendering is
 * coalesced: marking a message dirty schedules at most one render per animation frame. When a
 * render gets expensive (a very long answer), frames are skipped so rendering keeps to about a
 * quarter of the time and typing, scrolling and Stop stay responsive.
 */
import type { GenerationEvent, Sent } from "./api";

export type RequestFrame = (callback: () => void) => void;

const nextFrame: RequestFrame = (callback) => {
  window.requestAnimationFrame(() => callback());
};

/** Share of the time that rendering may take while text streams in. */
const RENDER_SHARE = 0.25;

/** Collects keys marked dirty and renders them together on the next frame. */
export class FrameScheduler<K> {
  private readonly dirty = new Set<K>();
  private scheduled = false;
  private notBefore = 0;

  constructor(
    private readonly render: (keys: K[]) => void,
    private readonly requestFrame: RequestFrame = nextFrame,
    private readonly now: () => number = () => performance.now(),
  ) {}

  mark(key: K): void {
    this.dirty.add(key);
    this.schedule();
  }

  /** Renders whatever is pending now (e.g. when the final event arrives). */
  flush(): void {
    if (this.dirty.size === 0) return;
    const keys = [...this.dirty];
    this.dirty.clear();
    const start = this.now();
    this.render(keys);
    const end = this.now();
    this.notBefore = end + ((end - start) * (1 - RENDER_SHARE)) / RENDER_SHARE;
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    this.requestFrame(() => {
      this.scheduled = false;
      if (this.dirty.size === 0) return;
      if (this.now() < this.notBefore) this.schedule();
      else this.flush();
    });
  }

  /** Forgets pending renders (e.g. when the view they belong to is replaced). */
  clear(): void {
    this.dirty.clear();
  }
}

/** How far the model has read the prompt, before its first token. */
export interface Reading {
  done: number;
  total: number;
}

/** Where a streaming answer stands: the prompt being read, then tokens written. */
export interface StreamProgress {
  /** Tokens generated so far. */
  tokenCount: number;
  /** The prompt's reading, until the first token arrives (`null` once it has, or before any report). */
  reading: Reading | null;
}

/** A generation still producing tokens, with the text received so far. */
export interface LiveGeneration extends StreamProgress {
  generationId: number;
  conversationId: string;
  messageId: string;
  text: string;
}

/**
 * Every generation in flight, keyed by id. Events may arrive before the command that started the
 * generation has answered, so either can create the entry; a finished id is never revived.
 */
export class Generations {
  private readonly live = new Map<number, LiveGeneration>();
  private readonly finished = new Set<number>();

  /** Records what `send_message` / `regenerate` / `edit_message` answered. */
  start(sent: Sent): LiveGeneration | null {
    if (this.finished.has(sent.generationId)) return null;
    return this.entry(sent.generationId, sent.conversation.id, sent.assistantMessageId);
  }

  /** Applies an event; returns the generation it belongs to (removed from the live set when it ended). */
  apply(event: GenerationEvent): LiveGeneration | null {
    if (this.finished.has(event.generationId)) return null;
    const generation = this.entry(event.generationId, event.conversationId, event.messageId);
    if (event.type === "prefill") {
      if (generation.tokenCount === 0) generation.reading = { done: event.done, total: event.total };
    } else if (event.type === "delta") {
      generation.text += event.delta;
      generation.tokenCount = event.tokenCount;
      generation.reading = null;
    } else {
      this.live.delete(event.generationId);
      this.finished.add(event.generationId);
    }
    return generation;
  }

  get(generationId: number): LiveGeneration | undefined {
    return this.live.get(generationId);
  }

  forMessage(messageId: string): LiveGeneration | undefined {
    for (const generation of this.live.values()) if (generation.messageId === messageId) return generation;
    return undefined;
  }

  forConversation(conversationId: string): LiveGeneration | undefined {
    for (const generation of this.live.values()) if (generation.conversationId === conversationId) return generation;
    return undefined;
  }

  /** Any generation in flight (the engine runs one at a time). */
  current(): LiveGeneration | undefined {
    return this.live.values().next().value;
  }

  conversationIds(): Set<string> {
    return new Set([...this.live.values()].map((generation) => generation.conversationId));
  }

  private entry(generationId: number, conversationId: string, messageId: string): LiveGeneration {
    let generation = this.live.get(generationId);
    if (!generation) {
      generation = { generationId, conversationId, messageId, text: "", tokenCount: 0, reading: null };
      this.live.set(generationId, generation);
    }
    return generation;
  }
}
