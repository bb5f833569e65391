import { describe, expect, it } from "vitest";

import {
  dateGroup,
  formatBytes,
  formatClipLength,
  formatDuration,
  formatEta,
  formatMilliseconds,
  formatRate,
} from "./format";

describe("format", () => {
  it("writes an audio chip's length: tenths of a second for a short clip, a clock for a longer one", () => {
    expect(formatClipLength(1_140)).toBe("1.1 s");
    expect(formatClipLength(30)).toBe("0.1 s");
    expect(formatClipLength(9_940)).toBe("9.9 s");
    expect(formatClipLength(9_960)).toBe("0:10");
    expect(formatClipLength(65_400)).toBe("1:05");
    expect(formatClipLength(-5)).toBe("—");
  });

  it("writes a recording's length as a clock does, to the nearest second", () => {
    expect(formatDuration(0)).toBe("0:00");
    expect(formatDuration(4_200)).toBe("0:04");
    expect(formatDuration(4_500)).toBe("0:05");
    expect(formatDuration(65_000)).toBe("1:05");
    expect(formatDuration(3_725_000)).toBe("1:02:05");
    expect(formatDuration(-1)).toBe("—");
    expect(formatDuration(NaN)).toBe("—");
  });

  it("writes sizes the way Finder does", () => {
    expect(formatBytes(512)).toBe("512 bytes");
    expect(formatBytes(1_500)).toBe("1.5 KB");
    expect(formatBytes(25_000_000)).toBe("25 MB");
    expect(formatBytes(4_970_000_000)).toBe("5.0 GB");
  });

  it("rounds time left the way people say it", () => {
    expect(formatEta(null)).toBe("estimating time left");
    expect(formatEta(4)).toBe("a few seconds left");
    expect(formatEta(42)).toBe("40 s left");
    expect(formatEta(150)).toBe("about 3 min left");
    expect(formatEta(3 * 3600 + 20 * 60)).toBe("about 3 h 20 min left");
  });

  it("formats latency and speed", () => {
    expect(formatMilliseconds(420.4)).toBe("420 ms");
    expect(formatMilliseconds(1834)).toBe("1.83 s");
    expect(formatRate(31.44)).toBe("31.4 tok/s");
    expect(formatRate(0)).toBe("—");
  });

  it("groups chats by last activity", () => {
    const now = new Date(2025, 5, 15, 12);
    expect(dateGroup(new Date(2025, 5, 15, 1).getTime(), now)).toBe("Today");
    expect(dateGroup(new Date(2025, 5, 14, 23).getTime(), now)).toBe("Yesterday");
    expect(dateGroup(new Date(2025, 5, 10).getTime(), now)).toBe("Previous 7 Days");
    expect(dateGroup(new Date(2025, 4, 20).getTime(), now)).toBe("Previous 30 Days");
    expect(dateGroup(new Date(2025, 1, 3).getTime(), now)).toBe("February");
    expect(dateGroup(new Date(2023, 1, 3).getTime(), now)).toBe("February 2023");
  });
});
