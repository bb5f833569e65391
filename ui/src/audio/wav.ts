/**
 * A recording as a WAV file: mono, 16-bit PCM, little-endian, at the rate it was captured (the
 * backend resamples to 16 kHz). Samples outside [-1, 1] are clipped; 1.0 maps to 32767 and -1.0
 * to -32768, as a 16-bit sound card writes them.
 */

/** Bytes before the samples: the RIFF header, the `fmt ` chunk and the `data` chunk's header. */
export const WAV_HEADER_BYTES = 44;

/** Encodes `chunks` (consecutive blocks of samples) as one WAV file. */
export function encodeWav(chunks: readonly Float32Array[], sampleRate: number): Uint8Array {
  if (!Number.isInteger(sampleRate) || sampleRate <= 0) throw new RangeError(`bad sample rate ${sampleRate}`);
  const samples = chunks.reduce((sum, chunk) => sum + chunk.length, 0);
  const dataBytes = samples * 2;
  const bytes = new Uint8Array(WAV_HEADER_BYTES + dataBytes);
  const view = new DataView(bytes.buffer);
  const ascii = (offset: number, text: string) => {
    for (let i = 0; i < text.length; i++) view.setUint8(offset + i, text.charCodeAt(i));
  };
  ascii(0, "RIFF");
  view.setUint32(4, 36 + dataBytes, true);
  ascii(8, "WAVE");
  ascii(12, "fmt ");
  view.setUint32(16, 16, true); // fmt chunk size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, sampleRate, true);
  view.setUint32(28, sampleRate * 2, true); // bytes per second
  view.setUint16(32, 2, true); // bytes per frame
  view.setUint16(34, 16, true); // bits per sample
  ascii(36, "data");
  view.setUint32(40, dataBytes, true);
  let offset = WAV_HEADER_BYTES;
  for (const chunk of chunks) {
    for (const sample of chunk) {
      view.setInt16(offset, toInt16(sample), true);
      offset += 2;
    }
  }
  return bytes;
}

/** One sample as a 16-bit integer; NaN is silence. */
export function toInt16(sample: number): number {
  if (Number.isNaN(sample)) return 0;
  const clipped = Math.max(-1, Math.min(1, sample));
  return clipped < 0 ? Math.round(clipped * 32768) : Math.round(clipped * 32767);
}
