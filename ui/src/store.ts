/**
 * Observable state, as Tweakpane's `Value`: whoever shows a value subscribes to it and refreshes
 * itself when it changes, so no caller has to remember which view to redraw.
 */

/** Called after a change with the new and the previous value. */
export type Listener<T> = (value: T, previous: T) => void;

/** Whether two values show the same; a change that compares equal notifies nobody. */
export type Equality<T> = (a: T, b: T) => boolean;

/** One observable value. */
export class Value<T> {
  private current: T;
  private readonly listeners = new Set<Listener<T>>();

  constructor(
    initial: T,
    private readonly equals: Equality<T> = Object.is,
  ) {
    this.current = initial;
  }

  get(): T {
    return this.current;
  }

  /** Replaces the value and, when it differs, tells every subscriber (synchronously, in order). */
  set(value: T): void {
    const previous = this.current;
    if (this.equals(previous, value)) return;
    this.current = value;
    for (const listener of [...this.listeners]) listener(value, previous);
  }

  /** Sets the value computed from the current one. */
  update(change: (value: T) => T): void {
    this.set(change(this.current));
  }

  /** Calls `listener` after every change; returns the function that stops it. */
  subscribe(listener: Listener<T>): () => void {
    const own: Listener<T> = (value, previous) => listener(value, previous);
    this.listeners.add(own);
    return () => this.listeners.delete(own);
  }
}

/** An observable record: `patch` changes some fields and notifies once, only when one differs. */
export class Store<T extends object> extends Value<T> {
  constructor(initial: T) {
    super(initial, sameFields);
  }

  patch(changes: Partial<T>): void {
    this.set({ ...this.get(), ...changes });
  }
}

/** Anything that can be watched for changes. */
export interface Observable {
  subscribe(listener: () => void): () => void;
}

/** Calls `listener` after a change of any of `values`; returns the function that stops it. */
export function watch(values: readonly Observable[], listener: () => void): () => void {
  const stops = values.map((value) => value.subscribe(() => listener()));
  return () => {
    for (const stop of stops) stop();
  };
}

/** Two records with the same fields, each the same by `Object.is`. */
export function sameFields<T extends object>(a: T, b: T): boolean {
  if (a === b) return true;
  const keys = Object.keys(a) as (keyof T)[];
  return keys.length === Object.keys(b).length && keys.every((key) => Object.is(a[key], b[key]));
}

/** Two sets with the same members. */
export function sameMembers<T>(a: ReadonlySet<T>, b: ReadonlySet<T>): boolean {
  return a.size === b.size && [...a].every((member) => b.has(member));
}
