/**
 * A stand-in for `@tauri-apps/api/core` and `@tauri-apps/api/event` in tests:
 *
 *   vi.mock("@tauri-apps/api/core", () => import("./test/fake-tauri"));
 *   vi.mock("@tauri-apps/api/event", () => import("./test/fake-tauri"));
 *
 * Commands go to handlers the test installs; events are delivered synchronously by `emit`.
 */

type Handler = (args: Record<string, unknown>, options?: unknown) => unknown;
type Listener = (event: { event: string; id: number; payload: unknown }) => void;

export interface Call {
  command: string;
  args: Record<string, unknown>;
  options?: unknown;
}

const handlers = new Map<string, Handler>();
const listeners = new Map<string, Set<Listener>>();
export const calls: Call[] = [];

// eslint-disable-next-line @typescript-eslint/require-await -- async like the bridge it stands in for
export async function invoke(command: string, args?: unknown, options?: unknown): Promise<unknown> {
  const record = (args ?? {}) as Record<string, unknown>;
  calls.push({ command, args: record, options });
  const handler = handlers.get(command);
  if (!handler) throw `Command ${command} not found`;
  return handler(record, options);
}

// eslint-disable-next-line @typescript-eslint/require-await -- async like the bridge it stands in for
export async function listen(event: string, listener: Listener): Promise<() => void> {
  let set = listeners.get(event);
  if (!set) {
    set = new Set();
    listeners.set(event, set);
  }
  set.add(listener);
  return () => set.delete(listener);
}

/** Delivers an event to every listener, synchronously. */
export function emit(event: string, payload: unknown): void {
  for (const listener of [...(listeners.get(event) ?? [])]) listener({ event, id: 0, payload });
}

export function handle(command: string, handler: Handler): void {
  handlers.set(command, handler);
}

export function callsOf(command: string): Call[] {
  return calls.filter((call) => call.command === command);
}

export function resetTauri(): void {
  handlers.clear();
  listeners.clear();
  calls.length = 0;
}
