import { describe, expect, it, vi } from "vitest";

import { MicrophoneError, loudness, microphoneProblem, startRecording, type Capture } from "./recorder";
import { WAV_HEADER_BYTES } from "./wav";

/** A microphone and audio graph that hand the page `blocks` when `play` is called. */
function fakeCapture(rate = 48_000) {
  const track = { stop: vi.fn() };
  const stream = { getTracks: () => [track] } as unknown as MediaStream;
  let processor: { onaudioprocess: ((event: unknown) => void) | null } | null = null;
  const context = {
    sampleRate: rate,
    state: "running",
    destination: {},
    createMediaStreamSource: () => ({ connect: vi.fn(), disconnect: vi.fn() }),
    createScriptProcessor: () => {
      processor = { onaudioprocess: null, connect: vi.fn(), disconnect: vi.fn() } as never;
      return processor;
    },
    resume: vi.fn(() => Promise.resolve()),
    close: vi.fn(() => Promise.resolve()),
  };
  const capture: Capture = {
    mediaDevices: { getUserMedia: vi.fn(() => Promise.resolve(stream)) },
    createContext: () => context as unknown as AudioContext,
  };
  const play = (block: number[]) =>
    processor?.onaudioprocess?.({ inputBuffer: { getChannelData: () => new Float32Array(block) } });
  return { capture, play, track, context };
}

describe("startRecording", () => {
  it("records blocks until stopped, then gives a WAV of them and lets the microphone go", async () => {
    const { capture, play, track, context } = fakeCapture(48_000);
    const recording = await startRecording(capture);
    play(new Array<number>(24_000).fill(0.5));
    expect(recording.elapsedSeconds()).toBeCloseTo(0.5);
    expect(recording.level()).toBeGreaterThan(0.9);
    play(new Array<number>(24_000).fill(0));
    const after = recording.level();
    expect(after).toBeLessThan(1);
    expect(after).toBeGreaterThan(0.5); // falls back, as a meter does
    for (let i = 0; i < 40; i++) play([0]);
    expect(recording.level()).toBeLessThan(0.001);

    const wav = await recording.stop();

    expect(wav.length).toBe(WAV_HEADER_BYTES + (48_000 + 40) * 2);
    expect(new DataView(wav.buffer).getUint32(24, true)).toBe(48_000);
    expect(track.stop).toHaveBeenCalled();
    expect(context.close).toHaveBeenCalled();
    play([1, 1, 1]);
    expect(recording.elapsedSeconds()).toBeCloseTo(48_040 / 48_000, 5);
  });

  it("cancelling lets the microphone go and keeps nothing", async () => {
    const { capture, play, track } = fakeCapture();
    const recording = await startRecording(capture);
    play([0.1, 0.2]);
    recording.cancel();
    expect(track.stop).toHaveBeenCalled();
  });

  it("says in words why the microphone cannot be used", async () => {
    const denied = fakeCapture().capture;
    denied.mediaDevices = { getUserMedia: () => Promise.reject(new DOMException("denied", "NotAllowedError")) };
    await expect(startRecording(denied)).rejects.toThrow(/may not use the microphone.*Privacy & Security/);

    const none = fakeCapture().capture;
    none.mediaDevices = { getUserMedia: () => Promise.reject(new DOMException("", "NotFoundError")) };
    await expect(startRecording(none)).rejects.toThrow("No microphone was found");

    await expect(startRecording({ ...none, mediaDevices: undefined })).rejects.toBeInstanceOf(MicrophoneError);
    expect(microphoneProblem(new DOMException("", "NotReadableError"))).toContain("another app");
    expect(microphoneProblem("weird")).toBe("The microphone could not be started.");
  });
});

describe("loudness", () => {
  it("is 0 for silence and nothing, and at most 1", () => {
    expect(loudness(new Float32Array(0))).toBe(0);
    expect(loudness(new Float32Array(8))).toBe(0);
    expect(loudness(new Float32Array([1, -1, 1]))).toBe(1);
    expect(loudness(new Float32Array([NaN]))).toBe(0);
  });
});
