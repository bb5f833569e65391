/** Numbers, sizes and times in words a person reads at a glance. */

const integer = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

export function formatInteger(value: number): string {
  return integer.format(value);
}

/** 1536 → "1.5 KB"; decimal units, as Finder shows them. */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) return "—";
  if (bytes < 1000) return `${Math.round(bytes)} bytes`;
  const units = ["KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = "";
  for (const next of units) {
    value /= 1000;
    unit = next;
    if (value < 1000) break;
  }
  const digits = value < 10 ? 1 : 0;
  return `${value.toFixed(digits)} ${unit}`;
}

/** Bytes per second as "12.3 MB/s". */
export function formatSpeed(bytesPerSecond: number): string {
  return `${formatBytes(bytesPerSecond)}/s`;
}

/** A remaining time, rounded the way people say it: "about 3 min left". */
export function formatEta(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds) || seconds < 0) return "estimating time left";
  if (seconds < 10) return "a few seconds left";
  if (seconds < 60) return `${Math.round(seconds / 5) * 5} s left`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `about ${minutes} min left`;
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return rest === 0 ? `about ${hours} h left` : `about ${hours} h ${rest} min left`;
}

/** Milliseconds as "420 ms" or "1.8 s". */
export function formatMilliseconds(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

/** Tokens per second with one decimal. */
export function formatRate(perSecond: number): string {
  if (!Number.isFinite(perSecond) || perSecond <= 0) return "—";
  return `${perSecond.toFixed(perSecond < 100 ? 1 : 0)} tok/s`;
}

/** The group a conversation falls into in the sidebar, by its last activity. */
export function dateGroup(timestamp: number, now: Date = new Date()): string {
  const startOfToday = new Date(now.getFullYear(), now.getMonth(), now.getDate()).getTime();
  const day = 24 * 60 * 60 * 1000;
  if (timestamp >= startOfToday) return "Today";
  if (timestamp >= startOfToday - day) return "Yesterday";
  if (timestamp >= startOfToday - 7 * day) return "Previous 7 Days";
  if (timestamp >= startOfToday - 30 * day) return "Previous 30 Days";
  const date = new Date(timestamp);
  const sameYear = date.getFullYear() === now.getFullYear();
  return date.toLocaleDateString("en-US", sameYear ? { month: "long" } : { month: "long", year: "numeric" });
}

/** "this Mac" on macOS, "this computer" elsewhere. */
export function thisMachine(platform: string | undefined): string {
  return platform === "macos" ? "this Mac" : "this computer";
}

/** A keyboard shortcut as this platform writes it: "⌘N" on macOS, "Ctrl+N" elsewhere. */
export function shortcut(key: string, platform: string | undefined): string {
  return platform === "macos" ? `⌘${key}` : `Ctrl+${key}`;
}

/** A length as a clock reads it, to the nearest second: 4_200 → "0:04", 3_725_000 → "1:02:05". */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "—";
  const total = Math.round(ms / 1000);
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const seconds = String(total % 60).padStart(2, "0");
  return hours > 0 ? `${hours}:${String(minutes).padStart(2, "0")}:${seconds}` : `${minutes}:${seconds}`;
}

/**
 * An audio clip's length on its chip: a short clip in tenths of a second (1_140 → "1.1 s", where a
 * clock would say "0:01"), a longer one as a clock (65_400 → "1:05").
 */
export function formatClipLength(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 9_950) return `${Math.max(0.1, Math.round(ms / 100) / 10).toFixed(1)} s`;
  return formatDuration(ms);
}
