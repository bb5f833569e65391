/** Attachments: files picked, pasted, dropped or recorded into the composer, and those of sent messages. */
import * as api from "../api";
import type { Attachment, PendingAttachment } from "../api";
import { errorMessage } from "../api";
import { el } from "../dom";
import { PENDING_PREFIX, type Shared } from "./shared";

/** Audio files kept in memory after being played. */
const AUDIO_FILES_KEPT = 8;

export class AttachmentsController {
  /** Shown while files are dragged over the window. */
  readonly dropOverlay = el(
    "div",
    { class: "drop-overlay", "data-testid": "drop-overlay", hidden: true, "aria-hidden": "true" },
    el("div", { class: "drop-target" }, el("p", {}, "Drop images or audio to attach them")),
  );
  private readonly thumbnails = new Map<string, Promise<string>>();
  /** Audio files of messages, fetched when first played. */
  private readonly audioFiles = new Map<string, Promise<Blob>>();

  constructor(private readonly shared: Shared) {}

  async pickFiles(): Promise<void> {
    try {
      this.add(await api.pickFiles());
    } catch (error) {
      this.shared.toasts.show(`Could not attach the files: ${errorMessage(error)}`);
    }
  }

  async pasteFiles(files: File[]): Promise<void> {
    for (const file of files) {
      const audio = file.type.startsWith("audio/");
      try {
        const bytes = new Uint8Array(await file.arrayBuffer());
        const name = file.name || (audio ? "pasted audio" : "pasted-image.png");
        this.add([await api.addPastedFile(bytes, name)]);
      } catch (error) {
        this.shared.toasts.show(`Could not paste the ${audio ? "audio" : "image"}: ${errorMessage(error)}`);
      }
    }
  }

  /** A recording from the microphone, attached like a dropped WAV file. */
  async attachRecording(wav: Uint8Array): Promise<void> {
    const now = new Date();
    const time = `${String(now.getHours()).padStart(2, "0")}.${String(now.getMinutes()).padStart(2, "0")}`;
    try {
      this.add([await api.addPastedFile(wav, `Recording ${time}.wav`)]);
    } catch (error) {
      this.shared.toasts.show(`Could not attach the recording: ${errorMessage(error)}`);
    }
  }

  /** A paste the webview gave no file or text for: the image on the OS clipboard, if any. */
  async pasteFromClipboard(): Promise<void> {
    try {
      const attachment = await api.pasteClipboardImage();
      if (attachment) this.add([attachment]);
      else this.shared.toasts.show("Nothing to paste: the clipboard holds neither text nor an image.");
    } catch (error) {
      this.shared.toasts.show(`Could not paste the image: ${errorMessage(error)}`);
    }
  }

  remove(attachment: PendingAttachment): void {
    this.shared.state.pending.update((pending) => pending.filter((a) => a.id !== attachment.id));
    api.removePendingAttachment(attachment.id).catch(() => {});
  }

  onDrop(event: api.DropEvent): void {
    if (event.type === "hover") {
      this.dropOverlay.hidden = !event.active;
      return;
    }
    this.dropOverlay.hidden = true;
    this.add(event.attachments);
    for (const error of event.errors) this.shared.toasts.show(error);
  }

  /** Shows `url` as the thumbnail of the attachment `id` (a message being sent shows the composer's). */
  useThumbnail(id: string, url: string): void {
    this.thumbnails.set(id, Promise.resolve(url));
  }

  thumbnail(attachment: Attachment): Promise<string> {
    let url = this.thumbnails.get(attachment.id);
    if (!url) {
      url = api.attachmentThumbnail(attachment.id);
      this.thumbnails.set(attachment.id, url);
      url.catch(() => this.thumbnails.delete(attachment.id));
    }
    return url;
  }

  audioFile(attachment: Attachment): Promise<Blob> {
    let file = this.audioFiles.get(attachment.id);
    if (!file) {
      // Each is a whole file in memory: keep the few played last.
      const oldest = this.audioFiles.keys().next();
      if (this.audioFiles.size >= AUDIO_FILES_KEPT && !oldest.done) this.audioFiles.delete(oldest.value);
      // A message still being sent plays its file from the composer's.
      file = attachment.id.startsWith(PENDING_PREFIX)
        ? api.pendingAudio(attachment.id.slice(PENDING_PREFIX.length))
        : api.attachmentAudio(attachment.id);
      this.audioFiles.set(attachment.id, file);
      file.catch(() => this.audioFiles.delete(attachment.id));
    }
    return file;
  }

  /** Shows an attached image full size in a dialog; Esc, Close or a click outside it closes it. */
  async viewImage(attachment: Attachment): Promise<void> {
    const image = el("img", { class: "image-viewer-image", alt: attachment.fileName || "Attached image" });
    const close = el("button", { type: "button", "data-testid": "image-viewer-close" }, "Close");
    const dialog = el(
      "dialog",
      { class: "image-viewer", "aria-label": "Attached image", "data-testid": "image-viewer" },
      image,
      el("div", { class: "dialog-actions" }, close),
    );
    close.addEventListener("click", () => dialog.close());
    dialog.addEventListener("click", (event) => {
      if (event.target === dialog) dialog.close();
    });
    dialog.addEventListener("close", () => dialog.remove());
    this.shared.root.append(dialog);
    dialog.showModal();
    close.focus();
    try {
      image.src = await api.attachmentView(attachment.id);
    } catch (error) {
      dialog.close();
      this.shared.toasts.show(`Could not show the image: ${errorMessage(error)}`);
    }
  }

  private add(attachments: PendingAttachment[]): void {
    if (attachments.length === 0) return;
    const { state, toasts } = this.shared;
    state.pending.update((pending) => [...pending, ...attachments]);
    const model = state.model.get();
    if (model.state !== "ready") return;
    if (!model.vision && attachments.some((a) => a.kind === "image"))
      toasts.show("This model does not read images; remove them to send.");
    if (!model.audio && attachments.some((a) => a.kind === "audio"))
      toasts.show("This model does not hear audio; remove it to send.");
  }
}
