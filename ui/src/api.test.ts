import { emit } from "@tauri-apps/api/event";
import { clearMocks, mockIPC } from "@tauri-apps/api/mocks";
import { afterEach, describe, expect, it, vi } from "vitest";

import {
  addPastedFile,
  ApiError,
  appStatus,
  chooseModelFolder,
  errorMessage,
  onGeneration,
  onModelState,
  sendMessage,
  stopGeneration,
  type AppStatus,
  type ErrorKind,
  type GenerationEvent,
} from "./api";
import { DOWNLOADS, LIMITS } from "./test/backend";

afterEach(() => clearMocks());

const status: AppStatus = {
  version: "0.1.0",
  modelsDir: "/data/models",
  platform: "macos",
  model: { state: "none" },
  settingsLimits: LIMITS,
  downloads: DOWNLOADS,
};

describe("commands", () => {
  it("invokes the app_status command and returns its result", async () => {
    const calls: string[] = [];
    mockIPC((command) => {
      calls.push(command);
      return status;
    });

    await expect(appStatus()).resolves.toEqual(status);
    expect(calls).toEqual(["app_status"]);
  });

  it("passes arguments in the contract's shape", async () => {
    const seen: unknown[] = [];
    mockIPC((command, args) => {
      seen.push([command, args]);
      return command === "stop_generation" ? true : null;
    });

    await sendMessage({ conversationId: null, text: "hi", attachmentIds: ["a"] });
    await stopGeneration(3);

    expect(seen).toEqual([
      ["send_message", { request: { conversationId: null, text: "hi", attachmentIds: ["a"] } }],
      ["stop_generation", { generationId: 3 }],
    ]);
  });

  it("sends pasted files as a raw body with an ASCII file-name header", async () => {
    let body: unknown;
    mockIPC((_command, payload) => {
      body = payload;
      return { id: "p1" };
    });
    // mockIPC drops invoke options; check them on the bridge call itself.
    const internals = (window as unknown as { __TAURI_INTERNALS__: { invoke: (...args: unknown[]) => unknown } })
      .__TAURI_INTERNALS__;
    const spy = vi.spyOn(internals, "invoke");

    await addPastedFile(new Uint8Array([1, 2, 3]), "Bildschirmfoto 2025–06–01.png");

    expect(body).toEqual(new Uint8Array([1, 2, 3]));
    const options = spy.mock.calls[0]?.[2];
    expect(options).toEqual({ headers: { "x-file-name": "Bildschirmfoto 2025_06_01.png" } });
  });
});

describe("errors", () => {
  const kinds: ErrorKind[] = [
    "io",
    "noModel",
    "modelInvalid",
    "busy",
    "notFound",
    "invalidInput",
    "contextFull",
    "internal",
  ];

  it.each(kinds)("turns a backend %s error into an ApiError with its kind and message", async (kind) => {
    mockIPC(() => {
      throw { kind, message: `the ${kind} message` };
    });

    const error = await chooseModelFolder().catch((e: unknown) => e);

    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ kind, message: `the ${kind} message` });
    expect(errorMessage(error)).toBe(`the ${kind} message`);
  });

  it("reports a refusal by Tauri itself as a bridge error", async () => {
    mockIPC(() => {
      throw "app_status not allowed by ACL";
    });

    await expect(appStatus()).rejects.toMatchObject({ kind: "bridge", message: "app_status not allowed by ACL" });
  });

  it("never shows an empty message", () => {
    expect(errorMessage(new ApiError("internal", ""))).toBe("Something went wrong.");
  });
});

describe("events", () => {
  it("delivers payloads of model-state and generation events", async () => {
    mockIPC(() => null, { shouldMockEvents: true });
    const states: unknown[] = [];
    const generations: GenerationEvent[] = [];
    const stopStates = await onModelState((state) => states.push(state));
    await onGeneration((event) => generations.push(event));

    const event: GenerationEvent = {
      type: "delta",
      generationId: 1,
      conversationId: "c",
      messageId: "m",
      delta: "Hi",
      tokenCount: 1,
    };
    await emit("model-state", { state: "none" });
    await emit("generation", event);
    stopStates();
    await emit("model-state", { state: "none" });

    expect(states).toEqual([{ state: "none" }]);
    expect(generations).toEqual([event]);
  });
});
