/**
 * The only module that talks to the Tauri bridge. Views call these functions, never `invoke`
 * or `listen`. Types come from `./bindings`, generated from the Rust types by ts-rs.
 */
import { invoke, type InvokeArgs, type InvokeOptions } from "@tauri-apps/api/core";
import { listen, type UnlistenFn } from "@tauri-apps/api/event";

import type { ApiActivity } from "./bindings/ApiActivity";
import type { ApiLogEntry } from "./bindings/ApiLogEntry";
import type { AppStatus } from "./bindings/AppStatus";
import type { Attachment } from "./bindings/Attachment";
import type { AttachmentKind } from "./bindings/AttachmentKind";
import type { CommandError } from "./bindings/CommandError";
import type { ContextNeed } from "./bindings/ContextNeed";
import type { Conversation } from "./bindings/Conversation";
import type { ConversationSummary } from "./bindings/ConversationSummary";
import type { DownloadOption } from "./bindings/DownloadOption";
import type { DownloadProgress } from "./bindings/DownloadProgress";
import type { Drafts } from "./bindings/Drafts";
import type { DropEvent } from "./bindings/DropEvent";
import type { ErrorKind } from "./bindings/ErrorKind";
import type { FasterAnswers } from "./bindings/FasterAnswers";
import type { GenerationEvent } from "./bindings/GenerationEvent";
import type { ImportReport } from "./bindings/ImportReport";
import type { LocalApiChange } from "./bindings/LocalApiChange";
import type { McpImported } from "./bindings/McpImported";
import type { ServerConfig } from "./bindings/ServerConfig";
import type { ServerView } from "./bindings/ServerView";
import type { ToolView } from "./bindings/ToolView";
import type { LocalApiStatus } from "./bindings/LocalApiStatus";
import type { Imported } from "./bindings/Imported";
import type { MemoryUsage } from "./bindings/MemoryUsage";
import type { Message } from "./bindings/Message";
import type { ModelCandidate } from "./bindings/ModelCandidate";
import type { MessageStatus } from "./bindings/MessageStatus";
import type { ModelState } from "./bindings/ModelState";
import type { SideDownload } from "./bindings/SideDownload";
import type { PendingAttachment } from "./bindings/PendingAttachment";
import type { RecentModel } from "./bindings/RecentModel";
import type { SearchHit } from "./bindings/SearchHit";
import type { SendRequest } from "./bindings/SendRequest";
import type { Sent } from "./bindings/Sent";
import type { Settings } from "./bindings/Settings";
import type { SpeechEvent } from "./bindings/SpeechEvent";
import type { QuickAskShortcut } from "./bindings/QuickAskShortcut";
import type { SettingsLimits } from "./bindings/SettingsLimits";
import type { SnippetPart } from "./bindings/SnippetPart";
import type { MachineContext } from "./bindings/MachineContext";
import type { TowerIdle } from "./bindings/TowerIdle";
import type { StopReason } from "./bindings/StopReason";
import type { Usage } from "./bindings/Usage";

export type {
  ApiActivity,
  ApiLogEntry,
  LocalApiChange,
  LocalApiStatus,
  FasterAnswers,
  AppStatus,
  Attachment,
  AttachmentKind,
  ContextNeed,
  Conversation,
  ConversationSummary,
  DownloadOption,
  DownloadProgress,
  Drafts,
  DropEvent,
  ErrorKind,
  GenerationEvent,
  ImportReport,
  Imported,
  MachineContext,
  MemoryUsage,
  Message,
  MessageStatus,
  ModelCandidate,
  ModelState,
  SideDownload,
  PendingAttachment,
  RecentModel,
  SearchHit,
  SendRequest,
  Sent,
  Settings,
  SettingsLimits,
  SnippetPart,
  SpeechEvent,
  QuickAskShortcut,
  StopReason,
  TowerIdle,
  Usage,
};

/** A failed command. `kind` is the backend's error kind, or "bridge" when Tauri itself refused. */
export class ApiError extends Error {
  readonly kind: ErrorKind | "bridge";
  /** For `contextFull`: what did not fit, when the backend said. */
  readonly context: ContextNeed | null;

  constructor(kind: ErrorKind | "bridge", message: string, context: ContextNeed | null = null) {
    super(message);
    this.name = "ApiError";
    this.kind = kind;
    this.context = context;
  }
}

/** Turns anything a rejected call or event carries into an ApiError. */
export function toApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  if (isCommandError(error)) return new ApiError(error.kind, error.message, error.context ?? null);
  // Tauri rejects with a plain string when a command is unknown or denied by a capability.
  const message = error instanceof Error ? error.message : String(error);
  return new ApiError("bridge", message);
}

/** The text to show a person for any error. */
export function errorMessage(error: unknown): string {
  return toApiError(error).message || "Something went wrong.";
}

// App and model

/** Version, models folder, platform and where the model stands. */
export function appStatus(): Promise<AppStatus> {
  return call("app_status");
}

/**
 * Opens the native folder dialog; resolves with the (possibly unchanged) model state. A usable
 * folder replaces the model in use (an answer being written is stopped first and kept).
 */
export function chooseModelFolder(): Promise<ModelState> {
  return call("choose_model_folder");
}

/**
 * Starts downloading one of `AppStatus.downloads` (the default model when `repo` is left out);
 * progress arrives through `onModelState`.
 */
export function downloadModel(repo: string | null = null): Promise<void> {
  return call("download_model", { repo });
}

/** Unloads the model and forgets it, back to the model picker. */
export function forgetModel(): Promise<ModelState> {
  return call("forget_model");
}

/** The model folders loaded lately that are still on this computer, newest first. */
export function recentModels(): Promise<RecentModel[]> {
  return call("recent_models");
}

/** Loads a folder of `recentModels` in place of the model in use, as choosing it would. */
export function openRecentModel(dir: string): Promise<ModelState> {
  return call("open_recent_model", { dir });
}

export function cancelDownload(): Promise<void> {
  return call("cancel_download");
}

export function memoryUsage(): Promise<MemoryUsage> {
  return call("memory_usage");
}

// Conversations

export function listConversations(): Promise<ConversationSummary[]> {
  return call("list_conversations");
}

export function getConversation(id: string): Promise<Conversation> {
  return call("get_conversation", { id });
}

/** A conversation opened at a message (a search hit): the versions holding it are shown. */
export function openMessage(conversationId: string, messageId: string): Promise<Conversation> {
  return call("open_message", { conversationId, messageId });
}

export function renameConversation(id: string, title: string): Promise<void> {
  return call("rename_conversation", { id, title });
}

/** Pins or unpins a chat; pinned chats lead the list. */
export function setPinned(conversationId: string, pinned: boolean): Promise<void> {
  return call("set_pinned", { conversationId, pinned });
}

/**
 * Gives a chat its own system prompt from its next answer on: null follows the default in
 * Settings, "" sends none.
 */
export function setSystemPrompt(conversationId: string, prompt: string | null): Promise<void> {
  return call("set_system_prompt", { conversationId, prompt });
}

/**
 * Tokens a draft takes as a message: `text` by the loaded model's tokenizer, and the pending
 * attachments `attachmentIds` as the prompt holds them (an image's soft tokens, a recording's).
 * Answers during an answer too.
 */
export function countTokens(text: string, attachmentIds: string[] = []): Promise<number> {
  return call("count_tokens", { text, attachmentIds });
}

/** Every unsent draft by chat id (the new chat's under ""), and the chat open last. */
export function drafts(): Promise<Drafts> {
  return call("drafts");
}

/** Keeps what is typed in a chat (null: the new chat); "" forgets it. */
export function saveDraft(conversationId: string | null, text: string): Promise<void> {
  return call("save_draft", { conversationId, text });
}

/** Remembers the chat open now (null: the new chat), to open it again next launch. */
export function setLastOpen(conversationId: string | null): Promise<void> {
  return call("set_last_open", { conversationId });
}

/** Quits the app (an answer being written is stopped and saved first). */
export function quit(): Promise<void> {
  return call("quit");
}

export function deleteConversation(id: string): Promise<void> {
  return call("delete_conversation", { id });
}

export function searchConversations(query: string): Promise<SearchHit[]> {
  return call("search_conversations", { query });
}

// Generation

/** Saves the user's message and starts the answer; a null conversation id starts a new chat. */
export function sendMessage(request: SendRequest): Promise<Sent> {
  return call("send_message", { request });
}

/** Answers the last user message again as a new version; earlier answers are kept. */
export function regenerate(conversationId: string): Promise<Sent> {
  return call("regenerate", { conversationId });
}

/** Shows version `version` (from 1) of a message's turn; resolves with the conversation shown. */
export function selectVersion(conversationId: string, messageId: string, version: number): Promise<Conversation> {
  return call("select_version", { conversationId, messageId, version });
}

/**
 * Sends an edited user message as a new version of its turn and answers it; the original and
 * everything after it stay, one version back.
 */
export function editMessage(conversationId: string, messageId: string, text: string): Promise<Sent> {
  return call("edit_message", { conversationId, messageId, text });
}

/** Stops a generation; false when it had already finished. */
export function stopGeneration(generationId: number): Promise<boolean> {
  return call("stop_generation", { generationId });
}

// Export and import

/**
 * Puts text on the OS clipboard. Through the backend: the page's clipboard refuses a write that
 * comes after an `await` (outside the click's user activation), in WebKitGTK and WKWebView alike.
 */
export function copyText(text: string): Promise<void> {
  return call("copy_text", { text });
}

/** The conversation shown, as Markdown (for the clipboard). */
export function conversationMarkdown(id: string): Promise<string> {
  return call("conversation_markdown", { id });
}

/** Asks where to save and writes the chat as Markdown; resolves with the file, null when cancelled. */
export function exportMarkdown(id: string): Promise<string | null> {
  return call("export_markdown", { id });
}

/** Asks where to save and writes one chat (or, for null, every chat) as JSON; null when cancelled. */
export function exportJson(id: string | null): Promise<string | null> {
  return call("export_json", { id });
}

/** Asks for a JSON export and imports what is not here yet. */
export function importJson(): Promise<Imported> {
  return call("import_json");
}

// Settings

export function getSettings(): Promise<Settings> {
  return call("get_settings");
}

/** Validates and stores the settings; resolves with what was stored. */
export function saveSettings(settings: Settings): Promise<Settings> {
  return call("save_settings", { settings });
}

// Attachments

/**
 * Opens the native file picker for images and audio; resolves with the files added (none when
 * cancelled). Files that cannot be used arrive as a drop event's errors.
 */
export function pickFiles(): Promise<PendingAttachment[]> {
  return call("pick_files");
}

/**
 * Hands pasted image or audio bytes (or a recording) to the backend, which checks and keeps
 * them until sent.
 */
export function addPastedFile(bytes: Uint8Array, fileName: string): Promise<PendingAttachment> {
  return call("add_pasted_file", bytes, { headers: { "x-file-name": headerSafe(fileName) } });
}

/** The bytes of a pending audio file, to play it. */
export async function pendingAudio(id: string): Promise<Blob> {
  return new Blob([await call<ArrayBuffer>("pending_audio", { id })]);
}

/** The bytes of a saved message's audio attachment, to play it. */
export async function attachmentAudio(attachmentId: string): Promise<Blob> {
  return new Blob([await call<ArrayBuffer>("attachment_audio", { attachmentId })]);
}

/**
 * Attaches the OS clipboard's image, for a paste the webview gave no file for (WebKitGTK);
 * resolves with null when the clipboard holds no image.
 */
export function pasteClipboardImage(): Promise<PendingAttachment | null> {
  return call("paste_clipboard_image");
}

export function removePendingAttachment(id: string): Promise<void> {
  return call("remove_pending_attachment", { id });
}

/** Where "Faster answers" (speculative decoding with the assistant model) stands. */
export function fasterAnswers(): Promise<FasterAnswers> {
  return call("faster_answers");
}

/** Switches "Faster answers"; resolves with where it then stands. */
export function setFasterAnswers(on: boolean): Promise<FasterAnswers> {
  return call("set_faster_answers", { on });
}

/** How long the image and audio encoders stay after their last use, in seconds (`null`: the machine's); applied at once. */
export function setTowerIdle(secs: number | null): Promise<ModelState> {
  return call("set_tower_idle", { secs });
}

/** Starts downloading the assistant model; progress arrives through `onFasterAnswers`. */
export function downloadDrafter(): Promise<FasterAnswers> {
  return call("download_drafter");
}

/** Stops the assistant model's download; what arrived is kept for the next try. */
export function cancelDrafterDownload(): Promise<void> {
  return call("cancel_drafter_download");
}

/** A `data:` URL of a saved attachment, full size (up to 2048 pixels a side). */
export function attachmentView(attachmentId: string): Promise<string> {
  return call("attachment_view", { attachmentId });
}

/** A `data:` URL of a saved attachment's thumbnail. */
export function attachmentThumbnail(attachmentId: string): Promise<string> {
  return call("attachment_thumbnail", { attachmentId });
}

// Links

/** Opens an http(s) URL in the system browser. Ask the user first. */
export function openLink(url: string): Promise<void> {
  return call("open_link", { url });
}

// Events

export function onModelState(handler: (state: ModelState) => void): Promise<UnlistenFn> {
  return listen<ModelState>("model-state", (event) => handler(event.payload));
}

export function onGeneration(handler: (event: GenerationEvent) => void): Promise<UnlistenFn> {
  return listen<GenerationEvent>("generation", (event) => handler(event.payload));
}

export function onFasterAnswers(handler: (state: FasterAnswers) => void): Promise<UnlistenFn> {
  return listen<FasterAnswers>("faster-answers", (event) => handler(event.payload));
}

/** Where Settings → Local API stands. */
export function localApi(): Promise<LocalApiStatus> {
  return call("local_api");
}

/** Switches the local API or changes its port, origins or verbosity; rejects in words. */
export function setLocalApi(change: LocalApiChange): Promise<LocalApiStatus> {
  return call("set_local_api", { change });
}

/** A new API key; the old one stops working at once. */
export function regenerateApiKey(): Promise<LocalApiStatus> {
  return call("regenerate_api_key");
}

/** The local API's request log so far, oldest first. */
export function apiLog(): Promise<ApiLogEntry[]> {
  return call("api_log");
}

export function onLocalApi(handler: (status: LocalApiStatus) => void): Promise<UnlistenFn> {
  return listen<LocalApiStatus>("local-api", (event) => handler(event.payload));
}

export function onApiRequest(handler: (entry: ApiLogEntry) => void): Promise<UnlistenFn> {
  return listen<ApiLogEntry>("api-request", (event) => handler(event.payload));
}

export function onApiActivity(handler: (activity: ApiActivity) => void): Promise<UnlistenFn> {
  return listen<ApiActivity>("api-activity", (event) => handler(event.payload));
}

export function onDrop(handler: (event: DropEvent) => void): Promise<UnlistenFn> {
  return listen<DropEvent>("drop", (event) => handler(event.payload));
}

// Read aloud

/** Reads `text` aloud with the system's voice as answer `id` (stopping any other). */
export function speak(id: string, text: string): Promise<void> {
  return call("speak", { id, text });
}

/** Stops reading aloud; the answer that was being read, if any. */
export function stopSpeaking(): Promise<string | null> {
  return call("stop_speaking");
}

export function onSpeech(handler: (event: SpeechEvent) => void): Promise<UnlistenFn> {
  return listen<SpeechEvent>("speech", (event) => handler(event.payload));
}

// Quick ask

/** The quick-ask shortcut and whether the system gave it to the app. */
export function quickAskShortcut(): Promise<QuickAskShortcut> {
  return call("quick_ask_shortcut");
}

/** Uses `shortcut` for quick ask from now on; the answer says whether the system accepted it. */
export function setQuickAskShortcut(shortcut: string): Promise<QuickAskShortcut> {
  return call("set_quick_ask_shortcut", { shortcut });
}

/** Opens the quick-ask window (as the shortcut does). */
export function showQuickAsk(): Promise<void> {
  return call("show_quick_ask");
}

/** Hides the quick-ask window. */
export function hideQuickAsk(): Promise<void> {
  return call("hide_quick_ask");
}

/** Continues a quick-ask conversation in the main window. */
export function quickAskHandOver(conversationId: string): Promise<void> {
  return call("quick_ask_hand_over", { conversationId });
}

/** The quick-ask window was opened by the shortcut. */
export function onQuickAskShown(handler: () => void): Promise<UnlistenFn> {
  return listen<null>("quick-ask-shown", () => handler());
}

/** (Main window) the quick-ask window handed this conversation over: show it. */
export function onOpenConversation(handler: (conversationId: string) => void): Promise<UnlistenFn> {
  return listen<string>("open-conversation", (event) => handler(event.payload));
}

/** Settings → Tools: every MCP server with its state. */
export function mcpServers(): Promise<ServerView[]> {
  return call("mcp_servers");
}

/** The tools of a ready server, each with its switch. */
export function mcpTools(name: string): Promise<ToolView[]> {
  return call("mcp_tools", { name });
}

/** Starts or stops a server; its first start needs the command line the user confirmed. */
export function mcpSetEnabled(
  name: string,
  enabled: boolean,
  confirmedCommandLine: string | null,
): Promise<ServerView> {
  return call("mcp_set_enabled", { name, enabled, confirmedCommandLine });
}

export function mcpSetToolEnabled(server: string, tool: string, enabled: boolean): Promise<void> {
  return call("mcp_set_tool_enabled", { server, tool, enabled });
}

/** Adds a server, or edits the one named `previous`. */
export function mcpSaveServer(config: ServerConfig, previous: string | null): Promise<ServerView> {
  return call("mcp_save_server", { config, previous });
}

export function mcpRemoveServer(name: string): Promise<void> {
  return call("mcp_remove_server", { name });
}

/** Imports the `mcpServers` of a file the user picks; null when cancelled. */
export function mcpImportFile(): Promise<McpImported | null> {
  return call("mcp_import_file");
}

export function onMcpServer(handler: (view: ServerView) => void): Promise<UnlistenFn> {
  return listen<ServerView>("mcp-server", (event) => handler(event.payload));
}

export type { UnlistenFn };

async function call<T>(command: string, args?: InvokeArgs, options?: InvokeOptions): Promise<T> {
  try {
    return await invoke<T>(command, args, options);
  } catch (error) {
    throw toApiError(error);
  }
}

function isCommandError(value: unknown): value is CommandError {
  if (typeof value !== "object" || value === null) return false;
  const { kind, message } = value as Record<string, unknown>;
  return typeof kind === "string" && typeof message === "string";
}

/** HTTP header values must be ASCII; anything else in a pasted file's name becomes "_". */
function headerSafe(name: string): string {
  const ascii = name.replace(/[^\x20-\x7e]/g, "_").trim();
  return ascii || "pasted file";
}
