/**
 * An audio attachment as a chip: a play button, the file's name and its length. The bytes are
 * fetched on the first play and played by an <audio> element; images keep their thumbnails.
 */
import { el } from "../dom";
import { formatDuration } from "../format";
import { icon } from "../icons";

export interface AudioChipOptions {
  name: string;
  durationMs: number | null;
  /** A line under the chip (what of a long recording the model will not hear). */
  notice?: string | null;
  /** The file, fetched when it is first played. */
  load: () => Promise<Blob>;
  testId: string;
}

/** The chip; `element.dataset.state` is "idle", "loading", "playing" or "unavailable". */
export function audioChip({ name, durationMs, notice, load, testId }: AudioChipOptions): HTMLElement {
  const button = el("button", {
    type: "button",
    class: "icon-button audio-play",
    "aria-label": `Play ${name}`,
    title: `Play ${name}`,
    "data-testid": `${testId}-play`,
  });
  const length = durationMs === null ? null : formatDuration(durationMs);
  const chip = el(
    "div",
    { class: "audio-chip", "data-testid": testId, title: length ? `${name} — ${length}` : name },
    button,
    el("span", { class: "audio-icon" }, icon("audio")),
    el("span", { class: "audio-name" }, name),
    length && el("span", { class: "audio-duration", "data-testid": `${testId}-duration` }, length),
    notice ? el("span", { class: "audio-notice", "data-testid": `${testId}-notice`, role: "note" }, notice) : null,
  );
  let player: HTMLAudioElement | null = null;
  const show = (state: "idle" | "loading" | "playing" | "unavailable") => {
    chip.dataset.state = state;
    const playing = state === "playing";
    button.replaceChildren(icon(playing ? "pause" : "play"));
    const label = state === "unavailable" ? `${name} cannot be played` : `${playing ? "Pause" : "Play"} ${name}`;
    button.setAttribute("aria-label", label);
    button.title = label;
    button.disabled = state === "loading";
  };
  show("idle");

  button.addEventListener("click", () => {
    if (player && !player.paused) {
      player.pause();
      return;
    }
    if (player) {
      void start(player);
      return;
    }
    show("loading");
    load().then(
      (blob) => {
        player = el("audio", { preload: "auto", "data-testid": `${testId}-audio` });
        player.src = URL.createObjectURL(blob);
        player.addEventListener("play", () => show("playing"));
        player.addEventListener("pause", () => show("idle"));
        player.addEventListener("ended", () => show("idle"));
        player.addEventListener("error", () => show("unavailable"));
        chip.append(player);
        void start(player);
      },
      () => show("unavailable"),
    );
  });

  async function start(audio: HTMLAudioElement): Promise<void> {
    try {
      await audio.play();
      show("playing");
    } catch {
      show("unavailable");
    }
  }
  return chip;
}
