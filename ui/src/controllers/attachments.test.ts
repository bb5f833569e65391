// @vitest-environment jsdom
// The window's attachments: images and audio picked, pasted, dropped or recorded.
// Whole-window tests run in jsdom (see test/window.ts).
import "../test/dialog-polyfill";

import { describe, expect, it, vi } from "vitest";

import type { PendingAttachment } from "../api";
import { READY } from "../test/backend";
import { callsOf, emit, handle } from "../test/fake-tauri";
import {
  root,
  backend,
  settle,
  mount,
  $,
  $$,
  composer,
  press,
  type,
  sendText,
  messages,
  click,
  useWindow,
} from "../test/window";

vi.mock("@tauri-apps/api/core", () => import("../test/fake-tauri"));
vi.mock("@tauri-apps/api/event", () => import("../test/fake-tauri"));

useWindow();

describe("attachments", () => {
  const image: PendingAttachment = {
    id: "p1",
    name: "cat.png",
    kind: "image",
    mime: "image/png",
    width: 640,
    height: 480,
    durationMs: null,
    byteSize: 12_000,
    thumbnail: "data:image/png;base64,AAAA",
    notice: null,
  };

  it("shows a drop overlay while files hover and adds dropped images", async () => {
    await mount();
    expect($("drop-overlay")?.hidden).toBe(true);
    emit("drop", { type: "hover", active: true });
    expect($("drop-overlay")?.hidden).toBe(false);
    emit("drop", { type: "added", attachments: [image], errors: ["notes.pdf is not an image"] });
    expect($("drop-overlay")?.hidden).toBe(true);
    expect($$("pending-attachment")).toHaveLength(1);
    expect($("pending-attachment")?.querySelector("img")?.getAttribute("src")).toBe(image.thumbnail);
    expect($("toasts")?.textContent).toContain("notes.pdf is not an image");
  });

  it("removes an attachment before sending", async () => {
    await mount();
    emit("drop", { type: "added", attachments: [image], errors: [] });
    click($("pending-attachment")?.querySelector("button") ?? null);
    await settle();
    expect($$("pending-attachment")).toHaveLength(0);
    expect(callsOf("remove_pending_attachment").at(-1)?.args).toEqual({ id: "p1" });
  });

  it("sends attachments with the message and shows them in the history", async () => {
    await mount();
    backend.picked = [image];
    click($("attach"));
    await settle();
    expect($$("pending-attachment")).toHaveLength(1);
    await sendText("What is this?");
    expect(callsOf("send_message").at(-1)?.args).toEqual({
      request: { conversationId: null, text: "What is this?", attachmentIds: ["p1"] },
    });
    expect($$("pending-attachment")).toHaveLength(0);
    await settle();
    const shown = messages()[0]?.querySelector<HTMLImageElement>('[data-testid="message-attachment"]');
    expect(shown?.getAttribute("src")).toBe("data:image/png;base64,a-p1");
    expect(callsOf("attachment_thumbnail").at(-1)?.args).toEqual({ attachmentId: "a-p1" });

    // A click shows it full size; Close (or Esc) closes it.
    click(shown?.closest("button") ?? null);
    await settle();
    const viewer = $("image-viewer") as HTMLDialogElement;
    expect(viewer.open).toBe(true);
    expect(viewer.querySelector("img")?.getAttribute("src")).toBe("data:image/png;base64,full-a-p1");
    expect(callsOf("attachment_view").at(-1)?.args).toEqual({ attachmentId: "a-p1" });
    click($("image-viewer-close"));
    await settle();
    expect($("image-viewer")).toBeNull();
  });

  it("sends pasted images to the backend as raw bytes", async () => {
    handle("add_pasted_file", () => image);
    await mount();
    const file = new File([new Uint8Array([137, 80, 78, 71])], "clip.png", { type: "image/png" });
    const paste = new Event("paste", { bubbles: true, cancelable: true }) as ClipboardEvent;
    Object.defineProperty(paste, "clipboardData", { value: { files: [file] } });
    composer().dispatchEvent(paste);
    expect(paste.defaultPrevented).toBe(true);
    await settle();
    const call = callsOf("add_pasted_file").at(-1);
    expect([...(call?.args as unknown as Uint8Array)]).toEqual([137, 80, 78, 71]);
    expect(call?.options).toEqual({ headers: { "x-file-name": "clip.png" } });
    expect($$("pending-attachment")).toHaveLength(1);
  });

  function paste(data: { files: File[]; text: string }): ClipboardEvent {
    const event = new Event("paste", { bubbles: true, cancelable: true }) as ClipboardEvent;
    Object.defineProperty(event, "clipboardData", {
      value: { files: data.files, getData: (type: string) => (type === "text/plain" ? data.text : "") },
    });
    composer().dispatchEvent(event);
    return event;
  }

  it("reads the clipboard's image in the backend when the paste brings no file (WebKitGTK)", async () => {
    handle("paste_clipboard_image", () => image);
    await mount();
    const event = paste({ files: [], text: "" });
    expect(event.defaultPrevented).toBe(true);
    await settle();
    expect(callsOf("paste_clipboard_image")).toHaveLength(1);
    expect($$("pending-attachment")).toHaveLength(1);
  });

  it("says so when a paste brings neither text nor an image", async () => {
    handle("paste_clipboard_image", () => null);
    await mount();
    paste({ files: [], text: "" });
    await settle();
    expect($$("pending-attachment")).toHaveLength(0);
    expect(root.querySelector(".toast")?.textContent).toContain(
      "Nothing to paste: the clipboard holds neither text nor an image.",
    );
  });

  it("leaves a text paste to the text field and asks the backend for nothing", async () => {
    handle("paste_clipboard_image", () => image);
    await mount();
    const event = paste({ files: [], text: "hello" });
    expect(event.defaultPrevented).toBe(false);
    await settle();
    expect(callsOf("paste_clipboard_image")).toHaveLength(0);
  });
});

describe("audio", () => {
  const voicemail: PendingAttachment = {
    id: "v1",
    name: "voicemail.wav",
    kind: "audio",
    mime: "audio/wav",
    width: null,
    height: null,
    durationMs: 65_000,
    byteSize: 2_080_044,
    thumbnail: null,
    notice: null,
  };

  it("adds dropped audio as a chip, sends it, and shows it in the history with a play button", async () => {
    await mount();
    emit("drop", { type: "added", attachments: backend.attach([voicemail]), errors: [] });
    expect($("pending-audio")?.textContent).toContain("voicemail.wav");
    expect($("pending-audio-duration")?.textContent).toBe("1:05");

    await sendText("What does the caller want?");

    expect(backend.requests.at(-1)?.attachmentIds).toEqual(["v1"]);
    await settle();
    const chip = messages()[0]?.querySelector<HTMLElement>('[data-testid="message-audio"]');
    expect(chip?.textContent).toContain("voicemail.wav");
    expect(chip?.textContent).toContain("1:05");
    expect(messages()[0]?.querySelector("img")).toBeNull();
    click(chip?.querySelector('[data-testid="message-audio-play"]') ?? null);
    await settle();
    expect(callsOf("attachment_audio").at(-1)?.args).toEqual({ attachmentId: "a-v1" });
    expect(chip?.querySelector("audio")?.getAttribute("src")).toMatch(/^blob:/);
  });

  it("says under a long recording, in the composer and in the history, how much was heard", async () => {
    await mount();
    const long = { ...voicemail, durationMs: 845_000, notice: "Only the first 10:00 of 14:05 will be heard." };
    emit("drop", { type: "added", attachments: backend.attach([long]), errors: [] });
    expect($("pending-audio-notice")?.textContent).toBe("Only the first 10:00 of 14:05 will be heard.");
    await sendText("Summarize the call");
    await settle();
    const notice = messages()[0]?.querySelector('[data-testid="message-audio-notice"]');
    expect(notice?.textContent).toBe("Only the first 10:00 of 14:05 was heard.");
  });

  it("keeps the text and the audio when the backend refuses to send", async () => {
    await mount();
    emit("drop", { type: "added", attachments: backend.attach([voicemail]), errors: [] });
    handle("send_message", () => {
      throw { kind: "invalidInput", message: "this model cannot hear audio; remove the audio to send" };
    });
    type("Transcribe it");
    press(composer(), "Enter");
    await settle();
    expect(composer().value).toBe("Transcribe it");
    expect($$("pending-audio")).toHaveLength(1);
    expect(root.querySelector(".toast")?.textContent).toContain("this model cannot hear audio");
    expect(messages()).toHaveLength(0);
  });

  it("records from the microphone and attaches the recording as a WAV file", async () => {
    const recorded = { ...voicemail, id: "r1", name: "Recording 10.30.wav", durationMs: 2_000 };
    handle("add_pasted_file", () => recorded);
    const track = { stop: vi.fn() };
    const graph: { process?: ((event: unknown) => void) | null } = {};
    vi.stubGlobal("navigator", {
      ...navigator,
      mediaDevices: { getUserMedia: () => Promise.resolve({ getTracks: () => [track] }) },
    });
    vi.stubGlobal(
      "AudioContext",
      class {
        sampleRate = 16_000;
        state = "running";
        destination = {};
        createMediaStreamSource = () => ({ connect: () => {}, disconnect: () => {} });
        createScriptProcessor = () => {
          const node = {
            connect: () => {},
            disconnect: () => {},
            set onaudioprocess(handler: ((event: unknown) => void) | null) {
              graph.process = handler;
            },
          };
          return node;
        };
        resume = () => Promise.resolve();
        close = () => Promise.resolve();
      },
    );
    try {
      await mount();
      type("what did I say?");
      click($("record"));
      await settle();
      expect($("recording")?.hidden).toBe(false);
      graph.process?.({ inputBuffer: { getChannelData: () => new Float32Array(32_000).fill(0.25) } });
      click($("record"));
      await settle();

      const call = callsOf("add_pasted_file").at(-1);
      const wav = call?.args as unknown as Uint8Array;
      expect(String.fromCharCode(...wav.subarray(0, 4))).toBe("RIFF");
      expect(wav.length).toBe(44 + 32_000 * 2);
      expect((call?.options as { headers: Record<string, string> }).headers["x-file-name"]).toMatch(
        /^Recording \d\d\.\d\d\.wav$/,
      );
      expect(track.stop).toHaveBeenCalled();
      expect($("pending-audio")?.textContent).toContain("Recording 10.30.wav");
      expect(composer().value).toBe("what did I say?");
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it("says so when the microphone is denied and keeps what was typed", async () => {
    vi.stubGlobal("navigator", {
      ...navigator,
      mediaDevices: { getUserMedia: () => Promise.reject(new DOMException("denied", "NotAllowedError")) },
    });
    try {
      await mount();
      type("still here");
      click($("record"));
      await settle();
      expect(root.querySelector(".toast")?.textContent).toContain("may not use the microphone");
      expect(composer().value).toBe("still here");
      expect(callsOf("add_pasted_file")).toHaveLength(0);
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it("turns the microphone off, saying why, for a model without an audio tower", async () => {
    if (READY.state !== "ready") throw new Error("READY is a ready model");
    backend.status = { ...backend.status, model: { ...READY, audio: false } };
    await mount();
    const record = $("record") as HTMLButtonElement;
    expect(record.disabled).toBe(true);
    expect(record.title).toBe("This model does not hear audio");
    emit("drop", { type: "added", attachments: backend.attach([voicemail]), errors: [] });
    expect(root.querySelector(".toast")?.textContent).toContain("This model does not hear audio");
  });
});
