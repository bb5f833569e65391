/**
 * The only module that talks to the Tauri bridge. Views call these functions, never `invoke`.
 * Types come from `./bindings`, which `cargo test -p gemma-desk` generates from the Rust types.
 */
import { invoke, type InvokeArgs } from "@tauri-apps/api/core";

import type { AppStatus } from "./bindings/AppStatus";
import type { CommandError } from "./bindings/CommandError";
import type { ErrorKind } from "./bindings/ErrorKind";
import type { InstalledModel } from "./bindings/InstalledModel";

export type { AppStatus, InstalledModel };

/** A failed command. `kind` is the backend's error kind, or "bridge" when Tauri itself refused. */
export class ApiError extends Error {
  readonly kind: ErrorKind | "bridge";

  constructor(kind: ErrorKind | "bridge", message: string) {
    super(message);
    this.name = "ApiError";
    this.kind = kind;
  }
}

/** The installed model (if any), the models folder and the app version. */
export function appStatus(): Promise<AppStatus> {
  return call<AppStatus>("app_status");
}

async function call<T>(command: string, args?: InvokeArgs): Promise<T> {
  try {
    return await invoke<T>(command, args);
  } catch (error) {
    throw toApiError(error);
  }
}

function isCommandError(value: unknown): value is CommandError {
  if (typeof value !== "object" || value === null) return false;
  const { kind, message } = value as Record<string, unknown>;
  return typeof kind === "string" && typeof message === "string";
}

function toApiError(error: unknown): ApiError {
  if (isCommandError(error)) return new ApiError(error.kind, error.message);
  // Tauri rejects with a plain string when a command is unknown or denied by a capability.
  const message = error instanceof Error ? error.message : String(error);
  return new ApiError("bridge", message);
}
