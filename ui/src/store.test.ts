import { describe, expect, it } from "vitest";

import { sameMembers, Store, Value, watch } from "./store";

describe("Value", () => {
  it("tells its subscribers the new and the previous value", () => {
    const value = new Value(1);
    const seen: [number, number][] = [];
    value.subscribe((now, before) => seen.push([now, before]));
    value.set(2);
    value.update((n) => n * 10);
    expect(seen).toEqual([
      [2, 1],
      [20, 2],
    ]);
    expect(value.get()).toBe(20);
  });

  it("stays quiet when the value does not change", () => {
    const value = new Value("a");
    let calls = 0;
    value.subscribe(() => calls++);
    value.set("a");
    value.update((s) => s);
    expect(calls).toBe(0);
  });

  it("uses the equality it is given", () => {
    const value = new Value<ReadonlySet<string>>(new Set(["x"]), sameMembers);
    let calls = 0;
    value.subscribe(() => calls++);
    value.set(new Set(["x"]));
    expect(calls).toBe(0);
    value.set(new Set(["x", "y"]));
    expect(calls).toBe(1);
  });

  it("stops telling a subscriber once it unsubscribes, even from inside a notification", () => {
    const value = new Value(0);
    const seen: string[] = [];
    const stopFirst = value.subscribe((n) => {
      seen.push(`first ${n}`);
      stopFirst();
    });
    value.subscribe((n) => seen.push(`second ${n}`));
    value.set(1);
    value.set(2);
    expect(seen).toEqual(["first 1", "second 1", "second 2"]);
  });

  it("lets one function subscribe twice and unsubscribe each separately", () => {
    const value = new Value(0);
    let calls = 0;
    const listener = () => calls++;
    const stop = value.subscribe(listener);
    value.subscribe(listener);
    value.set(1);
    stop();
    value.set(2);
    expect(calls).toBe(3);
  });
});

describe("Store", () => {
  it("patches fields and notifies only when one differs", () => {
    const store = new Store({ open: null as string | null, loading: false });
    const seen: { open: string | null; loading: boolean }[] = [];
    store.subscribe((state) => seen.push(state));
    store.patch({ loading: false });
    store.patch({ open: "c1", loading: true });
    store.patch({ open: "c1" });
    expect(seen).toEqual([{ open: "c1", loading: true }]);
  });
});

describe("watch", () => {
  it("calls back after a change of any value it watches, until stopped", () => {
    const a = new Value(1);
    const b = new Value("x");
    let calls = 0;
    const stop = watch([a, b], () => calls++);
    a.set(2);
    b.set("y");
    stop();
    a.set(3);
    expect(calls).toBe(2);
  });
});
