//! A chat turn end to end: the user's message is saved, the conversation is rendered for the
//! engine, the answer streams to the UI and into the database as it is written, and ends
//! complete, stopped or failed — never lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chats::{
    Attachment, AttachmentKind, Conversation, ConversationSummary, Message, MessageStatus, Role,
    Store, StreamWriter,
};
use engine::audio::{AudioClip, PreparedAudio};
use engine::events::ChatRequest;
use engine::image::{preprocess_path, Preprocessed, SoftTokenBudget};
use engine::template::{self, Part};
use engine::worker::Engine;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::answer::AnswerRecorder;
use crate::attachments::Attachments;
use crate::error::{CommandError, Error};
use crate::events::Events;
use crate::model_setup::Models;
use crate::settings::Settings;
use crate::sync::lock;

/// Longest conversation title made from the first message, in characters.
const TITLE_CHARS: usize = 60;
/// Preprocessed images kept for follow-up turns (each is a few MB of pixels).
const IMAGE_CACHE: usize = 8;

/// A message to send.
#[derive(Debug, Clone, Deserialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct SendRequest {
    /// `null` starts a new conversation.
    pub conversation_id: Option<String>,
    pub text: String,
    /// Ids of pending attachments, in the order to show them.
    pub attachment_ids: Vec<String>,
    /// For a new conversation: its own system prompt (`""`: none); left out, it follows the
    /// default in Settings. An existing conversation keeps its own (see `set_system_prompt`).
    #[serde(default)]
    #[ts(optional)]
    pub system_prompt: Option<String>,
}

/// What sending started.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct Sent {
    pub conversation: ConversationSummary,
    /// The message being answered.
    pub user_message: Message,
    /// The answer being written (status `streaming`).
    pub assistant_message_id: String,
    #[ts(type = "number")]
    pub generation_id: u64,
}

/// How an answer is coming along.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum GenerationEvent {
    /// The prompt is being read before the first token: `done` of `total` new prompt tokens
    /// (what the cache already held is not counted). Long prompts report every chunk.
    #[serde(rename_all = "camelCase")]
    Prefill {
        #[ts(type = "number")]
        generation_id: u64,
        conversation_id: String,
        message_id: String,
        #[ts(type = "number")]
        done: u64,
        #[ts(type = "number")]
        total: u64,
    },
    /// New text of the answer.
    #[serde(rename_all = "camelCase")]
    Delta {
        #[ts(type = "number")]
        generation_id: u64,
        conversation_id: String,
        message_id: String,
        delta: String,
        /// Tokens generated so far.
        #[ts(type = "number")]
        token_count: u64,
    },
    /// The answer is finished (complete, at a limit, or stopped by the user).
    #[serde(rename_all = "camelCase")]
    Done {
        #[ts(type = "number")]
        generation_id: u64,
        conversation_id: String,
        message_id: String,
        usage: chats::Usage,
        /// The context window the conversation was answered in.
        context_window: u32,
    },
    /// The answer failed; any text already written is kept.
    #[serde(rename_all = "camelCase")]
    Error {
        #[ts(type = "number")]
        generation_id: u64,
        conversation_id: String,
        message_id: String,
        error: CommandError,
    },
}

/// The generation in progress.
#[derive(Debug, Clone)]
struct Active {
    generation_id: u64,
    conversation_id: String,
}

/// Chat turns: one at a time, streamed, saved as they go.
pub struct Chat {
    store: Arc<Store>,
    engine: Arc<Engine>,
    models: Arc<Models>,
    attachments: Arc<Attachments>,
    events: Arc<dyn Events>,
    active: Arc<Mutex<Option<Active>>>,
    images: Mutex<HashMap<(String, u32), Arc<Preprocessed>>>,
}

impl Chat {
    pub fn new(
        store: Arc<Store>,
        engine: Arc<Engine>,
        models: Arc<Models>,
        attachments: Arc<Attachments>,
        events: Arc<dyn Events>,
    ) -> Self {
        Self {
            store,
            engine,
            models,
            attachments,
            events,
            active: Arc::default(),
            images: Mutex::default(),
        }
    }

    /// Saves the user's message (creating the conversation if needed) and starts the answer.
    pub fn send(&self, request: SendRequest, settings: &Settings) -> Result<Sent, Error> {
        let text = request.text.trim_end();
        if text.trim().is_empty() && request.attachment_ids.is_empty() {
            return Err(Error::Invalid(
                "type a message or attach a file first".into(),
            ));
        }
        self.check_can_start(&[])?;
        // Documents go into the turn as text; the other ids are images and recordings.
        let documents = self.attachments.resolve_documents(&request.attachment_ids);
        let file_ids: Vec<String> = request
            .attachment_ids
            .iter()
            .filter(|id| !self.attachments.is_document(id))
            .cloned()
            .collect();
        let attachments = self.attachments.resolve(&file_ids)?;
        let kinds: Vec<AttachmentKind> = attachments.iter().map(|a| a.kind).collect();
        self.check_can_start(&kinds)?;
        let conversation = match &request.conversation_id {
            Some(id) => self.store.get_conversation(id)?.id,
            None => {
                if let Some(prompt) = &request.system_prompt {
                    chats::check_system_prompt(prompt)?;
                }
                let title = match documents.first() {
                    Some((_, document)) if text.trim().is_empty() => document.name.clone(),
                    _ => title_from(text, kinds.first().copied()),
                };
                let id = self.store.create_conversation(&title)?.id;
                if let Some(prompt) = &request.system_prompt {
                    self.store.set_system_prompt(&id, Some(prompt))?;
                }
                id
            }
        };
        let user_message = self
            .store
            .add_message(&conversation, Role::User, text, &attachments)?;
        if !documents.is_empty() {
            self.store
                .add_message_documents(&conversation, &user_message.id, &documents)?;
        }
        self.attachments.sent(&file_ids);
        self.attachments.forget_documents(&request.attachment_ids);
        // Sent: the draft it was is done with. (A failure here only leaves that draft to
        // reappear; the message is saved.)
        let _ = self
            .store
            .save_draft(request.conversation_id.as_deref(), "");
        self.answer(&conversation, user_message, settings)
    }

    /// Answers the last user message again: the new answer is its next version, the earlier
    /// ones are kept.
    pub fn regenerate(&self, conversation_id: &str, settings: &Settings) -> Result<Sent, Error> {
        self.check_can_start(&[])?;
        let conversation = self.store.get_conversation(conversation_id)?;
        let last_user = last_user_message(&conversation)?;
        self.check_can_start(&kinds_of(&last_user))?;
        self.answer(conversation_id, last_user, settings)
    }

    /// Shows another version of a message's turn (and what followed it).
    pub fn select_version(
        &self,
        conversation_id: &str,
        message_id: &str,
        version: u32,
    ) -> Result<Conversation, Error> {
        if lock(&self.active)
            .as_ref()
            .is_some_and(|active| active.conversation_id == conversation_id)
        {
            return Err(Error::Busy);
        }
        self.store
            .select_version(conversation_id, message_id, version)?;
        Ok(self.store.get_conversation(conversation_id)?)
    }

    /// The conversation with `message_id` shown (the branch holding it chosen, unless an answer
    /// is being written in it).
    pub fn open_at(&self, conversation_id: &str, message_id: &str) -> Result<Conversation, Error> {
        let answering = lock(&self.active)
            .as_ref()
            .is_some_and(|active| active.conversation_id == conversation_id);
        if !answering {
            self.store.show_message(conversation_id, message_id)?;
        }
        Ok(self.store.get_conversation(conversation_id)?)
    }

    /// Sends an edited user message (keeping its images) as a new version of its turn: the
    /// original and everything after it stay one version back. Then answers it.
    pub fn edit(
        &self,
        conversation_id: &str,
        message_id: &str,
        text: &str,
        settings: &Settings,
    ) -> Result<Sent, Error> {
        self.check_can_start(&[])?;
        let conversation = self.store.get_conversation(conversation_id)?;
        let original = conversation
            .messages
            .iter()
            .find(|m| m.id == message_id)
            .ok_or_else(|| Error::from(not_found("message", message_id)))?;
        if original.role != Role::User {
            return Err(Error::Invalid(
                "only your own messages can be edited".into(),
            ));
        }
        self.check_can_start(&kinds_of(original))?;
        let text = text.trim_end();
        if text.trim().is_empty() && original.attachments.is_empty() {
            return Err(Error::Invalid("the edited message is empty".into()));
        }
        let files: Vec<chats::AttachmentInput> =
            original.attachments.iter().map(Into::into).collect();
        let user_message =
            self.store
                .add_message_version(conversation_id, message_id, text, &files)?;
        self.answer(conversation_id, user_message, settings)
    }

    /// Tokens a draft takes in the prompt, by the loaded model's tokenizer; answers at once, also
    /// while an answer is being written. Its text, and each pending attachment of
    /// `attachment_ids` as the template writes it (the checkpoint's chat_template.jinja): the
    /// images first, each `"\n\n"`, its begin marker, its soft tokens (from its size under the
    /// image budget in `settings`: 280 for a photo at the default), its end marker and
    /// `"\n\n"` again; then the text, trimmed; then each 30-second clip of a recording: its
    /// begin marker, one soft token per 40 ms of sound (at most 750) and its end marker
    /// (docs/AUDIO.md, "Token count"). The text between markers is tokenized piece by piece as
    /// the prompt holds it, the first piece after the newline that ends the turn's header.
    pub fn count_draft(
        &self,
        text: &str,
        attachment_ids: &[String],
        settings: &Settings,
    ) -> Result<usize, Error> {
        // Documents' text goes before the message's, in the same text (see `engine_messages`).
        let documents = self.attachments.pending_document_text(attachment_ids);
        let with_documents = format!("{documents}{text}");
        let text = if documents.is_empty() {
            text
        } else {
            with_documents.as_str()
        };
        let attachment_ids: Vec<String> = attachment_ids
            .iter()
            .filter(|id| !self.attachments.is_document(id))
            .cloned()
            .collect();
        if attachment_ids.is_empty() {
            return Ok(self.engine.count_tokens(text)?);
        }
        let mut tokens: usize = 0;
        let media = self
            .attachments
            .pending_soft_tokens(&attachment_ids, settings.image_budget()?)?;
        // The text around the images, in the pieces their markers cut it into: the header's
        // newline and "\n\n" before the first, "\n\n\n\n" between two, "\n\n" and the text
        // after the last. (Clips follow the text with nothing between them.)
        let images: usize = media
            .iter()
            .filter(|(kind, _)| *kind == AttachmentKind::Image)
            .map(|(_, runs)| runs.len())
            .sum();
        let mut pieces = vec!["\n".to_owned()];
        for _ in 0..images {
            if let Some(last) = pieces.last_mut() {
                last.push_str("\n\n");
            }
            pieces.push("\n\n".to_owned());
        }
        if let Some(last) = pieces.last_mut() {
            last.push_str(text.trim());
        }
        for piece in &pieces {
            tokens += self.engine.count_tokens(piece)?;
        }
        tokens -= self.engine.count_tokens("\n")?;
        for (_, runs) in &media {
            tokens += runs.iter().map(|n| n + 2).sum::<usize>();
        }
        Ok(tokens)
    }

    /// The prompt text of the documents sent whole with `message`, in order.
    fn document_prompts(&self, message: &Message) -> Result<Vec<String>, Error> {
        Ok(self
            .store
            .message_documents(&message.id)?
            .into_iter()
            .map(|d| d.prompt)
            .collect())
    }

    /// Reads a document to attach (call it off the UI thread), its prompt text's tokens counted
    /// by the loaded model's tokenizer; see [`Attachments::add_document`].
    pub fn add_document(
        &self,
        name: &str,
        bytes: &[u8],
        cancel: &std::sync::atomic::AtomicBool,
    ) -> Result<crate::attachments::PendingDocument, Error> {
        self.attachments.add_document(name, bytes, cancel, &|text| {
            Ok(self.engine.count_tokens(text)?)
        })
    }

    /// Asks a generation to stop; its answer is kept and marked stopped.
    pub fn stop(&self, generation_id: u64) -> bool {
        self.engine.cancel(generation_id)
    }

    /// Deletes a conversation, stopping its answer first if one is being written.
    pub fn delete_conversation(&self, id: &str) -> Result<(), Error> {
        if let Some(active) = lock(&self.active).clone() {
            if active.conversation_id == id {
                self.engine.cancel(active.generation_id);
            }
        }
        Ok(self.store.delete_conversation(id)?)
    }

    /// Stops the answer being written (if any) and waits up to a second for it to be saved.
    pub fn shutdown(&self) {
        let Some(active) = lock(&self.active).clone() else {
            return;
        };
        self.engine.cancel(active.generation_id);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while self.is_busy() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Whether an answer is being written.
    pub fn is_busy(&self) -> bool {
        lock(&self.active).is_some()
    }

    /// Refuses to start while an answer is being written, without a model, or with attached
    /// files of `kinds` the model cannot take in.
    fn check_can_start(&self, kinds: &[AttachmentKind]) -> Result<(), Error> {
        if self.is_busy() {
            return Err(Error::Busy);
        }
        match self.models.state() {
            crate::model_setup::ModelState::Ready { vision, audio, .. } => {
                if !vision && kinds.contains(&AttachmentKind::Image) {
                    return Err(Error::Invalid(
                        "this model cannot see images; remove the images to send".into(),
                    ));
                }
                if !audio && kinds.contains(&AttachmentKind::Audio) {
                    return Err(Error::Invalid(
                        "this model cannot hear audio; remove the audio to send".into(),
                    ));
                }
                Ok(())
            }
            _ => Err(Error::NoModel),
        }
    }

    /// Starts answering `user_message` in `conversation_id`: the prompt is the conversation
    /// shown up to and including it, so the answer it may already have (when regenerating) is
    /// never part of it.
    fn answer(
        &self,
        conversation_id: &str,
        user_message: Message,
        settings: &Settings,
    ) -> Result<Sent, Error> {
        let mut conversation = self.store.get_conversation(conversation_id)?;
        let asked = conversation
            .messages
            .iter()
            .position(|m| m.id == user_message.id)
            .ok_or_else(|| Error::from(not_found("message", &user_message.id)))?;
        conversation.messages.truncate(asked + 1);
        let budget = settings.image_budget()?;
        // The chat's own prompt, else the default; read per answer, so a change applies next.
        let system_prompt = conversation
            .system_prompt
            .as_deref()
            .unwrap_or(&settings.system_prompt);
        let media = engine_messages(
            &conversation,
            system_prompt,
            &mut |attachment| self.attachments.prepared_audio(attachment),
            &mut |message| self.document_prompts(message),
        )?;
        let images = media
            .images
            .iter()
            .map(|a| self.preprocessed(a, budget))
            .collect::<Result<Vec<_>, Error>>()?;
        let request = ChatRequest {
            conversation: conversation_id.to_owned(),
            messages: media.messages,
            images,
            audio: media.audio,
            thinking: settings.thinking,
            tools: Vec::new(),
            options: settings.generate_options(),
        };
        let writer =
            StreamWriter::begin_answer_to(self.store.clone(), conversation_id, &user_message.id)?;
        // Which model writes it, for the answer's info line and exports. Informational: an
        // answer is never refused for want of it.
        if let crate::model_setup::ModelState::Ready { name, .. } = self.models.state() {
            let _ = self.store.set_answer_model(writer.message_id(), &name);
        }
        let mut active = lock(&self.active);
        if active.is_some() {
            drop(active);
            let _ = writer.finish(
                MessageStatus::Error,
                None,
                Some("another answer was started"),
            );
            return Err(Error::Busy);
        }
        let finished = self.active.clone();
        let mut recorder = AnswerRecorder::new(
            writer,
            conversation_id,
            self.store.clone(),
            self.events.clone(),
            self.engine.canceller(),
            settings.context_length,
            move || *lock(&finished) = None,
        );
        let message_id = recorder.message_id().to_owned();
        // Registered before the engine can finish, so a fast answer cannot clear it first.
        let generation_id = self
            .engine
            .generate_first(request, move |event| recorder.on_event(event))?;
        *active = Some(Active {
            generation_id,
            conversation_id: conversation_id.to_owned(),
        });
        drop(active);
        let summary = self
            .store
            .list_conversations()?
            .into_iter()
            .find(|c| c.id == conversation_id)
            .ok_or_else(|| Error::from(not_found("conversation", conversation_id)))?;
        Ok(Sent {
            conversation: summary,
            user_message,
            assistant_message_id: message_id,
            generation_id,
        })
    }

    /// An attachment's pixels for `budget`, decoded once per conversation of use.
    fn preprocessed(
        &self,
        attachment: &Attachment,
        budget: SoftTokenBudget,
    ) -> Result<Arc<Preprocessed>, Error> {
        let key = (attachment.hash.clone(), budget.tokens() as u32);
        if let Some(image) = lock(&self.images).get(&key) {
            return Ok(image.clone());
        }
        let path = self.store.attachment_path(&attachment.id)?;
        let image = Arc::new(preprocess_path(&path, budget)?);
        let mut images = lock(&self.images);
        if images.len() >= IMAGE_CACHE {
            images.clear();
        }
        images.insert(key, image.clone());
        Ok(image)
    }
}

/// A conversation as the engine takes it.
struct EngineMessages {
    messages: Vec<template::Message>,
    /// The image attachments, in the order of their `Part::Image` items.
    images: Vec<Attachment>,
    /// Every recording's clips, in the order of their `Part::Audio` items.
    audio: Vec<Arc<AudioClip>>,
}

/// The conversation as the template takes it: in a user message its images, then its documents'
/// text followed by its own text (one text part, as typed: docs/DOCUMENTS.md), then each
/// recording's clips (the reference's order; docs/AUDIO.md), every clip its own audio
/// block. `decode` gives a recording's clips, `documents` a message's documents' prompt text.
/// Failed answers with no text and answers still streaming are left out.
fn engine_messages(
    conversation: &Conversation,
    system_prompt: &str,
    decode: &mut dyn FnMut(&Attachment) -> Result<Arc<PreparedAudio>, Error>,
    documents: &mut dyn FnMut(&Message) -> Result<Vec<String>, Error>,
) -> Result<EngineMessages, Error> {
    let mut out = EngineMessages {
        messages: Vec::new(),
        images: Vec::new(),
        audio: Vec::new(),
    };
    if !system_prompt.trim().is_empty() {
        out.messages.push(template::Message::text(
            template::Role::System,
            system_prompt.trim(),
        ));
    }
    for message in &conversation.messages {
        let role = match message.role {
            Role::System => template::Role::System,
            Role::User => template::Role::User,
            Role::Assistant => template::Role::Assistant,
        };
        let usable = match message.status {
            MessageStatus::Complete | MessageStatus::Stopped => true,
            MessageStatus::Error => !message.text.is_empty(),
            MessageStatus::Streaming => false,
        };
        if !usable {
            continue;
        }
        let mut parts: Vec<Part> = Vec::new();
        let mut sounds: Vec<Part> = Vec::new();
        if role == template::Role::User {
            for attachment in &message.attachments {
                match attachment.kind {
                    AttachmentKind::Image => {
                        parts.push(Part::Image);
                        out.images.push(attachment.clone());
                    }
                    AttachmentKind::Audio => {
                        for clip in &decode(attachment)?.clips {
                            sounds.push(Part::Audio);
                            out.audio.push(clip.clone());
                        }
                    }
                }
            }
        }
        // Documents' text, then the message's, as one text: what typing them all would give.
        let text = if role == template::Role::User {
            let mut text: String = documents(message)?.concat();
            text.push_str(&message.text);
            text
        } else {
            message.text.clone()
        };
        if !text.is_empty() || (parts.is_empty() && sounds.is_empty()) {
            parts.push(Part::Text { text });
        }
        parts.extend(sounds);
        let mut message_for_engine = template::Message::new(role, parts);
        if let Some(ids) = &message.generated {
            message_for_engine = message_for_engine.with_generated(ids.clone());
        }
        out.messages.push(message_for_engine);
    }
    Ok(out)
}

/// What a message has attached.
fn kinds_of(message: &Message) -> Vec<AttachmentKind> {
    message.attachments.iter().map(|a| a.kind).collect()
}

fn last_user_message(conversation: &Conversation) -> Result<Message, Error> {
    conversation
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .cloned()
        .ok_or_else(|| Error::Invalid("there is no message to answer again".into()))
}

/// A title from the first message: its first line, whitespace collapsed, cut at a word; for a
/// message of files alone, what its first file is.
fn title_from(text: &str, first_file: Option<AttachmentKind>) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut title = String::new();
    for word in words {
        if title.chars().count() + word.chars().count() + 1 > TITLE_CHARS {
            if title.is_empty() {
                title = word.chars().take(TITLE_CHARS).collect();
            }
            title.push('…');
            break;
        }
        if !title.is_empty() {
            title.push(' ');
        }
        title.push_str(word);
    }
    match (title.is_empty(), first_file) {
        (false, _) => title,
        (true, Some(AttachmentKind::Audio)) => "Audio".to_owned(),
        (true, _) => "Image".to_owned(),
    }
}

fn not_found(what: &'static str, id: &str) -> chats::Error {
    chats::Error::NotFound {
        what,
        id: id.to_owned(),
    }
}
