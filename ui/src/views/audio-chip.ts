/**
 * An audio attachment as a chip: a play button, the file's name and its length. The bytes are
 * fetched on the first play and played by an <audio> element; images keep their thumbnails.
 * When it cannot play (no sound output, a format the system cannot decode) the chip says so in
 * words, and also when playback starts but the clock does not move.
 */
import { el } from "../dom";
import { formatClipLength } from "../format";
import { icon } from "../icons";

/** After this long "playing" without the clock moving, the chip says nothing is heard. */
export const PLAY_STALL_MS = 2500;

/** Why playing failed, in words: `error` is what `play()` rejected with, or the element's error. */
export function playFailure(error: unknown): string {
  const name = error instanceof DOMException ? error.name : null;
  // A MediaError (the element's `error`): code 4 is MEDIA_ERR_SRC_NOT_SUPPORTED.
  const code =
    typeof error === "object" && error !== null && "code" in error && typeof error.code === "number"
      ? error.code
      : null;
  if (name === "NotSupportedError" || (name === null && code === 4))
    return "Cannot play: this computer cannot decode this audio format.";
  if (name === "NotAllowedError") return "Cannot play: the system did not allow sound to start.";
  return "Cannot play: no sound output is available on this computer.";
}

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
  const length = durationMs === null ? null : formatClipLength(durationMs);
  const status = el("span", {
    class: "audio-status",
    role: "status",
    "data-testid": `${testId}-status`,
    hidden: true,
  });
  const chip = el(
    "div",
    { class: "audio-chip", "data-testid": testId, title: length ? `${name} — ${length}` : name },
    button,
    el("span", { class: "audio-icon" }, icon("audio")),
    el("span", { class: "audio-name" }, name),
    length && el("span", { class: "audio-duration", "data-testid": `${testId}-duration` }, length),
    notice ? el("span", { class: "audio-notice", "data-testid": `${testId}-notice`, role: "note" }, notice) : null,
    status,
  );
  let player: HTMLAudioElement | null = null;
  let stall: ReturnType<typeof setTimeout> | undefined;
  /** Says `text` under the chip (null clears it). */
  const say = (text: string | null) => {
    status.textContent = text ?? "";
    status.hidden = text === null;
  };
  const fail = (text: string) => {
    clearTimeout(stall);
    show("unavailable");
    say(text);
  };
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
    say(null);
    load().then(
      (blob) => {
        const audio = el("audio", { preload: "auto", "data-testid": `${testId}-audio` });
        player = audio;
        audio.src = URL.createObjectURL(blob);
        audio.addEventListener("play", () => show("playing"));
        audio.addEventListener("pause", () => {
          clearTimeout(stall);
          if (chip.dataset.state !== "unavailable") show("idle");
        });
        audio.addEventListener("ended", () => {
          clearTimeout(stall);
          show("idle");
        });
        audio.addEventListener("error", () => fail(playFailure(audio.error)));
        chip.append(audio);
        void start(audio);
      },
      () => fail("Cannot play: the recording could not be read from app data."),
    );
  });

  async function start(audio: HTMLAudioElement): Promise<void> {
    say(null);
    const from = audio.currentTime;
    try {
      await audio.play();
    } catch (error) {
      fail(playFailure(error));
      return;
    }
    show("playing");
    // Some systems without a sound output "play" without the clock ever moving: say so.
    clearTimeout(stall);
    stall = setTimeout(() => {
      if (!audio.paused && !audio.ended && audio.currentTime === from && chip.isConnected) {
        audio.pause();
        fail("Nothing is playing: check that a sound output is connected.");
      }
    }, PLAY_STALL_MS);
  }
  return chip;
}
