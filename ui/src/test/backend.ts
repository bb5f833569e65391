/** A small in-memory backend behind the fake Tauri bridge, shaped like the real commands. */
import type {
  ApiLogEntry,
  AppStatus,
  Conversation,
  ConversationSummary,
  DownloadProgress,
  FasterAnswers,
  GenerationEvent,
  ImportReport,
  LocalApiChange,
  LocalApiStatus,
  Message,
  ModelState,
  PendingAttachment,
  RecentModel,
  SearchHit,
  SendRequest,
  Sent,
  Settings,
  SettingsLimits,
  Usage,
} from "../api";
import { emit, handle } from "./fake-tauri";

export const READY: ModelState = {
  state: "ready",
  name: "Gemma 4 E4B",
  dir: "/models/gemma-4-e4b",
  contextWindow: 8192,
  vision: true,
  audio: true,
  checkpoint: {
    dir: "/models/gemma-4-e4b",
    name: "Gemma 4 E4B",
    source: "appFolder",
    sizeBytes: 5_220_000_000,
    quantizationBits: 4,
    quantizationMode: "affine",
    dtype: "bfloat16",
    parameters: 7_940_000_000,
    contextLength: 131_072,
    vision: true,
    audio: true,
  },
  towerIdle: { secs: 300, machineSecs: 300, chosen: false },
};

/** The downloads the backend offers (`DOWNLOADS` in src-tauri/src/model_setup.rs). */
export const DOWNLOADS = [
  { repo: "mlx-community/gemma-4-e4b-it-4bit", label: "Gemma 4 E4B, 4-bit (~5 GB)" },
  {
    repo: "mlx-community/gemma-4-e4b-it-8bit",
    label: "Gemma 4 E4B, 8-bit (~9 GB; slower, closer to the original)",
  },
];

/** The limits the backend sends (`SettingsLimits::default` in src-tauri/src/settings.rs). */
export const LIMITS: SettingsLimits = {
  temperature: { min: 0, max: 2 },
  topP: { min: 0.01, max: 1 },
  topK: { min: 0, max: 1000 },
  maxTokens: { min: 1, max: 131_072 },
  contextLength: { min: 512, max: 131_072 },
  imageTokenBudgets: [70, 140, 280, 560, 1120],
  systemPromptChars: 8000,
  audioHeardMs: 600_000,
};

export const SETTINGS: Settings = {
  systemPrompt: "",
  temperature: 1,
  topP: 0.95,
  topK: 64,
  maxTokens: 2048,
  contextLength: 8192,
  thinking: false,
  imageTokenBudget: 280,
  contextLengthChosen: false,
  machineContext: null,
};

export function message(partial: Partial<Message> & Pick<Message, "id" | "conversationId" | "role" | "text">): Message {
  return {
    position: 0,
    status: "complete",
    error: null,
    usage: null,
    model: null,
    createdAt: Date.now(),
    attachments: [],
    version: 1,
    versions: 1,
    ...partial,
  };
}

export function usage(partial: Partial<Usage> = {}): Usage {
  return {
    promptTokens: 100,
    reusedTokens: 0,
    generatedTokens: 50,
    timeToFirstTokenMs: 420,
    prefillTokensPerSecond: 900,
    decodeTokensPerSecond: 31.4,
    stopReason: "endOfTurn",
    ...partial,
  };
}

/** Settings → Local API as a new install has it: off, nothing generated yet. */
export const LOCAL_API_OFF: LocalApiStatus = {
  enabled: false,
  running: false,
  port: 7341,
  defaultPort: 7341,
  minPort: 1024,
  maxPort: 65535,
  address: "http://127.0.0.1:7341/v1",
  key: null,
  allowedOrigins: [],
  verbose: false,
  parallel: 4,
  defaultParallel: 4,
  maxParallel: 8,
  error: null,
  modelId: "gemma-4-e4b-it-4bit",
  answering: 0,
};

export class FakeBackend {
  status: AppStatus = {
    version: "0.1.0",
    modelsDir: "/Users/ada/Models",
    platform: "macos",
    model: READY,
    settingsLimits: LIMITS,
    downloads: DOWNLOADS,
  };
  settings: Settings = { ...SETTINGS };
  conversations = new Map<string, Conversation>();
  hits: SearchHit[] = [];
  /** Every generation started, oldest first. */
  readonly sent: Sent[] = [];
  private nextGeneration = 1;
  private nextId = 1;
  /** Every answer written to a user message (by its id), oldest first. */
  private answers = new Map<string, Message[]>();
  /** Where "Faster answers" stands. */
  faster: FasterAnswers = {
    state: "missing",
    repo: "mlx-community/gemma-4-E4B-it-assistant-bf16",
    modelsDir: "/models",
    failed: null,
  };
  /** Where Settings → Local API stands. */
  localApi: LocalApiStatus = { ...LOCAL_API_OFF };
  /** The model folders loaded lately (`recent_models`); `open_recent_model` loads one as ready. */
  recent: RecentModel[] = [];

  /** Ports "another program" holds. */
  busyPorts: number[] = [];
  apiLog: ApiLogEntry[] = [];
  /** What `import_json` answers next (null: the dialog was cancelled). */
  importReport: ImportReport | null = null;
  /** Every `send_message` request, oldest first. */
  readonly requests: SendRequest[] = [];
  /** Files attached and not sent, by id: `send_message` saves each as what it is. */
  readonly pendingFiles = new Map<string, PendingAttachment>();
  /** What `pick_files` hands out next. */
  picked: PendingAttachment[] = [];
  /** What the OS clipboard holds (written by `copy_text`); null: never written. */
  clipboard: string | null = null;
  /** Why `copy_text` fails (no display…), or null when it works. */
  clipboardError: string | null = null;
  /**
   * What `count_tokens` answers for the draft's text: by default a token per word; a test may
   * hold replies back. Pending attachments add `mediaTokens` each.
   */
  countTokens: (text: string) => number | Promise<number> = (text) => text.split(/\s+/).filter(Boolean).length;
  /** What a pending attachment adds to the count: an image 284 (280 soft tokens and 4 around
   * them), a recording one per 40 ms plus its 2 markers. */
  mediaTokens = (file: PendingAttachment): number =>
    file.kind === "audio" ? Math.ceil((file.durationMs ?? 0) / 40) + 2 : 284;
  /** Unsent drafts by chat id ("" the new chat), as `save_draft` keeps them. */
  drafts = new Map<string, string>();
  /** The chat open last, as `set_last_open` keeps it. */
  lastOpen: string | null = null;
  /** How many times `quit` was asked for. */
  quits = 0;

  constructor() {
    handle("app_status", () => this.status);
    handle("list_conversations", () => this.list());
    handle("get_conversation", ({ id }) => {
      const conversation = this.conversations.get(id as string);
      if (!conversation) throw { kind: "notFound", message: "That chat no longer exists." };
      return structuredClone(conversation);
    });
    handle("open_message", ({ conversationId }) => {
      const conversation = this.conversations.get(conversationId as string);
      if (!conversation) throw { kind: "notFound", message: "That chat no longer exists." };
      return structuredClone(conversation);
    });
    handle("rename_conversation", ({ id, title }) => {
      const conversation = this.conversations.get(id as string);
      if (conversation) conversation.title = title as string;
    });
    handle("set_pinned", ({ conversationId, pinned }) => {
      const conversation = this.conversations.get(conversationId as string);
      if (!conversation) throw { kind: "notFound", message: "That chat no longer exists." };
      conversation.pinned = pinned as boolean;
    });
    handle("delete_conversation", ({ id }) => {
      this.conversations.delete(id as string);
    });
    handle("search_conversations", () => this.hits);
    handle("send_message", ({ request }) => {
      this.requests.push(request as SendRequest);
      return this.send(request as SendRequest);
    });
    handle("set_system_prompt", ({ conversationId, prompt }) => {
      const conversation = this.conversations.get(conversationId as string);
      if (!conversation) throw { kind: "notFound", message: "That chat no longer exists." };
      conversation.systemPrompt = prompt as string | null;
    });
    handle("count_tokens", async ({ text, attachmentIds }) => {
      if (this.status.model.state !== "ready") throw { kind: "noModel", message: "No model is loaded." };
      const files = ((attachmentIds as string[] | undefined) ?? []).flatMap((id) => this.pendingFiles.get(id) ?? []);
      const media = files.reduce((sum, file) => sum + this.mediaTokens(file), 0);
      return (await this.countTokens(text as string)) + media;
    });
    handle("drafts", () => ({
      drafts: Object.fromEntries(this.drafts),
      lastOpen: this.lastOpen && this.conversations.has(this.lastOpen) ? this.lastOpen : null,
    }));
    handle("save_draft", ({ conversationId, text }) => {
      const key = (conversationId as string | null) ?? "";
      if (key && !this.conversations.has(key)) throw { kind: "notFound", message: "That chat no longer exists." };
      if ((text as string).trim()) this.drafts.set(key, text as string);
      else this.drafts.delete(key);
    });
    handle("set_last_open", ({ conversationId }) => {
      this.lastOpen = conversationId as string | null;
    });
    handle("quit", () => {
      this.quits += 1;
    });
    handle("regenerate", ({ conversationId }) => this.regenerate(conversationId as string));
    handle("edit_message", ({ conversationId, messageId, text }) =>
      this.edit(conversationId as string, messageId as string, text as string),
    );
    handle("stop_generation", () => true);
    handle("get_settings", () => ({ ...this.settings }));
    handle("save_settings", ({ settings }) => {
      this.settings = { ...(settings as Settings) };
      return { ...this.settings };
    });
    handle("memory_usage", () => ({
      residentBytes: 3_400_000_000,
      mlxActiveBytes: 2_900_000_000,
      mlxPeakBytes: 3_100_000_000,
    }));
    handle("attachment_thumbnail", ({ attachmentId }) => `data:image/png;base64,${String(attachmentId)}`);
    handle("attachment_view", ({ attachmentId }) => `data:image/png;base64,full-${String(attachmentId)}`);
    handle("remove_pending_attachment", () => undefined);
    handle("open_link", () => undefined);
    handle("pick_files", () => this.attach(this.picked));
    handle("pending_audio", ({ id }) => new TextEncoder().encode(`RIFF audio ${String(id)}`).buffer);
    handle(
      "attachment_audio",
      ({ attachmentId }) => new TextEncoder().encode(`RIFF audio ${String(attachmentId)}`).buffer,
    );
    handle("select_version", ({ conversationId, messageId, version }) =>
      this.selectVersion(conversationId as string, messageId as string, version as number),
    );
    handle("copy_text", ({ text }) => {
      if (this.clipboardError !== null) throw { kind: "invalidInput", message: this.clipboardError };
      this.clipboard = text as string;
    });
    handle("conversation_markdown", ({ id }) => `# ${this.conversations.get(id as string)?.title ?? ""}\n`);
    handle("export_markdown", ({ id }) => `/Users/ada/Documents/${String(id)}.md`);
    handle("export_json", ({ id }) => `/Users/ada/Documents/${typeof id === "string" ? id : "all"}.json`);
    handle("import_json", () => ({ report: this.importReport }));
    handle("faster_answers", () => this.faster);
    handle("recent_models", () => this.recent);
    handle("open_recent_model", ({ dir }) => {
      const recent = this.recent.find((known) => known.dir === dir);
      if (!recent || READY.state !== "ready")
        throw { kind: "invalidInput", message: `${String(dir)} is not one of the recent model folders` };
      this.recent = [recent, ...this.recent.filter((known) => known !== recent)];
      return { ...READY, name: recent.name, dir: recent.dir, checkpoint: { ...READY.checkpoint, ...recent } };
    });
    handle("set_tower_idle", ({ secs }) => {
      if (READY.state !== "ready") return READY;
      const chosen = typeof secs === "number";
      const towerIdle = { ...READY.towerIdle, secs: chosen ? secs : READY.towerIdle.machineSecs, chosen };
      const model = { ...READY, towerIdle };
      emit("model-state", model);
      return model;
    });
    handle("local_api", () => this.localApi);
    handle("mcp_servers", () => []);
    handle("api_log", () => this.apiLog);
    handle("set_local_api", ({ change }) => {
      const c = change as LocalApiChange;
      if (c.port < 1024 || c.port > 65535)
        throw { kind: "invalidInput", message: `the port must be between 1024 and 65535, not ${c.port}` };
      this.localApi = {
        ...this.localApi,
        enabled: c.enabled,
        running: c.enabled && !this.busyPorts.includes(c.port),
        port: c.port,
        address: `http://127.0.0.1:${c.port}/v1`,
        allowedOrigins: c.allowedOrigins,
        verbose: c.verbose,
        parallel: c.parallel,
        key: this.localApi.key ?? (c.enabled ? "gd-first-key-0123456789abcdefghijklmnopqrstuv" : null),
        error:
          c.enabled && this.busyPorts.includes(c.port)
            ? `port ${c.port} on 127.0.0.1 is already in use by another program; choose another port`
            : null,
      };
      return this.localApi;
    });
    handle("regenerate_api_key", () => {
      this.localApi = { ...this.localApi, key: "gd-second-key-0123456789abcdefghijklmnopqrstu" };
      return this.localApi;
    });
    handle("download_drafter", () => {
      this.faster = { state: "downloading", progress: drafterProgress(0) };
      return this.faster;
    });
    handle("cancel_drafter_download", () => undefined);
    handle("set_faster_answers", ({ on }) => {
      this.faster = on
        ? { state: "on", drafter: "/models/gemma-4-E4B-it-assistant-bf16", blockSize: 4, parameters: 78_517_764 }
        : { state: "off", drafter: "/models/gemma-4-E4B-it-assistant-bf16" };
      return this.faster;
    });
  }

  private selectVersion(conversationId: string, messageId: string, version: number): Conversation {
    const conversation = this.conversations.get(conversationId);
    const index = conversation?.messages.findIndex((m) => m.id === messageId) ?? -1;
    const question = conversation?.messages[index - 1];
    const versions = question ? this.answers.get(question.id) : undefined;
    const chosen = versions?.[version - 1];
    if (!conversation || !versions || !chosen) throw { kind: "invalidInput", message: "No such version." };
    conversation.messages = [
      ...conversation.messages.slice(0, index),
      { ...chosen, version, versions: versions.length },
    ];
    return structuredClone(conversation);
  }

  addConversation(
    title: string,
    messages: Omit<Message, "conversationId" | "position">[] = [],
    updatedAt = Date.now(),
  ): Conversation {
    const id = `c${this.nextId++}`;
    const conversation: Conversation = {
      id,
      title,
      model: "Gemma 4 E4B",
      pinned: false,
      createdAt: updatedAt,
      updatedAt,
      systemPrompt: null,
      messages: messages.map((m, position) => ({ ...m, conversationId: id, position })),
    };
    this.conversations.set(id, conversation);
    return conversation;
  }

  list(): ConversationSummary[] {
    return [...this.conversations.values()]
      .sort((a, b) => Number(b.pinned) - Number(a.pinned) || b.updatedAt - a.updatedAt)
      .map((c) => ({
        id: c.id,
        title: c.title,
        model: c.model,
        pinned: c.pinned,
        createdAt: c.createdAt,
        updatedAt: c.updatedAt,
        messageCount: c.messages.length,
        preview: c.messages.at(-1)?.text ?? null,
      }));
  }

  /** Sends generation events the way the engine does: deltas, then done. */
  get lastSent(): Sent {
    const sent = this.sent.at(-1);
    if (!sent) throw new Error("nothing was sent");
    return sent;
  }

  prefill(sent: Sent, done: number, total: number): void {
    this.event({
      type: "prefill",
      generationId: sent.generationId,
      conversationId: sent.conversation.id,
      messageId: sent.assistantMessageId,
      done,
      total,
    });
  }

  delta(sent: Sent, delta: string, tokenCount: number): void {
    this.event({
      type: "delta",
      generationId: sent.generationId,
      conversationId: sent.conversation.id,
      messageId: sent.assistantMessageId,
      delta,
      tokenCount,
    });
  }

  done(sent: Sent, partial: Partial<Usage> = {}, contextWindow = 8192): void {
    this.event({
      type: "done",
      generationId: sent.generationId,
      conversationId: sent.conversation.id,
      messageId: sent.assistantMessageId,
      usage: usage(partial),
      contextWindow,
    });
  }

  event(event: GenerationEvent): void {
    emit("generation", event);
  }

  /** Where "Faster answers" stands now, pushed as the backend does during a download. */
  fasterChanged(state: FasterAnswers): void {
    this.faster = state;
    emit("faster-answers", state);
  }

  private summary(conversation: Conversation): ConversationSummary {
    return this.list().find((c) => c.id === conversation.id) as ConversationSummary;
  }

  /** Keeps `files` as attached (as a drop, a paste or the picker does) and returns them. */
  attach(files: PendingAttachment[]): PendingAttachment[] {
    for (const file of files) this.pendingFiles.set(file.id, file);
    return files;
  }

  private send(request: SendRequest): Sent {
    const conversation = request.conversationId
      ? this.conversations.get(request.conversationId)
      : this.addConversation(request.text.slice(0, 40) || "New Chat");
    if (!conversation) throw { kind: "notFound", message: "That chat no longer exists." };
    if (!request.conversationId && request.systemPrompt !== undefined) conversation.systemPrompt = request.systemPrompt;
    const user = message({
      id: `m${this.nextId++}`,
      conversationId: conversation.id,
      position: conversation.messages.length,
      role: "user",
      text: request.text,
      attachments: request.attachmentIds.map((id) => {
        const file = this.pendingFiles.get(id);
        this.pendingFiles.delete(id);
        return file?.kind === "audio"
          ? {
              id: `a-${id}`,
              hash: "h",
              kind: "audio" as const,
              mime: file.mime,
              width: null,
              height: null,
              durationMs: file.durationMs,
              byteSize: file.byteSize,
              fileName: "hh/h.wav",
              name: file.name,
            }
          : {
              id: `a-${id}`,
              hash: "h",
              kind: "image" as const,
              mime: "image/png",
              width: 64,
              height: 48,
              durationMs: null,
              byteSize: 100,
              fileName: "x.png",
              name: file?.name ?? null,
            };
      }),
    });
    conversation.messages.push(user);
    this.drafts.delete(request.conversationId ?? "");
    return this.answer(conversation, user);
  }

  private regenerate(conversationId: string): Sent {
    const conversation = this.conversations.get(conversationId);
    if (!conversation) throw { kind: "notFound", message: "That chat no longer exists." };
    while (conversation.messages.at(-1)?.role === "assistant") conversation.messages.pop();
    const user = conversation.messages.at(-1) as Message;
    return this.answer(conversation, user);
  }

  private edit(conversationId: string, messageId: string, text: string): Sent {
    const conversation = this.conversations.get(conversationId);
    const index = conversation?.messages.findIndex((m) => m.id === messageId) ?? -1;
    if (!conversation || index < 0) throw { kind: "notFound", message: "That message no longer exists." };
    conversation.messages = conversation.messages.slice(0, index + 1);
    const user = { ...(conversation.messages[index] as Message), text };
    conversation.messages[index] = user;
    return this.answer(conversation, user);
  }

  private answer(conversation: Conversation, user: Message): Sent {
    const assistantMessageId = `m${this.nextId++}`;
    const earlier = this.answers.get(user.id) ?? [];
    const answer = message({
      id: assistantMessageId,
      conversationId: conversation.id,
      position: user.position + 1,
      role: "assistant",
      text: "",
      status: "streaming",
      model: this.status.model.state === "ready" ? this.status.model.name : null,
      version: earlier.length + 1,
      versions: earlier.length + 1,
    });
    this.answers.set(user.id, [...earlier, answer]);
    conversation.messages.push(answer);
    conversation.updatedAt = Date.now();
    const sent = {
      conversation: this.summary(conversation),
      userMessage: user,
      assistantMessageId,
      generationId: this.nextGeneration++,
    };
    this.sent.push(sent);
    return sent;
  }
}

/** The assistant model's download, `done` bytes in. */
export function drafterProgress(done: number): DownloadProgress {
  return {
    file: "model.safetensors",
    filesDone: 0,
    filesTotal: 5,
    bytesDone: done,
    bytesTotal: 159_000_000,
    bytesPerSecond: 12_000_000,
    etaSeconds: 12,
  };
}
