/** Gemma's thought channel: text between `<|channel>thought` and `<channel|>`, shown collapsed. */

const START = "<|channel>thought";
const END = "<channel|>";

export interface SplitAnswer {
  /** The thought text, or null when the answer has no thought channel. */
  thinking: string | null;
  /** False while the thought channel is still open (tokens still arriving inside it). */
  thinkingDone: boolean;
  /** What the model says to the user. */
  answer: string;
}

/** Splits an answer; while `streaming`, a marker still arriving in pieces is hidden. */
export function splitThinking(text: string, streaming = false): SplitAnswer {
  const trim = (part: string, marker: string) => (streaming ? withoutPartialMarker(part, marker) : part);
  const start = text.indexOf(START);
  if (start < 0) return { thinking: null, thinkingDone: true, answer: trim(text, START) };
  const before = text.slice(0, start);
  const bodyStart = start + START.length;
  const end = text.indexOf(END, bodyStart);
  if (end < 0) {
    return {
      thinking: trim(text.slice(bodyStart), END).trim(),
      thinkingDone: false,
      answer: before.trim(),
    };
  }
  return {
    thinking: text.slice(bodyStart, end).trim(),
    thinkingDone: true,
    answer: (before + text.slice(end + END.length)).trimStart(),
  };
}

/** A trailing prefix of `marker` removed, so half a marker never flashes on screen. */
function withoutPartialMarker(text: string, marker: string): string {
  for (let length = Math.min(marker.length - 1, text.length); length >= 2; length--) {
    if (text.endsWith(marker.slice(0, length))) return text.slice(0, -length);
  }
  return text;
}
