/**
 * Recording from the microphone in the window: `getUserMedia`, raw samples from a
 * ScriptProcessor (no AudioWorklet module to load, so nothing extra for the CSP to allow), a
 * loudness level for the meter, and a 16-bit PCM WAV at the end (see ./wav). The backend
 * checks and decodes the WAV like any dropped file.
 */
import { encodeWav } from "./wav";

/** The longest recording; it stops by itself here (the backend's audio limit is 10 minutes). */
export const MAX_RECORDING_SECONDS = 600;
/** Samples per block handed to the page: ~85 ms at 48 kHz, often enough for the meter. */
const BLOCK_SAMPLES = 4096;
/** The meter falls back by this factor a block, as a sound meter does, so short sounds show. */
const LEVEL_FALLBACK = 0.8;

/** A recording in progress. */
export interface Recording {
  /** Seconds recorded so far. */
  elapsedSeconds(): number;
  /** How loud it is now, from 0 (silence) to 1: the last block's loudness, or a louder one's
   * falling back. */
  level(): number;
  /** Stops recording and returns it as a WAV file. */
  stop(): Promise<Uint8Array>;
  /** Stops recording and drops it. */
  cancel(): void;
}

/** Why the microphone could not be used, in words for the person. */
export class MicrophoneError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MicrophoneError";
  }
}

/** What recording needs from the browser; tests hand in fakes. */
export interface Capture {
  mediaDevices: Pick<MediaDevices, "getUserMedia"> | undefined;
  createContext: () => AudioContext;
}

function browserCapture(): Capture {
  return {
    mediaDevices: typeof navigator === "undefined" ? undefined : navigator.mediaDevices,
    createContext: () => new AudioContext(),
  };
}

/** Opens the microphone and starts recording; rejects with a MicrophoneError. */
export async function startRecording(capture: Capture = browserCapture()): Promise<Recording> {
  if (!capture.mediaDevices?.getUserMedia) throw new MicrophoneError("This window cannot record audio.");
  let stream: MediaStream;
  try {
    stream = await capture.mediaDevices.getUserMedia({ audio: true, video: false });
  } catch (error) {
    throw new MicrophoneError(microphoneProblem(error));
  }
  const stopTracks = () => stream.getTracks().forEach((track) => track.stop());
  let context: AudioContext;
  try {
    context = capture.createContext();
  } catch (error) {
    stopTracks();
    throw new MicrophoneError(`Audio cannot be recorded in this window: ${String(error)}`);
  }
  const chunks: Float32Array[] = [];
  let samples = 0;
  let level = 0;
  let open = true;
  const source = context.createMediaStreamSource(stream);
  const processor = context.createScriptProcessor(BLOCK_SAMPLES, 1, 1);
  processor.onaudioprocess = (event) => {
    if (!open) return;
    const block = new Float32Array(event.inputBuffer.getChannelData(0));
    chunks.push(block);
    samples += block.length;
    level = Math.max(loudness(block), level * LEVEL_FALLBACK);
  };
  source.connect(processor);
  // A ScriptProcessor only runs while connected to the output; it writes silence there.
  processor.connect(context.destination);
  if (context.state === "suspended") await context.resume().catch(() => undefined);

  const close = () => {
    open = false;
    processor.onaudioprocess = null;
    source.disconnect();
    processor.disconnect();
    stopTracks();
    void context.close().catch(() => undefined);
  };
  return {
    elapsedSeconds: () => samples / context.sampleRate,
    level: () => level,
    stop: () => {
      const rate = context.sampleRate;
      close();
      return Promise.resolve(encodeWav(chunks, Math.round(rate)));
    },
    cancel: close,
  };
}

/** A block's loudness for the meter: RMS, scaled so that speech fills most of the bar. */
export function loudness(block: Float32Array): number {
  if (block.length === 0) return 0;
  let sum = 0;
  for (const sample of block) sum += sample * sample;
  const rms = Math.sqrt(sum / block.length);
  return Number.isFinite(rms) ? Math.min(1, rms * 4) : 0;
}

/** What a failed `getUserMedia` means for the person. */
export function microphoneProblem(error: unknown): string {
  const name = error instanceof Error || error instanceof DOMException ? error.name : "";
  switch (name) {
    case "NotAllowedError":
    case "SecurityError":
    case "PermissionDeniedError":
      return (
        "Gemma Desk may not use the microphone. Allow it in System Settings → Privacy & Security → " +
        "Microphone, then try again."
      );
    case "NotFoundError":
    case "DevicesNotFoundError":
    case "OverconstrainedError":
      return "No microphone was found. Connect one and try again.";
    case "NotReadableError":
    case "TrackStartError":
    case "AbortError":
      return "The microphone could not be started; another app may be using it.";
    default: {
      const detail = error instanceof Error && error.message ? `: ${error.message}` : "";
      return `The microphone could not be started${detail}.`;
    }
  }
}
