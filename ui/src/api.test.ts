import { clearMocks, mockIPC } from "@tauri-apps/api/mocks";
import { afterEach, describe, expect, it } from "vitest";

import { ApiError, appStatus } from "./api";

afterEach(() => clearMocks());

describe("appStatus", () => {
  it("invokes the app_status command and returns its result", async () => {
    const status = { model: null, modelsDir: "/data/models", version: "0.1.0" };
    const calls: string[] = [];
    mockIPC((command) => {
      calls.push(command);
      return status;
    });

    await expect(appStatus()).resolves.toEqual(status);
    expect(calls).toEqual(["app_status"]);
  });

  it("turns a backend error into an ApiError with its kind and message", async () => {
    mockIPC(() => {
      throw { kind: "io", message: "could not create the models folder" };
    });

    const error = await appStatus().catch((e: unknown) => e);

    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ kind: "io", message: "could not create the models folder" });
  });

  it("reports a refusal by Tauri itself as a bridge error", async () => {
    mockIPC(() => {
      throw "app_status not allowed by ACL";
    });

    await expect(appStatus()).rejects.toMatchObject({ kind: "bridge", message: "app_status not allowed by ACL" });
  });
});
