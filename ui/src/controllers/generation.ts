/** Asking for answers: send, regenerate, edit, stop, versions, and the answers as they stream in. */
import * as api from "../api";
import type { ConversationSummary, GenerationEvent, Message, ModelState, Sent } from "../api";
import { ApiError, errorMessage } from "../api";
import { announce } from "../live";
import { FrameScheduler, type LiveGeneration } from "../stream";
import type { ChatView } from "../views/chat";
import type { Composer } from "../views/composer";
import type { AttachmentsController } from "./attachments";
import { contextFullOf, contextRoom, contextWindow, PENDING_PREFIX, type Shared } from "./shared";

/** How many finished answers are remembered for command replies that come after the end event. */
const FINISHED_ANSWERS_KEPT = 20;

/** How a finished answer ended, kept for answers whose command reply comes after the end event. */
type FinishedAnswer = Pick<Message, "text" | "status" | "usage" | "error">;

export interface GenerationViews {
  chat: ChatView;
  composer: Composer;
}

export class GenerationController {
  private readonly finished = new Map<string, FinishedAnswer>();
  private readonly scheduler = new FrameScheduler<string>((ids) => this.renderStreams(ids));

  constructor(
    private readonly shared: Shared,
    private readonly views: GenerationViews,
    private readonly attachments: AttachmentsController,
    /** An answer ended: the chat list (titles, order) may have changed. */
    private readonly conversationsChanged: () => void,
  ) {}

  /** The answer being written in the open chat, if any. */
  openGeneration(): LiveGeneration | undefined {
    const openId = this.shared.state.chat.get().id;
    return openId === null ? undefined : this.shared.generations.forConversation(openId);
  }

  /** Why nothing can be sent now, in words; null when it can. */
  blockedReason(): string | null {
    const { state, generations } = this.shared;
    if (state.sending.get()) return "Sending…";
    const model = state.model.get();
    const elsewhere = generations.current();
    switch (model.state) {
      case "ready":
        if (elsewhere && !this.openGeneration()) {
          const title = state.conversations.get().find((c) => c.id === elsewhere.conversationId)?.title;
          return `Another chat${title ? ` (“${title}”)` : ""} is answering: send once it is done, or stop it there.`;
        }
        return null;
      case "loading":
        return `Loading the model: ${model.stage}`;
      case "downloading":
        return "The model is downloading…";
      case "failed":
        return "The model could not be loaded. Start a new chat to fix it.";
      case "none":
        return "No model yet. Start a new chat to download or choose one.";
    }
  }

  /**
   * Send was asked for a draft longer than the context has room for: nothing is sent, the draft
   * stays, and the context notice says whether it is too long on its own or for this chat.
   */
  tooLong(tokens: number): void {
    const { state } = this.shared;
    const window = contextWindow(state);
    const room = contextRoom(state);
    if (window === null || room === null) return;
    const conversationId = state.chat.get().id;
    state.contextFull.set(
      tokens > window
        ? { conversationId, reason: "message", needed: tokens, window }
        : { conversationId, reason: "conversation", needed: window - room + tokens, window },
    );
  }

  async send(text: string): Promise<void> {
    const { state, generations } = this.shared;
    const { chat, pending, sending } = state;
    if (sending.get() || generations.current() || state.model.get().state !== "ready") return;
    const attachments = pending.get();
    const { id: conversationId, serial, messages, systemPrompt } = chat.get();
    const optimistic: Message = {
      id: `${PENDING_PREFIX}message`,
      conversationId: conversationId ?? "",
      position: messages.length,
      version: 1,
      versions: 1,
      role: "user",
      text,
      status: "complete",
      error: null,
      usage: null,
      model: null,
      createdAt: Date.now(),
      attachments: attachments.map((attachment) => {
        const id = `${PENDING_PREFIX}${attachment.id}`;
        if (attachment.thumbnail !== null) this.attachments.useThumbnail(id, attachment.thumbnail);
        return {
          id,
          hash: "",
          kind: attachment.kind,
          mime: attachment.mime,
          width: attachment.width,
          height: attachment.height,
          durationMs: attachment.durationMs,
          byteSize: attachment.byteSize,
          fileName: attachment.name,
          name: attachment.name,
        };
      }),
    };
    const { composer } = this.views;
    sending.set(true);
    this.clearNotice(conversationId);
    chat.patch({ messages: [...messages, optimistic] });
    pending.set([]);
    composer.setText("");
    this.views.chat.scrollToBottom(false);
    try {
      const request: api.SendRequest = { conversationId, text, attachmentIds: attachments.map((a) => a.id) };
      // A new chat takes the prompt chosen for it; a saved one already has its own.
      if (conversationId === null && systemPrompt !== null) request.systemPrompt = systemPrompt;
      const sent = await api.sendMessage(request);
      this.accept(sent, serial);
    } catch (error) {
      if (serial === chat.get().serial)
        chat.update((open) => ({ ...open, messages: open.messages.filter((message) => message !== optimistic) }));
      if (!composer.text()) composer.setText(text);
      if (pending.get().length === 0) pending.set(attachments);
      this.failed(error, "Could not send the message", conversationId);
    } finally {
      sending.set(false);
      composer.focus();
    }
  }

  async regenerate(): Promise<void> {
    const { state, generations } = this.shared;
    const { id: conversationId, serial } = state.chat.get();
    if (!conversationId || generations.current() || state.sending.get()) return;
    state.sending.set(true);
    this.clearNotice(conversationId);
    try {
      this.accept(await api.regenerate(conversationId), serial);
    } catch (error) {
      this.failed(error, "Could not regenerate the answer", conversationId);
    } finally {
      state.sending.set(false);
    }
  }

  async edit(message: Message, text: string): Promise<void> {
    const { state, generations } = this.shared;
    const { chat, sending } = state;
    const { id: conversationId, serial, messages: before } = chat.get();
    if (!conversationId || generations.current() || sending.get()) return;
    chat.patch({ messages: [...before.filter((m) => m.position < message.position), { ...message, text }] });
    sending.set(true);
    this.clearNotice(conversationId);
    try {
      this.accept(await api.editMessage(conversationId, message.id, text), serial);
    } catch (error) {
      if (serial === chat.get().serial) chat.patch({ messages: before });
      this.failed(error, "Could not resend the message", conversationId);
    } finally {
      sending.set(false);
    }
  }

  /** Shows another version of a turn, with what followed it. */
  async selectVersion(message: Message, version: number): Promise<void> {
    const { state, generations } = this.shared;
    const { chat } = state;
    const { id: conversationId, serial } = chat.get();
    if (!conversationId || generations.current() || state.sending.get()) return;
    try {
      const conversation = await api.selectVersion(conversationId, message.id, version);
      if (serial !== chat.get().serial) return;
      chat.patch({ messages: conversation.messages.map((m) => this.withLiveState(m)) });
      announce(`Version ${version} of ${message.versions}`);
    } catch (error) {
      this.failed(error, "Could not show that version", conversationId);
    }
  }

  /** Stops the answer on screen (an answer in another chat is stopped there). */
  async stop(): Promise<void> {
    const live = this.openGeneration();
    if (!live) return;
    try {
      await api.stopGeneration(live.generationId);
    } catch (error) {
      this.shared.toasts.show(`Could not stop the answer: ${errorMessage(error)}`);
    }
  }

  /** A loaded message with what this window knows that the store may not have yet. */
  withLiveState(message: Message): Message {
    const live = this.shared.generations.forMessage(message.id);
    if (live) return { ...message, text: live.text, status: "streaming" };
    const finished = this.finished.get(message.id);
    return finished ? { ...message, ...finished } : message;
  }

  onGeneration(event: GenerationEvent): void {
    const { state, generations } = this.shared;
    const live = generations.apply(event);
    if (!live) return;
    const isOpen = event.conversationId === state.chat.get().id;
    if (event.type === "delta" || event.type === "prefill") {
      if (isOpen) this.scheduler.mark(event.messageId);
      this.updateGenerating();
      return;
    }
    this.scheduler.flush();
    let answer: FinishedAnswer;
    if (event.type === "done") {
      const stopped = event.usage.stopReason === "cancelled";
      answer = { text: live.text, status: stopped ? "stopped" : "complete", usage: event.usage, error: null };
      if (event.usage.stopReason === "contextFull")
        state.contextFull.set({
          conversationId: event.conversationId,
          reason: "cutOff",
          needed: null,
          window: event.contextWindow,
        });
    } else {
      answer = { text: live.text, status: "error", usage: null, error: event.error.message };
      if (event.error.kind === "contextFull")
        state.contextFull.set(contextFullOf(event.conversationId, event.error.context ?? null));
    }
    this.remember(event.messageId, answer);
    if (isOpen) {
      state.chat.update((open) => ({
        ...open,
        messages: open.messages.map((message) =>
          message.id === event.messageId ? { ...message, ...answer } : message,
        ),
      }));
      announce(
        answer.status === "complete"
          ? "Answer complete"
          : answer.status === "stopped"
            ? "Answer stopped"
            : "The answer failed",
      );
    }
    this.updateGenerating();
    this.conversationsChanged();
  }

  /**
   * Takes down the context notice of `conversationId` as a new answer is asked for — before the
   * command, so that a failure arriving (as an event) before its reply is shown, not cleared.
   */
  private clearNotice(conversationId: string | null): void {
    const { contextFull } = this.shared.state;
    if (contextFull.get()?.conversationId === conversationId) contextFull.set(null);
  }

  /** A generation has started: show the user's message and the answer taking shape. */
  private accept(sent: Sent, serial: number): void {
    const { state, generations } = this.shared;
    const live = generations.start(sent);
    this.upsertConversation(sent.conversation);
    const open = state.chat.get();
    const stillHere = serial === open.serial && (open.id === null || open.id === sent.conversation.id);
    if (stillHere) {
      const earlier = open.messages.filter(
        (message) => message.position < sent.userMessage.position && !message.id.startsWith(PENDING_PREFIX),
      );
      state.chat.patch({
        id: sent.conversation.id,
        title: sent.conversation.title,
        messages: [...earlier, sent.userMessage, this.answerFor(sent, live, this.replacedAnswer(open.messages, sent))],
      });
      announce("Gemma is answering");
    }
    this.updateGenerating();
  }

  /** For a regenerated answer: the answer it is a new version of (shown until now). */
  private replacedAnswer(shown: Message[], sent: Sent): Message | undefined {
    const question = shown[sent.userMessage.position];
    if (question?.id !== sent.userMessage.id) return undefined;
    const answer = shown[sent.userMessage.position + 1];
    return answer?.role === "assistant" ? answer : undefined;
  }

  private answerFor(sent: Sent, live: LiveGeneration | null, replaced?: Message): Message {
    const finished = this.finished.get(sent.assistantMessageId);
    const versions = (replaced?.versions ?? 0) + 1;
    return {
      id: sent.assistantMessageId,
      conversationId: sent.conversation.id,
      position: sent.userMessage.position + 1,
      role: "assistant",
      text: live?.text ?? finished?.text ?? "",
      status: finished?.status ?? "streaming",
      error: finished?.error ?? null,
      usage: finished?.usage ?? null,
      // The model loaded when it was asked: the one the backend records as its writer.
      model: loadedModelName(this.shared.state.model.get()),
      createdAt: Date.now(),
      attachments: [],
      version: versions,
      versions,
    };
  }

  private remember(messageId: string, answer: FinishedAnswer): void {
    this.finished.set(messageId, answer);
    if (this.finished.size > FINISHED_ANSWERS_KEPT) this.finished.delete(this.finished.keys().next().value ?? "");
  }

  private renderStreams(messageIds: string[]): void {
    const { state, generations } = this.shared;
    const openId = state.chat.get().id;
    for (const messageId of messageIds) {
      const live = generations.forMessage(messageId);
      if (!live || live.conversationId !== openId) continue;
      this.views.chat.stream(messageId, live.text, { tokenCount: live.tokenCount, reading: live.reading });
    }
  }

  private updateGenerating(): void {
    this.shared.state.generating.set(this.shared.generations.conversationIds());
  }

  private upsertConversation(summary: ConversationSummary): void {
    this.shared.state.conversations.update((list) => [summary, ...list.filter((c) => c.id !== summary.id)]);
  }

  /** Shows an error where it belongs: the context notice for a full context, a toast otherwise. */
  private failed(error: unknown, what: string, conversationId: string | null): void {
    if (error instanceof ApiError && error.kind === "contextFull")
      this.shared.state.contextFull.set(contextFullOf(conversationId, error.context));
    else this.shared.toasts.show(`${what}: ${errorMessage(error)}`);
  }
}

/** The name of the model loaded now, if one is. */
function loadedModelName(model: ModelState): string | null {
  return model.state === "ready" ? model.name : null;
}
