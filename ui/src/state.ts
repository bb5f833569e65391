/** The window's state: small stores that commands and events change and the views follow. */
import type {
  AppStatus,
  ConversationSummary,
  Message,
  ModelState,
  PendingAttachment,
  RecentModel,
  Settings,
  SettingsLimits,
} from "./api";
import { sameMembers, Store, Value } from "./store";

/** The conversation in the main area. */
export interface OpenChat {
  /** null: a new chat, not saved yet. */
  id: string | null;
  messages: Message[];
  /** Its messages are still being read. */
  loading: boolean;
  /** Its title when it was opened or answered; the sidebar list's title, once there, wins. */
  title: string | null;
  /** Changes whenever the main area switches conversation; stale replies compare against it. */
  serial: number;
  /** Its own system prompt ("" for none), or null when it follows the default in Settings. */
  systemPrompt: string | null;
}

/** The first-run screen's own state. */
export interface SetupState {
  /** A folder is being checked or a download being started. */
  busy: boolean;
  error: string | null;
}

/**
 * The conversation (null: the new chat) whose context window is full, and how: a message too
 * long on its own (a new chat would not help), a conversation that outgrew the window, or an
 * answer cut off by it. The numbers are there when the backend gave them.
 */
export interface ContextFull {
  conversationId: string | null;
  reason: "message" | "conversation" | "cutOff";
  needed: number | null;
  window: number | null;
}

export function createState() {
  return {
    /** null until the backend answered (or when it could not start). */
    status: new Value<AppStatus | null>(null),
    model: new Value<ModelState>({ state: "none" }),
    setup: new Store<SetupState>({ busy: false, error: null }),
    /** The model folders loaded lately, newest first (the first-run screen, Settings → Model). */
    recentModels: new Value<RecentModel[]>([], (a, b) => JSON.stringify(a) === JSON.stringify(b)),
    /** null until read. */
    settings: new Value<Settings | null>(null),
    /** What each setting may be, as the backend enforces it; null until the status came. */
    settingsLimits: new Value<SettingsLimits | null>(null),
    conversations: new Value<ConversationSummary[]>([]),
    chat: new Store<OpenChat>({ id: null, messages: [], loading: false, title: null, serial: 0, systemPrompt: null }),
    /** A send, regenerate or edit command is on its way. */
    sending: new Value(false),
    /** Images attached in the composer, not sent yet. */
    pending: new Value<PendingAttachment[]>([]),
    /** Conversations with an answer being generated. */
    generating: new Value<ReadonlySet<string>>(new Set(), sameMembers),
    contextFull: new Value<ContextFull | null>(null),
  };
}

export type AppState = ReturnType<typeof createState>;
