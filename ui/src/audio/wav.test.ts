import { describe, expect, it } from "vitest";

import { WAV_HEADER_BYTES, encodeWav, toInt16 } from "./wav";

const text = (bytes: Uint8Array, from: number, length: number) =>
  String.fromCharCode(...bytes.subarray(from, from + length));

describe("encodeWav", () => {
  it("writes a mono 16-bit PCM header that players and the backend read", () => {
    const wav = encodeWav([new Float32Array([0, 0.5]), new Float32Array([-0.5])], 48_000);
    const view = new DataView(wav.buffer);
    expect(wav.length).toBe(WAV_HEADER_BYTES + 3 * 2);
    expect(text(wav, 0, 4)).toBe("RIFF");
    expect(view.getUint32(4, true)).toBe(wav.length - 8);
    expect(text(wav, 8, 8)).toBe("WAVEfmt ");
    expect(view.getUint32(16, true)).toBe(16);
    expect(view.getUint16(20, true)).toBe(1); // PCM
    expect(view.getUint16(22, true)).toBe(1); // one channel
    expect(view.getUint32(24, true)).toBe(48_000);
    expect(view.getUint32(28, true)).toBe(96_000);
    expect(view.getUint16(32, true)).toBe(2);
    expect(view.getUint16(34, true)).toBe(16);
    expect(text(wav, 36, 4)).toBe("data");
    expect(view.getUint32(40, true)).toBe(6);
  });

  it("keeps the samples in order across chunks, little-endian", () => {
    const wav = encodeWav([new Float32Array([1, -1]), new Float32Array([0.25])], 16_000);
    const view = new DataView(wav.buffer);
    const samples = [0, 1, 2].map((i) => view.getInt16(WAV_HEADER_BYTES + 2 * i, true));
    expect(samples).toEqual([32767, -32768, Math.round(0.25 * 32767)]);
    expect([...wav.subarray(WAV_HEADER_BYTES, WAV_HEADER_BYTES + 2)]).toEqual([0xff, 0x7f]);
  });

  it("clips what is out of range and silences NaN", () => {
    expect([2, -3, Infinity, -Infinity, NaN, 0].map(toInt16)).toEqual([32767, -32768, 32767, -32768, 0, 0]);
  });

  it("writes an empty recording as a valid file with no samples", () => {
    const wav = encodeWav([], 44_100);
    expect(wav.length).toBe(WAV_HEADER_BYTES);
    expect(new DataView(wav.buffer).getUint32(40, true)).toBe(0);
  });

  it("refuses a sample rate that is not a positive whole number", () => {
    for (const rate of [0, -1, 44_100.5, NaN]) expect(() => encodeWav([], rate)).toThrow(RangeError);
  });
});
