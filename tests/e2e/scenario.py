#!/usr/bin/env python3
"""End to end in the real window: what a user does on a fresh install, with a tiny model.

 1. The first-run screen appears (no model: the home folder is empty, so no Hugging Face cache).
 2. "Choose Folder…" opens the native GTK folder dialog; typing the fixture's path loads it.
 3. A message streams in: the answer grows across polls, then completes, drafted by the
    assistant model beside the fixture (Faster answers is on by default: its stats say tokens
    per round; Settings → Faster answers names the drafter, checked in step 9).
 4. Esc stops a long answer mid-stream; its text is kept and marked stopped.
 5. Regenerate makes a new, complete answer; the stopped one stays as version 1/2, and ‹ ›
    flips between them. Editing the first question branches (the edited question is 2/2 with
    its own answer); switching back restores every later message. Copy conversation (⋯ menu)
    puts the chat as shown on the X clipboard (read back with xclip), every turn in order.
 6. Two chats at once: the other chat keeps its own draft, its Send waits for the answering one
    and says why, Esc there does not stop it; back in the answering chat, Esc stops it.
    A follow-up after a 150-token answer reuses the whole history from the cache (its stats say
    "N reused from the cache", N = the first prompt + its answer - 1).
    The context window set small in Settings: a conversation that outgrows it shows one notice
    offering New Chat (an empty chat) and Context Length… (Settings at that field); a message too
    long on its own turns Send off, and Enter only shows one notice with its length and only
    Context Length… (Settings with that field focused and in view): nothing is sent, no chat is
    made, the draft stays.
    After quitting and starting again, the model is loaded again by itself and the conversation
    is listed and opens with every message as it was.
 7. An image dropped from another window (a real XDND drop) shows as a pending thumbnail; sent,
    it shows in the message, and is still there after another restart.
 8. The image chat is exported as JSON and Markdown (native save dialogs), deleted, and
    imported back (native open dialog) with every message and its image; importing it again
    adds nothing.
 9. Search finds the conversation by a word of its first message.
    An image put on the X clipboard (xclip, as image/png) and pasted with Ctrl+V shows as a
    pending thumbnail (WebKitGTK hands the page no file: the app reads the clipboard itself); a
    paste of neither text nor image says so.
    Settings → Model shows the model in use (folder, weights, towers) and Choose Folder… there
    switches to another checkpoint, which answers; Forget goes back to the model picker, where a
    snapshot in a Hugging Face cache loads under its repository's name; deleted while the app is
    closed, that model is named at the next start ("… is gone: choose another").
    A spoken WAV (espeak-ng) dropped on the window shows as a chip with its name and length;
    asked about, the answer streams; after a restart the recording is in the history and its
    Play button loads the file.
    The microphone button records from WebKitGTK's mock capture device (turned on for the e2e
    run only: GEMMA_DESK_E2E_MOCK_MICROPHONE): the recording bar counts the seconds and shows a
    level; Esc stops it, the recording is a WAV chip, and sent, it is answered.
 10. A conversation of hostile markdown (written into the chats database while the app is closed,
    so it reaches the page like any stored answer) renders inert: nothing runs, loads or navigates,
    and a link in it only asks before opening in the browser.
    A second launch on the same data folder exits at once, asking the running one to show its
    window, which stays as it was.
11. Every run of the webview loaded nothing but the bundled app (checked before each restart too).
12. From the window: the CSP blocks inline script, eval and remote loads; commands outside the
    capability are refused; scripts cannot navigate the webview away or open another window.

With --offline (run.sh passes it) the whole scenario runs in a network namespace with only
loopback, and step 1 checks that it does.

Each step saves screenshots into --out (NN-*.png); a failing step names itself, says what it saw,
and saves FAILED-NN-*.png. Run it through tests/e2e/run.sh, which checks prerequisites and
provides the X server.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import wave
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import security
from desktop import Desktop, Rect
from harness import APP_TITLE, AppRun, Driver, Steps, TestFailure, check, free_port, isolated_env, wait_for
from webdriver import ELEMENT_KEY, KEY_ENTER, KEY_ESCAPE, Session, WebDriverError

T = TypeVar("T")

IDENTIFIER = "app.gemmadesk.desktop"  # tauri.conf.json `identifier`: names the default data folder
WELCOME = "Welcome to Gemma Desk"
FOLDER_DIALOG = "Choose a Gemma 4 model folder"  # the title commands.rs gives the dialog
EXPORT_DIALOG = "Export as JSON"  # the titles transfer.rs gives its dialogs
MARKDOWN_DIALOG = "Export chat as Markdown"
IMPORT_DIALOG = "Import chats"

FIRST_MESSAGE = "Hello Gemma, tell me about lighthouses."
SECOND_MESSAGE = "Now write a very long story about the sea."
IMAGE_MESSAGE = "What is in this picture?"
SPOKEN_TEXT = "The meeting moves to Thursday at ten in the small room."
AUDIO_MESSAGE = "What does the speaker say?"
MIC_MESSAGE = "What did I just say?"
RECORDING_NAME = re.compile(r"Recording \d\d\.\d\d\.wav")
SEARCH_WORD = "lighthouses"
# Pasted: about 1,200 tokens (3 a repeat), more than the smallest context length (512) on its own.
LONG_PASTE = " ".join(["many words"] * 400)
OTHER_CHAT_MESSAGE = "Write a long letter to a friend."
DRAFT_A = "A draft kept with the answering chat"
DRAFT_B = "A draft kept with the other chat"
# The Rust test a_follow_up_after_a_long_answer_reuses_the_whole_history, in the window.
COUNT_MESSAGE = "Count to twenty."
COUNT_FOLLOW_UP = "And backwards?"
COUNT_ANSWER = 150
COUNT_FOLLOW_UP_ANSWER = 8  # what is checked is its prompt: a short answer keeps the step short

# Answers short enough to finish in a few seconds in a debug build, or long enough to stop.
SHORT_ANSWER = 48
LONG_ANSWER = 4096

# A debug build on a loaded machine: loading the tiny model and answering take seconds, not ms.
START_TIMEOUT = 90
MODEL_TIMEOUT = 120
ANSWER_TIMEOUT = 180


# Gives up the CLIPBOARD selection, whoever owns it (X allows any client to set no owner).
CLEAR_CLIPBOARD = """
import gi
gi.require_version("Gdk", "3.0")
from gi.repository import Gdk
Gdk.init([])
clipboard = Gdk.atom_intern("CLIPBOARD", False)
Gdk.selection_owner_set(None, clipboard, Gdk.CURRENT_TIME, True)
Gdk.Display.get_default().flush()
"""


def testid(name: str) -> str:
    return f'[data-testid="{name}"]'


@dataclass(frozen=True)
class Message:
    id: str
    role: str
    status: str
    text: str
    images: int


class Window:
    """The app's page as a user sees it, read and driven through WebDriver."""

    def __init__(self, session: Session) -> None:
        self.s = session

    def need(self, css: str, what: str, timeout: float = 30) -> str:
        """The element matching `css` once it is shown."""
        return wait_for(what, lambda: self.shown(css), timeout)

    def shown(self, css: str) -> str | None:
        element = self.s.find(css)
        return element if element is not None and self.s.rendered(element) else None

    def click(self, css: str, what: str, timeout: float = 30) -> None:
        element = wait_for(what, lambda: (e := self.shown(css)) and self.s.enabled(e) and e, timeout)
        self.s.click(element)

    def messages(self) -> list[Message]:
        found = []
        for element in self.s.find_all(testid("message")):
            body = self.s.find(".message-body", root=element)
            found.append(
                Message(
                    id=self.s.attribute(element, "data-message-id") or "",
                    role=self.s.attribute(element, "data-role") or "",
                    status=self.s.attribute(element, "data-status") or "",
                    text=self.s.text(body).strip() if body else "",
                    images=len(self.s.find_all(testid("message-attachment"), root=element)),
                )
            )
        return found

    def last_message(self) -> Message | None:
        elements = self.s.find_all(testid("message"))
        if not elements:
            return None
        element = elements[-1]
        body = self.s.find(".message-body", root=element)
        return Message(
            id=self.s.attribute(element, "data-message-id") or "",
            role=self.s.attribute(element, "data-role") or "",
            status=self.s.attribute(element, "data-status") or "",
            text=self.s.text(body).strip() if body else "",
            images=0,
        )

    def model_ready(self, name: str, timeout: float) -> None:
        """Waits for the status bar to show model `name` ready; a failure to load fails at once."""

        def probe() -> bool:
            status = self.s.find(testid("model-status"))
            if status is None:
                return False
            state = self.s.attribute(status, "data-state")
            if state == "failed":
                raise TestFailure(f"the model failed to load: {self.s.attribute(status, 'title')}")
            error = self.shown(testid("setup-error"))
            if error is not None:
                raise TestFailure(f"the first-run screen shows an error: {self.s.text(error)!r}")
            text = self.s.text(status)
            return state == "ready" and text == name or (state, text)

        wait_for(f"model {name!r} ready in the status bar", probe, timeout, interval=0.25)

    def set_settings(self, values: dict[str, str]) -> dict[str, str]:
        """Opens Settings, sets each `setting-<key>` field to its value, and saves.

        Returns what the fields showed before, to restore them with.
        """
        self.click(testid("settings"), "the Settings button")
        return self.fill_settings(values)

    def fill_settings(self, values: dict[str, str]) -> dict[str, str]:
        """In the open Settings dialog, sets each `setting-<key>` field to its value, and saves."""
        dialog = self.need(testid("settings-dialog"), "the settings dialog")
        wait_for("the settings to load", lambda: self.s.enabled(self.s.find(testid("settings-save"))), 15)
        before = {}
        for key, value in values.items():
            field = self.s.find(testid(f"setting-{key}"), root=dialog)
            check(field is not None, f"the settings dialog has no field {key!r}")
            before[key] = self.s.property(field, "value")
            # As a user scrolls: the field to the middle, clear of the sticky Save bar.
            self.s.execute("arguments[0].scrollIntoView({block: 'center'})", {ELEMENT_KEY: field})
            if self.s.property(field, "tagName") == "SELECT":
                option = self.s.find(f'option[value="{value}"]', root=field)
                check(option is not None, f"setting {key!r} offers no choice {value!r}")
                self.s.click(option)
            else:
                self.s.clear(field)
                self.s.send_keys(field, value)
            shown = self.s.property(field, "value")
            check(shown == value, f"setting {key!r} shows {shown!r} after typing {value!r}")
        self.s.click(self.s.find(testid("settings-save")))

        def closed() -> bool:
            error = self.s.find(".settings-dialog .form-error")
            if error is not None and self.s.rendered(error):
                raise TestFailure(f"saving the settings failed: {self.s.text(error)!r}")
            return not self.s.property(dialog, "open")

        wait_for("the settings dialog to close after Save", closed, 15)
        return before

    def send(self, text: str) -> None:
        composer = self.need(testid("composer"), "the message field")
        wait_for("the message field to accept input", lambda: self.s.enabled(composer), 30)
        self.s.send_keys(composer, text + KEY_ENTER)

    def draft(self) -> str:
        """What the message field holds."""
        return self.s.property(self.need(testid("composer"), "the message field"), "value") or ""

    def hint(self) -> str:
        """The line under the message field (how to send, or why sending waits)."""
        element = self.s.find("#composer-hint")
        return self.s.text(element).strip() if element is not None else ""

    def notices(self) -> list[tuple[str, str, list[str]]]:
        """Each context notice shown: its title, its detail, and its buttons' labels."""
        found = []
        for notice in self.s.find_all(testid("context-notice")):
            title, detail = self.s.find("strong", root=notice), self.s.find("p", root=notice)
            found.append(
                (
                    self.s.text(title).strip() if title else "",
                    self.s.text(detail).strip() if detail else "",
                    [self.s.text(b).strip() for b in self.s.find_all("button", root=notice)],
                )
            )
        return found

    def click_notice_button(self, label: str) -> None:
        for button in self.s.find_all(f'{testid("context-notice")} button'):
            if self.s.text(button).strip() == label:
                self.s.click(button)
                return
        raise TestFailure(f"the context notice has no {label!r} button: {self.notices()}")

    def focused_testid(self) -> str | None:
        return self.s.execute("return document.activeElement && document.activeElement.dataset.testid || null")

    def active_conversation(self) -> str:
        return wait_for(
            "the open conversation highlighted in the sidebar",
            lambda: (e := self.s.find(f'{testid("conversation-item")}.active')) and self.s.attribute(e, "data-conversation-id"),
            15,
        )

    def open_conversation(self, conversation_id: str) -> None:
        item = self.need(
            f'{testid("conversation-item")}[data-conversation-id="{conversation_id}"] .item-button',
            f"conversation {conversation_id} in the sidebar",
        )
        self.s.click(item)
        wait_for("the conversation to open", lambda: self.active_conversation() == conversation_id, 15)

    def dismiss_toasts(self) -> None:
        """Closes the notes in the top corner (they cover the chat's header), as a user would."""
        for close in self.s.find_all(f'{testid("toasts")} button'):
            self.s.click(close)
        wait_for("the notes to close", lambda: not self.s.find_all(f'{testid("toasts")} .toast'), 10)

    def version_count(self, message_id: str) -> str | None:
        """The "1/2" under a message with several versions; None when it has one."""
        element = self.s.find(f'{testid("message")}[data-message-id="{message_id}"] {testid("version-count")}')
        return self.s.text(element).strip() if element else None

    def image_loaded(self, image: str) -> bool:
        """Whether an <img> shows a decoded picture (not a broken or missing one)."""
        return bool(self.s.property(image, "complete")) and (self.s.property(image, "naturalWidth") or 0) > 0


def watch_answer(window: Window, after: set[str], timeout: float) -> tuple[Message, list[str]]:
    """Follows the newest answer (an assistant message not in `after`) until it stops streaming.

    Returns it and the distinct texts seen while it was streaming, in order.
    """
    seen: list[str] = []

    def probe() -> Message | None:
        last = window.last_message()
        if last is None or last.role != "assistant" or last.id in after:
            return None
        if last.status == "streaming":
            if last.text and (not seen or seen[-1] != last.text):
                seen.append(last.text)
            return None
        return last

    final = wait_for("the answer to finish", probe, timeout, interval=0.05)
    return final, seen


def wait_streaming(window: Window, after: set[str], distinct: int, timeout: float) -> list[str]:
    """Waits until the newest answer has shown `distinct` different non-empty texts while streaming."""
    seen: list[str] = []

    def probe() -> bool:
        last = window.last_message()
        if last is None or last.role != "assistant" or last.id in after:
            return False
        if last.status != "streaming":
            raise TestFailure(f"the answer ended ({last.status}) before it could be watched streaming: {last.text[:80]!r}")
        if last.text and (not seen or seen[-1] != last.text):
            seen.append(last.text)
        return len(seen) >= distinct

    wait_for(f"{distinct} growing texts of the streaming answer", probe, timeout, interval=0.05)
    return seen


def check_grew(seen: list[str]) -> None:
    check(len(seen) >= 2, f"the answer did not stream: saw {len(seen)} text(s) while streaming: {seen!r}")
    check(len(seen[-1]) > len(seen[0]), f"the streamed text did not grow: first {seen[0]!r}, last {seen[-1]!r}")


def answer_stats(session: Session, message_id: str) -> tuple[str, int]:
    """The line under an answer, and the number of tokens it says were generated."""
    element = session.find(f'{testid("message")}[data-message-id="{message_id}"] {testid("answer-stats")}')
    text = session.text(element) if element else ""
    count = re.search(r"(?<![\d,.])(\d[\d,]*) tokens", text)
    check(count is not None, f"the answer shows no token count: {text!r}")
    return text, int(count.group(1).replace(",", ""))


def prompt_stats(session: Session, message_id: str) -> tuple[int, int]:
    """The prompt tokens of an answer and how many of them were reused from the cache.

    Read from the stats line's tooltip ("Prompt: N tokens (R reused)"); the line itself says
    "R reused from the cache" when R > 0, checked against it.
    """
    element = session.find(f'{testid("message")}[data-message-id="{message_id}"] {testid("answer-stats")}')
    check(element is not None, f"answer {message_id} shows no stats")
    # The window moves a title to data-tooltip on the first hover (ui/src/tooltip.ts).
    tooltip = session.attribute(element, "title") or session.attribute(element, "data-tooltip") or ""
    found = re.search(r"Prompt: ([\d,]+) tokens \(([\d,]+) reused\)", tooltip)
    check(found is not None, f"the answer's stats tooltip gives no prompt size: {tooltip!r}")
    prompt, reused = (int(group.replace(",", "")) for group in found.groups())
    text = session.text(element)
    line = re.search(r"([\d,]+) reused from the cache", text)
    shown = int(line.group(1).replace(",", "")) if line else 0
    check(shown == reused, f"the stats line says {shown} reused, its tooltip {reused}: {text!r} / {tooltip!r}")
    return prompt, reused


def answer_stats_text(session: Session, message_id: str) -> str:
    element = session.find(f'{testid("message")}[data-message-id="{message_id}"] {testid("answer-stats")}')
    return session.text(element) if element else ""


def wait_same(what: str, read: Callable[[], T], expected: T, timeout: float) -> None:
    """Polls `read` until it returns `expected`; on timeout the failure shows both."""
    last: list[T] = []

    def probe() -> bool:
        last[:] = [read()]
        return last[0] == expected

    try:
        wait_for(what, probe, timeout)
    except TestFailure:
        raise TestFailure(f"{what}: shows {last[0] if last else None!r}, expected {expected!r}") from None


def write_png(path: Path, width: int = 96, height: int = 64) -> None:
    """A small gradient picture (a valid PNG, with no imaging library needed)."""
    rows = b"".join(
        b"\x00" + bytes(channel for x in range(width) for channel in (x * 255 // width, y * 255 // height, 160))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def write_speech(path: Path, text: str) -> str:
    """Speaks `text` into a WAV file with espeak-ng; returns its length as the app shows it."""
    subprocess.run(["espeak-ng", "-v", "en", "-s", "150", "-w", str(path), text], check=True, capture_output=True, timeout=60)
    with wave.open(str(path)) as sound:
        return clip_length(sound.getnframes() / sound.getframerate())


def clip_length(seconds: float) -> str:
    """A clip's length as its chip says it: tenths of a second under 10 s, else m:ss."""
    if seconds < 9.95:
        return f"{max(0.1, math.floor(seconds * 10 + 0.5) / 10):.1f} s"
    whole = math.floor(seconds + 0.5)
    return f"{whole // 60}:{whole % 60:02d}"


def drop(scenario: "Scenario", win: Window, files: list[Path]) -> None:
    """Drags `files` from another window onto the app (a real XDND drop), overlay and all."""
    assert scenario.run is not None
    s = win.s
    app_rect = scenario.desktop.geometry(scenario.run.window)
    source, target = drag_positions(app_rect, scenario.desktop.screen_size())
    overlay = s.find(testid("drop-overlay"))
    nudges = iter(range(10**6))

    def while_over() -> None:
        def shown() -> bool:
            scenario.desktop.nudge(target, next(nudges) % 3)
            return s.css(overlay, "display") != "none"

        wait_for("the drop overlay while dragging over the window", shown, 20, interval=0.1)

    scenario.desktop.drag_files(files, source, target, while_over)


def float32_copy(model: Path, to: Path) -> Path:
    """A copy of `model` whose bfloat16 tensors are float32 (exactly: a bf16 is the top half of
    an f32), as the app's tests do (`fixture_f32`): on the random-weight fixture, bf16 logits tie
    often enough that two paths to the same prompt (a fresh prefill, the cache) can pick
    different greedy tokens; in f32 they do not."""
    to.mkdir(parents=True)
    for file in model.iterdir():
        if file.suffix != ".safetensors":
            shutil.copy(file, to / file.name)
            continue
        data = file.read_bytes()
        size = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8 : 8 + size])
        body, out, offset = data[8 + size :], {}, 0
        chunks = []
        for name, info in sorted(((n, i) for n, i in header.items() if n != "__metadata__"), key=lambda item: item[1]["data_offsets"][0]):
            start, end = info["data_offsets"]
            raw = body[start:end]
            if info["dtype"] == "BF16":
                wide = bytearray(len(raw) * 2)
                wide[2::4], wide[3::4] = raw[0::2], raw[1::2]
                raw, info = bytes(wide), {**info, "dtype": "F32"}
            out[name] = {**info, "data_offsets": [offset, offset + len(raw)]}
            chunks.append(raw)
            offset += len(raw)
        if "__metadata__" in header:
            out["__metadata__"] = header["__metadata__"]
        encoded = json.dumps(out).encode()
        encoded += b" " * (-len(encoded) % 8)
        (to / file.name).write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))
    return to


def words(text: str) -> str:
    """The text's letters and digits, lower-cased, one space apart (Markdown as source or as shown)."""
    return " ".join(re.findall(r"[^\W_]+", text.lower()))


def drag_positions(app: Rect, screen: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """Where the 80×80 drag source goes (beside the app, not over it) and where to drop."""
    width, height = screen
    for x, y in ((app.x + app.width + 5, app.y), (app.x - 85, app.y), (app.x, app.y + app.height + 5), (width - 85, 5)):
        source = Rect(x, y, 80, 80)
        if x >= 0 and y >= 0 and x + 80 <= width and y + 80 <= height and not source.overlaps(app):
            return (x, y), app.center()
    raise TestFailure(f"no room beside the app window {app} on a {width}×{height} screen for the drag source")


class Scenario:
    def __init__(self, args: argparse.Namespace, temp: Path) -> None:
        self.args = args
        self.temp = temp
        self.home, self.data_dir = temp / "home", temp / "data"
        self.home.mkdir()
        self.image = temp / "pictures" / "sunset.png"
        self.image.parent.mkdir()
        write_png(self.image)
        self.speech = temp / "recordings" / "meeting note.wav"
        self.speech.parent.mkdir()
        self.speech_length = write_speech(self.speech, SPOKEN_TEXT)
        self.env = isolated_env(self.home)
        self.desktop = Desktop(args.gtk_python, self.env)
        self.steps = Steps(args.out, self.desktop)
        self.driver = Driver(args.tauri_driver, self.env, args.out / "tauri-driver.log")
        self.run: AppRun | None = None
        self.window: Window | None = None

    def launch(self) -> Window:
        self.run = AppRun(self.driver, self.desktop, self.args.app, self.data_dir)
        self.steps.session = self.run.session
        self.window = Window(self.run.session)
        security.start_origin_log(self.run.session)
        return self.window

    def restart(self, while_closed: Callable[[], None] | None = None) -> Window:
        """Quits the app (after checking what its webview loaded) and starts it again."""
        assert self.run is not None
        security.check_bundled_origin(self.run.session)
        self.steps.session = None
        run, self.run = self.run, None
        run.quit()
        if while_closed is not None:
            while_closed()
        return self.launch()

    def paste_text(self, win: Window, text: str) -> None:
        """Puts `text` on the X clipboard and pastes it into the message field with Ctrl+V."""
        assert self.run is not None
        self.set_clipboard(text)
        win.s.click(win.need(testid("composer"), "the message field"))
        self.desktop.focus(self.run.window)
        self.desktop.keys("ctrl+v")
        wait_same("the pasted text in the message field", win.draft, text, 30)

    def set_clipboard(self, text: str) -> None:
        subprocess.run(["xclip", "-selection", "clipboard", "-i"], input=text.encode(), env=self.env, check=True, timeout=10)

    def clipboard(self) -> str:
        """The X clipboard's text, as another program reads it."""
        out = subprocess.run(["xclip", "-o", "-selection", "clipboard"], env=self.env, capture_output=True, check=True, timeout=10)
        return out.stdout.decode()

    def close(self) -> list[str]:
        problems = []
        if self.run is not None:
            try:
                self.run.quit()
            except (TestFailure, WebDriverError) as err:
                problems.append(f"could not quit the app: {err}")
        return problems + self.driver.stop()

    def main(self) -> None:
        model = self.args.model.resolve()
        steps = self.steps

        with steps.step("the first-run screen appears without a model"):
            if self.args.offline:
                security.check_offline()
            win = self.launch()
            s = win.s
            first_run = win.need(testid("first-run"), "the first-run screen", timeout=START_TIMEOUT)
            heading = s.text(s.find("h1", root=first_run))
            check(heading == WELCOME, f"the first-run heading is {heading!r}, expected {WELCOME!r}")
            check(s.title() == APP_TITLE, f"the document title is {s.title()!r}")
            status = s.text(win.need(testid("model-status"), "the status bar"))
            check(status == "No model", f"the status bar shows {status!r}, expected 'No model'")
            models_dir = self.data_dir / "models"
            shown = s.text(win.need("#models-dir", "the models folder on the first-run screen"))
            check(shown == str(models_dir), f"models folder shown as {shown!r}, expected {str(models_dir)!r}")
            check(models_dir.is_dir(), f"the app did not create the models folder {models_dir}")
            check((self.data_dir / "webview").is_dir(), f"the webview keeps its storage outside {self.data_dir}")
            # If the CSP blocked the stylesheet, the layout grid would be missing.
            root = s.find("#app")
            check(root is not None and s.css(root, "display") == "grid", "styles.css is not applied")
            time.sleep(1)  # WebKit paints asynchronously: let the first-run screen reach the surface
            steps.shot("first-run")

        with steps.step("Choose Folder… opens the native dialog; the chosen model loads"):
            win.click(testid("choose-folder"), "the Choose Folder… button")
            self.desktop.choose_folder(
                FOLDER_DIALOG, model, timeout=30, before_accept=lambda: steps.screen_shot("folder-dialog")
            )
            win.model_ready(model.name, MODEL_TIMEOUT)
            check(s.find(testid("first-run")) is None, "the first-run screen is still shown with the model ready")
            win.need(testid("composer"), "the message field")
            steps.shot("model-ready")

        with steps.step("a message streams in and completes"):
            # Greedy sampling makes the random-weight model's answers repeatable; image detail 70
            # keeps step 7's image prompt small.
            win.set_settings({"temperature": "0", "maxTokens": str(SHORT_ANSWER), "imageTokenBudget": "70"})
            win.send(FIRST_MESSAGE)
            seen = wait_streaming(win, set(), distinct=2, timeout=ANSWER_TIMEOUT)
            check(win.shown(testid("stop")) is not None, "no Stop button while the answer streams")
            steps.shot("streaming")
            answer, more = watch_answer(win, set(), ANSWER_TIMEOUT)
            seen += more
            check(answer.status == "complete", f"the answer ended {answer.status!r}: {answer.text[:120]!r}")
            check_grew(seen)
            check(answer.text, "the completed answer is empty")
            stats, generated = answer_stats(s, answer.id)
            check(generated <= SHORT_ANSWER, f"{generated} tokens were generated with the limit set to {SHORT_ANSWER}: {stats!r}")
            # The fixture's assistant drafter sits beside the model: Faster answers is on by default.
            # The line says it only when drafts were kept; the details always do.
            line = s.find(f'{testid("message")}[data-message-id="{answer.id}"] {testid("answer-stats")}')
            details = (s.attribute(line, "title") if line else None) or ""
            check("tokens per check" in details, f"the answer was not drafted (Faster answers, on by default): {details!r}")
            check(win.shown(testid("send")) is not None, "the Send button did not come back")
            messages = win.messages()
            check([m.role for m in messages] == ["user", "assistant"], f"messages: {messages}")
            check(messages[0].text == FIRST_MESSAGE, f"the user message reads {messages[0].text!r}")
            print(f"e2e:   streamed {len(seen)} growing texts; stats: {stats}")
            steps.shot("answer-complete")

        with steps.step("Esc stops an answer mid-stream and keeps it, marked stopped"):
            win.set_settings({"maxTokens": str(LONG_ANSWER)})
            before = {m.id for m in win.messages()}
            win.send(SECOND_MESSAGE)
            wait_streaming(win, before, distinct=2, timeout=ANSWER_TIMEOUT)
            pressed = time.monotonic()
            s.send_keys(s.find(testid("composer")), KEY_ESCAPE)
            stopped, _ = watch_answer(win, before, timeout=30)
            took = time.monotonic() - pressed
            check(stopped.status == "stopped", f"after Esc the answer is {stopped.status!r}, expected 'stopped'")
            check(stopped.text, "the stopped answer lost its text")
            stats, generated = answer_stats(s, stopped.id)
            check("Stopped" in stats, f"the stopped answer is not marked 'Stopped': {stats!r}")
            check(generated < LONG_ANSWER, f"the answer ran to its limit before Esc: {stats!r}")
            check(win.shown(testid("send")) is not None, "the Send button did not come back after stopping")
            print(f"e2e:   stopped {took:.2f}s after Esc (WebDriver round trips included); stats: {stats}")
            steps.shot("stopped")

        with steps.step("Regenerate keeps the stopped answer as version 1/2, and ‹ › flips between them"):
            win.set_settings({"maxTokens": str(SHORT_ANSWER)})
            before = {m.id for m in win.messages()}
            win.click(f'{testid("message")}[data-message-id="{stopped.id}"] {testid("regenerate")}', "Regenerate on the stopped answer")
            answer, _ = watch_answer(win, before, ANSWER_TIMEOUT)
            check(answer.status == "complete", f"the regenerated answer ended {answer.status!r}")
            check(answer.text, "the regenerated answer is empty")
            messages = win.messages()
            check([m.role for m in messages] == ["user", "assistant"] * 2, f"messages after regenerate: {messages}")
            check(stopped.id not in {m.id for m in messages}, "the stopped answer is still shown after Regenerate")
            check(messages[2].text == SECOND_MESSAGE, f"the second user message reads {messages[2].text!r}")
            check(win.version_count(answer.id) == "2/2", f"the new answer reads {win.version_count(answer.id)!r}, not 2/2")
            steps.shot("regenerated")

            win.click(f'{testid("message")}[data-message-id="{answer.id}"] {testid("version-previous")}', "‹ on the new answer")
            back = wait_for(
                "the stopped answer to come back as version 1",
                lambda: (m := win.messages()) and len(m) == 4 and m[3].id == stopped.id and m[3],
                15,
            )
            check(back.status == "stopped" and back.text == stopped.text, f"version 1 reads {back}, expected {stopped}")
            check("Stopped" in answer_stats(s, stopped.id)[0], "version 1 lost its stats")
            check(win.version_count(stopped.id) == "1/2", f"the old answer reads {win.version_count(stopped.id)!r}")
            steps.shot("version-1-of-2")
            win.click(f'{testid("message")}[data-message-id="{stopped.id}"] {testid("version-next")}', "› on the old answer")
            wait_for("the new answer to be shown again", lambda: (m := win.messages()) and m[3].id == answer.id, 15)
            wait_same("the conversation on version 2", win.messages, messages, 15)

        with steps.step("editing the first question branches; switching back restores what followed"):
            history = win.messages()
            question = history[0]
            win.click(f'{testid("message")}[data-message-id="{question.id}"] {testid("edit")}', "Edit on the first question")
            field = win.need(testid("edit-field"), "the edit field")
            s.send_keys(field, " Briefly." + KEY_ENTER)
            edited_answer, _ = watch_answer(win, {m.id for m in history}, ANSWER_TIMEOUT)
            check(edited_answer.status == "complete", f"the answer to the edit ended {edited_answer.status!r}")
            branch = win.messages()
            check(len(branch) == 2, f"after the edit the chat shows {len(branch)} messages: {branch}")
            check(branch[0].text == FIRST_MESSAGE + " Briefly.", f"the edited question reads {branch[0].text!r}")
            check(win.version_count(branch[0].id) == "2/2", f"the edited question reads {win.version_count(branch[0].id)!r}")
            steps.shot("edit-branch")
            win.click(f'{testid("message")}[data-message-id="{branch[0].id}"] {testid("version-previous")}', "‹ on the edited question")
            wait_same("the original branch, every message back", win.messages, history, 15)
            check(win.version_count(question.id) == "1/2", f"the original question reads {win.version_count(question.id)!r}")
            steps.shot("branch-restored")
            first_conversation = win.active_conversation()

        with steps.step("Copy conversation (⋯ menu) puts the whole chat, as shown, on the clipboard"):
            self.set_clipboard("nothing copied yet")
            win.click(testid("chat-menu"), "the chat's ⋯ menu")
            win.click(testid("copy-conversation"), "Copy conversation in the ⋯ menu")
            wait_for("the note that the conversation was copied", lambda: "Conversation copied as Markdown" in s.text(s.find(testid("toasts"))), 15)
            copied = self.clipboard()
            headings = re.findall(r"^## (You|Gemma)$", copied, re.MULTILINE)
            check(headings == ["You", "Gemma"] * 2, f"the clipboard's turns are {headings}: {copied[:300]!r}")
            for shown in history:
                if shown.role == "user":
                    check(f"\n{shown.text}\n" in copied, f"the question {shown.text!r} is not on the clipboard: {copied[:300]!r}")
                else:
                    # Compared word by word: the window shows the Markdown rendered (with a code block's labels).
                    on_clipboard = set(words(copied).split())
                    missing = [w for w in words(shown.text).split() if w not in on_clipboard]
                    check(len(missing) <= 2 and words(shown.text), f"the answer {shown.text[:80]!r} is not on the clipboard (missing {missing[:10]}): {copied[:300]!r}")
            win.dismiss_toasts()
            steps.shot("conversation-copied")

        with steps.step("two chats at once: each keeps its draft, the other's Send waits and says why, Esc stops only the open chat's answer"):
            win.set_settings({"maxTokens": str(LONG_ANSWER)})
            win.click(testid("new-chat"), "the New Chat button")
            win.send(OTHER_CHAT_MESSAGE)
            wait_streaming(win, set(), distinct=2, timeout=ANSWER_TIMEOUT)
            chat_a = win.active_conversation()
            s.send_keys(win.need(testid("composer"), "the message field"), DRAFT_A)
            win.open_conversation(first_conversation)
            wait_same("the other chat's messages while the first answers", win.messages, history, 15)
            check(win.draft() == "", f"the other chat's message field holds {win.draft()!r}: the answering chat's draft followed")
            composer = win.need(testid("composer"), "the message field")
            s.send_keys(composer, DRAFT_B)
            title_a = s.text(win.need(f'{testid("conversation-item")}[data-conversation-id="{chat_a}"] .item-title', "the answering chat in the sidebar")).strip()
            waits = f"Another chat (“{title_a}”) is answering: send once it is done, or stop it there."
            wait_same("the reason sending waits, under the other chat's message field", win.hint, waits, 15)
            check(win.shown(testid("stop")) is None, "the other chat shows a Stop button for the answer in the first")
            send = win.need(testid("send"), "the Send button in the other chat")
            check(not s.enabled(send), "Send is enabled in the other chat while the first one answers")
            s.send_keys(composer, KEY_ESCAPE)
            s.send_keys(composer, KEY_ENTER)  # neither stops the first chat's answer nor sends this draft
            steps.shot("other-chat-waits")
            check(win.draft() == DRAFT_B, f"the other chat's draft reads {win.draft()!r} after Esc and Enter")
            check(win.messages() == history, "Enter in the other chat changed its messages while the first one answers")
            win.open_conversation(chat_a)
            check(win.draft() == DRAFT_A, f"back in the answering chat, its message field holds {win.draft()!r}, expected {DRAFT_A!r}")
            # Still streaming after Esc in the other chat (this fails if that Esc stopped it).
            wait_streaming(win, set(), distinct=2, timeout=60)
            check(win.shown(testid("stop")) is not None, "no Stop button in the answering chat")
            s.send_keys(win.need(testid("composer"), "the message field"), KEY_ESCAPE)
            stopped_a, _ = watch_answer(win, set(), timeout=30)
            check(stopped_a.status == "stopped", f"after Esc in its own chat the answer is {stopped_a.status!r}, expected 'stopped'")
            messages_a = win.messages()
            check([(m.role, m.text) for m in messages_a][:1] == [("user", OTHER_CHAT_MESSAGE)] and len(messages_a) == 2, f"the answering chat holds {messages_a}")
            check(all(DRAFT_B not in m.text for m in messages_a), "the other chat's draft reached the answering chat")
            check(win.draft() == DRAFT_A, f"Esc changed the answering chat's draft to {win.draft()!r}")
            steps.shot("stopped-in-its-chat")
            s.clear(win.need(testid("composer"), "the message field"))
            win.open_conversation(first_conversation)
            check(win.draft() == DRAFT_B, f"the other chat's draft reads {win.draft()!r} when opened again")
            s.clear(win.need(testid("composer"), "the message field"))

        with steps.step("a follow-up after a long answer reuses the whole history from the cache"):
            win.set_settings({"maxTokens": str(COUNT_ANSWER)})
            win.click(testid("new-chat"), "the New Chat button")
            win.send(COUNT_MESSAGE)
            long_answer, _ = watch_answer(win, set(), ANSWER_TIMEOUT)
            check(long_answer.status == "complete", f"the long answer ended {long_answer.status!r}")
            stats, generated = answer_stats(s, long_answer.id)
            check(generated == COUNT_ANSWER and "Reached the token limit" in stats, f"the long answer did not run to its {COUNT_ANSWER} tokens: {stats!r}")
            prompt, _ = prompt_stats(s, long_answer.id)
            win.set_settings({"maxTokens": str(COUNT_FOLLOW_UP_ANSWER)})
            before = {m.id for m in win.messages()}
            win.send(COUNT_FOLLOW_UP)
            follow_up, _ = watch_answer(win, before, ANSWER_TIMEOUT)
            check(follow_up.status in ("complete",), f"the follow-up ended {follow_up.status!r}")
            follow_stats, _ = answer_stats(s, follow_up.id)
            follow_prompt, reused = prompt_stats(s, follow_up.id)
            # Everything the model read in the first turn (its last token is sampled, never read).
            whole = prompt + generated - 1
            check(reused == whole, f"the follow-up reused {reused} tokens, expected the whole history: {prompt} prompt + {generated} answer - 1 = {whole}: {follow_stats!r}")
            # Prefilled: the answer's last token, the turn markers and the short question.
            check(follow_prompt - reused < 30, f"the follow-up read {follow_prompt - reused} new tokens of {follow_prompt}: {follow_stats!r}")
            print(f"e2e:   first: {prompt} prompt + {generated} generated; follow-up: {follow_stats}")
            steps.shot("follow-up-reused")

        with steps.step("a conversation that outgrows the context window: one notice; New Chat and Context Length… do what they say"):
            # The same long paste fits a window of 2,048 with its answer; then the window shrinks.
            restore = win.set_settings({"contextLength": "2048", "maxTokens": "4"})
            win.click(testid("new-chat"), "the New Chat button")
            self.paste_text(win, LONG_PASTE)
            s.send_keys(win.need(testid("composer"), "the message field"), KEY_ENTER)
            answer, _ = watch_answer(win, set(), ANSWER_TIMEOUT)
            check(answer.status == "complete", f"the answer to the long message ended {answer.status!r} in a window of 2,048")
            win.set_settings({"contextLength": "512"})
            before = {m.id for m in win.messages()}
            win.send("And then?")
            failed, _ = watch_answer(win, before, ANSWER_TIMEOUT)
            check(failed.status == "error", f"the follow-up's answer ended {failed.status!r}, expected an error: the context is full")
            check(win.messages()[-2].text == "And then?", f"the follow-up question is gone: {win.messages()}")
            # However soon the error comes (before send_message's reply too), the notice shows,
            # and says it once: the failed answer's line only says it was not answered.
            notices = wait_for("the context notice", win.notices, 10)
            wait_for("the failed answer's line to leave the reason to the notice", lambda: (said := answer_stats_text(s, failed.id)).startswith("Not answered") and "context window" not in said and said, 5)
            check(len(notices) == 1, f"{len(notices)} context notices: {notices}")
            title, detail, buttons = notices[0]
            check(title == "This conversation no longer fits in the context window.", f"the notice's title is {title!r}")
            need = re.fullmatch(
                r"It needs (\d{1,3}(?:,\d{3})+) tokens\. The context window holds 512 tokens\. Start a new chat, or raise the context length\.",
                detail,
            )
            check(need is not None, f"the notice reads {detail!r}")
            check(int(need.group(1).replace(",", "")) > 1000, f"the conversation needs {need.group(1)} tokens, expected more than the pasted message")
            check(buttons == ["New Chat", "Context Length…"], f"the notice offers {buttons}")
            steps.shot("conversation-full")
            win.click_notice_button("Context Length…")
            dialog = win.need(testid("settings-dialog"), "Settings, from the notice's Context Length…")
            wait_for("the settings to load", lambda: s.enabled(s.find(testid("settings-save"))), 15)
            wait_for("Context Length… in the conversation's notice to focus the context length field", lambda: win.focused_testid() == "setting-contextLength", 3)
            steps.shot("context-length-field")
            win.click(testid("settings-cancel"), "Cancel in Settings")
            wait_for("Settings to close", lambda: not s.property(dialog, "open"), 10)
            check(len(win.notices()) == 1, "the notice went away with Cancel")
            win.click_notice_button("New Chat")
            wait_for("an empty new chat", lambda: not s.find_all(testid("message")) and s.find(f'{testid("conversation-item")}.active') is None, 15)
            check(win.notices() == [], f"the new chat shows a context notice: {win.notices()}")
            check(s.text(s.find("#chat-title")) == "New Chat", f"the new chat is titled {s.text(s.find('#chat-title'))!r}")
            check(win.draft() == "", f"the new chat's message field holds {win.draft()[:80]!r}")

        with steps.step("a message too long on its own: Send off, Enter only explains (one notice with its length, only Context Length…), nothing sent, the draft kept"):
            chats_before = len(s.find_all(testid("conversation-item")))
            self.paste_text(win, LONG_PASTE)
            count = wait_for("the red token count of the long message", lambda: (e := s.find(testid("token-count"))) and "over" in (t := s.text(e)) and t, 30)
            check(not s.enabled(win.need(testid("send"), "the Send button")), f"Send is enabled with the draft at {count!r}")
            check(win.hint().startswith("Too long to send: "), f"the line under the field reads {win.hint()!r}")
            s.send_keys(win.need(testid("composer"), "the message field"), KEY_ENTER)
            notices = wait_for("the context notice for the long message", win.notices, 30)
            check(len(notices) == 1, f"{len(notices)} context notices: {notices}")
            title, detail, buttons = notices[0]
            check(title == "This message is too long for the context window.", f"the notice's title is {title!r}")
            alone = re.fullmatch(
                r"It is (\d{1,3}(?:,\d{3})+) tokens on its own\. The context window holds 512 tokens\. Shorten it, or raise the context length\.",
                detail,
            )
            check(alone is not None, f"the notice reads {detail!r}")
            check(count.startswith(f"{alone.group(1)} tokens"), f"the notice says {alone.group(1)} tokens, the count {count!r}")
            check(buttons == ["Context Length…"], f"the notice offers {buttons}")
            check(win.draft() == LONG_PASTE, f"the long message left the field: it holds {win.draft()[:80]!r}")
            time.sleep(1)  # anything sent would show by now
            check(win.messages() == [], f"the new chat shows messages: {win.messages()}")
            check(len(s.find_all(testid("conversation-item"))) == chats_before, "a chat was added to the sidebar")
            check(s.text(s.find("#chat-title")) == "New Chat", f"the chat is titled {s.text(s.find('#chat-title'))!r}")
            steps.shot("message-too-long")
            win.click_notice_button("Context Length…")
            dialog = win.need(testid("settings-dialog"), "Settings, from the notice's Context Length…")
            wait_for("the settings to load", lambda: s.enabled(s.find(testid("settings-save"))), 15)
            wait_for("Context Length… in the long message's notice to focus the context length field", lambda: win.focused_testid() == "setting-contextLength", 5)
            in_view = """
                const box = arguments[0].getBoundingClientRect(), area = arguments[1].getBoundingClientRect();
                return box.top >= area.top && box.bottom <= area.bottom && box.height > 0;
            """
            field = win.need(testid("setting-contextLength"), "the context length field")
            wait_for("the context length field in view in Settings", lambda: s.execute(in_view, {ELEMENT_KEY: field}, {ELEMENT_KEY: dialog}), 5)
            steps.shot("context-length-in-view")
            win.fill_settings({"contextLength": restore["contextLength"], "maxTokens": str(SHORT_ANSWER)})
            wait_for("the notice to go once the context length is raised", lambda: win.notices() == [], 5)
            check(win.draft() == LONG_PASTE, "the long message left the field when the context length was raised")
            s.clear(win.need(testid("composer"), "the message field"))

        with steps.step("after a restart the model reloads and the conversation opens as it was"):
            win = self.restart()
            s = win.s
            win.model_ready(model.name, START_TIMEOUT + MODEL_TIMEOUT)
            item = win.need(
                f'{testid("conversation-item")}[data-conversation-id="{first_conversation}"]',
                "the conversation in the sidebar after the restart",
            )
            title = s.text(item)
            check(SEARCH_WORD in title, f"the conversation is listed as {title!r}")
            win.open_conversation(first_conversation)
            wait_same("the conversation after the restart", win.messages, history, 15)
            steps.shot("after-restart")

        with steps.step("a dropped image shows as a thumbnail, is sent, and is kept after a restart"):
            win.set_settings({"maxTokens": str(LONG_ANSWER)})
            win.click(testid("new-chat"), "the New Chat button")
            app_rect = self.desktop.geometry(self.run.window)
            source, target = drag_positions(app_rect, self.desktop.screen_size())
            overlay = s.find(testid("drop-overlay"))
            nudges = iter(range(10**6))

            def while_over() -> None:
                def shown() -> bool:
                    self.desktop.nudge(target, next(nudges) % 3)
                    return s.css(overlay, "display") != "none"  # it takes no pointer events, so no rect

                wait_for("the drop overlay while dragging over the window", shown, 20, interval=0.1)
                steps.shot("drop-overlay")

            self.desktop.drag_files([self.image], source, target, while_over)
            pending = win.need(f'{testid("pending-attachment")} img', "the dropped image's thumbnail", timeout=60)
            check(win.image_loaded(pending), "the pending thumbnail does not show a picture")
            check(s.attribute(pending, "alt") == self.image.name, f"the thumbnail is labelled {s.attribute(pending, 'alt')!r}")
            check(s.css(overlay, "display") == "none", "the drop overlay stayed up after the drop")
            steps.shot("pending-attachment")

            win.send(IMAGE_MESSAGE)
            # Found again on each poll: the message re-renders as the answer starts.
            sent_image = f'{testid("message")}[data-role="user"] {testid("message-attachment")}'
            wait_for("the sent image to show", lambda: (e := win.shown(sent_image)) is not None and win.image_loaded(e), 60)
            check(not s.find_all(testid("pending-attachment")), "the thumbnail stayed in the composer after sending")
            wait_streaming(win, set(), distinct=1, timeout=ANSWER_TIMEOUT)
            win.click(testid("stop"), "the Stop button")
            answer, _ = watch_answer(win, set(), timeout=30)
            check(answer.status == "stopped", f"after Stop the answer is {answer.status!r}")
            steps.shot("image-sent")
            image_conversation = win.active_conversation()
            check(image_conversation != first_conversation, "the image was sent into the earlier conversation")
            image_history = win.messages()
            check(image_history[0].images == 1, f"the sent message shows {image_history[0].images} images")

            win = self.restart()
            s = win.s
            win.model_ready(model.name, START_TIMEOUT + MODEL_TIMEOUT)
            win.open_conversation(image_conversation)
            wait_same("the image conversation after the restart", win.messages, image_history, 15)
            wait_for(
                "the image in history to show after the restart",
                lambda: (e := win.shown(testid("message-attachment"))) is not None and win.image_loaded(e),
                60,
            )
            steps.shot("image-after-restart")

        with steps.step("export as JSON, delete, import: every message and image comes back"):
            export = self.temp / "exports" / "image chat.json"
            export.parent.mkdir(parents=True, exist_ok=True)
            win.click(testid("chat-menu"), "the chat menu")
            steps.shot("chat-menu")
            win.click(testid("export-json"), "Export as JSON… in the chat menu")
            self.desktop.save_file(EXPORT_DIALOG, export, timeout=30, before_accept=lambda: steps.screen_shot("export-dialog"))
            wait_for(f"the export at {export}", lambda: export.is_file() and export.stat().st_size > 0, 30)
            win.dismiss_toasts()
            win.click(testid("chat-menu"), "the chat menu")
            win.click(testid("export-markdown"), "Export as Markdown… in the chat menu")
            markdown = export.with_suffix(".md")
            self.desktop.save_file(MARKDOWN_DIALOG, markdown, timeout=30, before_accept=lambda: None)
            wait_for(f"the Markdown at {markdown}", lambda: markdown.is_file(), 30)
            text = markdown.read_text()
            check(IMAGE_MESSAGE in text, f"the Markdown export lacks the question: {text[:300]!r}")
            images = list((export.parent / "image chat_files").glob("*.png"))
            check(len(images) == 1 and images[0].read_bytes() == self.image.read_bytes(), f"the Markdown's image folder holds {images}")

            win.dismiss_toasts()
            item = f'{testid("conversation-item")}[data-conversation-id="{image_conversation}"]'
            # Its actions show on hover or keyboard focus: focus it as Tab would.
            s.execute(f"document.querySelector('{item} .item-button').focus()")
            win.click(f"{item} {testid('delete')}", "Delete on the image chat")
            win.click(testid("confirm-ok"), "Delete in the confirmation")
            wait_for("the chat to leave the list", lambda: s.find(item) is None, 15)
            win.click(testid("import-chats"), "Import… in the sidebar")
            self.desktop.open_file(IMPORT_DIALOG, export, timeout=30, before_accept=lambda: steps.screen_shot("import-dialog"))
            toast = wait_for("the import's summary", lambda: "Imported" in (s.text(s.find(".toasts")) if s.find(".toasts") else ""), 30)
            check(toast, "no summary after the import")
            win.open_conversation(image_conversation)
            wait_same("the imported chat, every message as before", win.messages, image_history, 15)
            wait_for(
                "the imported image to show",
                lambda: (e := win.shown(testid("message-attachment"))) is not None and win.image_loaded(e),
                60,
            )
            steps.shot("imported")

            win.dismiss_toasts()
            win.click(testid("import-chats"), "Import… in the sidebar again")
            self.desktop.open_file(IMPORT_DIALOG, export, timeout=30, before_accept=lambda: None)
            wait_for(
                "the second import to say it skipped everything",
                lambda: "skipped" in (s.text(s.find(".toasts")) if s.find(".toasts") else ""),
                30,
            )
            listed = [s.attribute(e, "data-conversation-id") for e in s.find_all(testid("conversation-item"))]
            check(listed.count(image_conversation) == 1, f"the chat is listed {listed.count(image_conversation)} times after importing twice")
            wait_same("the chat after importing twice", win.messages, image_history, 15)

        with steps.step("search finds the conversation"):
            search = win.need(testid("search"), "the search field")
            s.send_keys(search, SEARCH_WORD)
            hits = wait_for(f"search hits for {SEARCH_WORD!r}", lambda: s.find_all(testid("search-hit")), 15)
            found = {s.attribute(hit, "data-conversation-id") for hit in hits}
            check(found == {first_conversation}, f"searching {SEARCH_WORD!r} found conversations {found}, expected {{{first_conversation}}}")
            steps.shot("search")
            s.click(s.find(".item-button", root=hits[0]))
            wait_same("the conversation opened from the search hit", win.messages, history, 15)

        with steps.step("an image pasted from the clipboard is attached; a paste of nothing says so"):
            win.dismiss_toasts()  # (the import's notes: the note read below must be this step's)
            win.click(testid("new-chat"), "the New Chat button")
            composer = win.need(testid("composer"), "the message field")
            subprocess.run(
                ["xclip", "-selection", "clipboard", "-t", "image/png", "-i", str(self.image)],
                env=self.env, check=True, timeout=10,
            )
            s.click(composer)
            self.desktop.focus(self.run.window)
            self.desktop.keys("ctrl+v")
            pending = win.need(f'{testid("pending-attachment")} img', "the pasted image's thumbnail", timeout=30)
            wait_for("the pasted thumbnail to show a picture", lambda: win.image_loaded(pending), 15)
            alt = s.attribute(pending, "alt")
            check(alt == "pasted image.png", f"the pasted thumbnail is labelled {alt!r}")
            steps.shot("pasted-image")
            # An empty clipboard: nobody owns the CLIPBOARD selection any more.
            subprocess.run([self.args.gtk_python, "-c", CLEAR_CLIPBOARD], env=self.env, check=True, timeout=10)
            s.click(composer)
            self.desktop.keys("ctrl+v")
            toast = win.need(".toast", "a note that there was nothing to paste", timeout=30)
            text = s.text(toast)
            check("Nothing to paste" in text, f"pasting neither text nor image says {text!r}")
            check(len(s.find_all(testid("pending-attachment"))) == 1, "the empty paste changed the attachments")
            steps.shot("nothing-to-paste")
            win.click(f'{testid("pending-attachment")} button', "the pasted image's Remove button")

        with steps.step("a spoken WAV dropped on the window is a chip with its length, is asked about, and is kept after a restart"):
            win.dismiss_toasts()
            # The search of step 9 is still shown: Esc there brings back the list of chats.
            s.send_keys(win.need(testid("search"), "the search field"), KEY_ESCAPE)
            wait_for("the list of chats instead of search hits", lambda: not s.find_all(testid("search-hit")), 15)
            win.click(testid("new-chat"), "the New Chat button")
            drop(self, win, [self.speech])
            chip = win.need(testid("pending-audio"), "the dropped recording's chip", timeout=60)
            name = s.text(s.find(".audio-name", root=chip)).strip()
            check(name == self.speech.name, f"the recording's chip is named {name!r}")
            shown_length = s.text(win.need(testid("pending-audio-duration"), "the recording's length")).strip()
            check(shown_length == self.speech_length, f"the chip says {shown_length!r} long, the file is {self.speech_length}")
            check(s.find(f'{testid("pending-attachment")} img') is None, "the recording shows as an image")
            steps.shot("pending-audio")

            win.send(AUDIO_MESSAGE)
            sent_audio = f'{testid("message")}[data-role="user"] {testid("message-audio")}'
            win.need(sent_audio, "the sent recording in the message", timeout=60)
            check(not s.find_all(testid("pending-attachment")), "the recording stayed in the composer after sending")
            wait_streaming(win, set(), distinct=1, timeout=ANSWER_TIMEOUT)
            win.click(testid("stop"), "the Stop button")
            answer, _ = watch_answer(win, set(), timeout=30)
            check(answer.status == "stopped", f"after Stop the answer is {answer.status!r}")
            steps.shot("audio-sent")
            audio_conversation = win.active_conversation()
            audio_history = win.messages()

            win = self.restart()
            s = win.s
            win.model_ready(model.name, START_TIMEOUT + MODEL_TIMEOUT)
            win.open_conversation(audio_conversation)
            wait_same("the recording's conversation after the restart", win.messages, audio_history, 15)
            chip = win.need(sent_audio, "the recording in history after the restart", timeout=30)
            text = s.text(chip)
            check(self.speech.name in text and self.speech_length in text, f"the recording in history reads {text!r}")
            win.click(f"{sent_audio} {testid('message-audio-play')}", "the recording's Play button")

            def loaded() -> str | bool:
                player = s.find(f"{sent_audio} audio")
                return player is not None and (s.attribute(player, "src") or "").startswith("blob:")

            wait_for("the recording's file to load for playing", loaded, 30)
            steps.shot("audio-after-restart")

        with steps.step("the microphone records (mock device): time and level while recording, Esc stops, the recording is sent and answered"):
            win.set_settings({"maxTokens": str(SHORT_ANSWER)})
            win.click(testid("new-chat"), "the New Chat button")
            win.click(testid("record"), "the microphone button")
            bar = win.need(testid("recording"), "the recording bar", timeout=30)
            record = s.find(testid("record"))
            check(s.attribute(record, "aria-pressed") == "true", "the microphone button is not shown pressed while recording")
            levels: list[float] = []

            def two_seconds() -> bool:
                levels.append(float(s.attribute(bar, "data-level") or 0))
                return s.text(s.find(testid("recording-time"), root=bar)).strip() in ("0:02", "0:03")

            wait_for("two seconds counted by the recording bar", two_seconds, 20, interval=0.1)
            steps.shot("recording")
            s.send_keys(win.need(testid("composer"), "the message field"), KEY_ESCAPE)
            chip = win.need(testid("pending-audio"), "the recording's chip", timeout=30)
            name = s.text(s.find(".audio-name", root=chip)).strip()
            check(RECORDING_NAME.fullmatch(name) is not None, f"the recording's chip is named {name!r}")
            shown_length = s.text(win.need(testid("pending-audio-duration"), "the recording's length")).strip()
            lengths = {clip_length(tenths / 10) for tenths in range(20, 45)}
            check(shown_length in lengths, f"the recording is {shown_length!r} long (2 to 4.4 s)")
            check(win.shown(testid("recording")) is None, "the recording bar stayed up after Esc")
            steps.shot("recorded")
            # What was recorded, as the chip's Play button fetches it.
            recorded = s.attribute(s.find(f'{testid("pending-attachment")}.audio'), "data-attachment-id")
            peak = s.execute_async(
                """const [id, done] = arguments;
                window.__TAURI_INTERNALS__.invoke("pending_audio", { id }).then((bytes) => {
                  const samples = new Int16Array(bytes.slice(44));
                  let peak = 0;
                  for (const sample of samples) peak = Math.max(peak, Math.abs(sample));
                  done([peak, samples.length, new DataView(bytes).getUint32(24, true)]);
                }, (error) => done(String(error)));""",
                recorded,
            )
            check(isinstance(peak, list), f"the recording could not be read back: {peak!r}")
            loudest, samples, rate = peak
            print(f"e2e:   the recording: {samples} samples at {rate} Hz, peak {loudest}, meter up to {max(levels):.2f}")
            check(loudest > 1000, f"the recording is silent (peak {loudest} of 32767): the mock device's tone is missing")
            check(2 <= samples / rate <= 4.5, f"the recording holds {samples / rate:.2f} s, the bar counted two")
            check(max(levels) > 0, f"the level meter never moved while recording (levels {sorted(set(levels))})")

            win.send(MIC_MESSAGE)
            win.need(f'{testid("message")}[data-role="user"] {testid("message-audio")}', "the sent recording", timeout=60)
            answer, _ = watch_answer(win, set(), timeout=ANSWER_TIMEOUT)
            check(answer.status == "complete", f"the answer about the recording ended {answer.status!r}: {answer.text[:80]!r}")
            check(answer.text, "the answer about the recording is empty")
            steps.shot("recording-answered")

        with steps.step("Settings → Local API: on; four streams of the Node SDK with the panel's key and the window's chat are written at once; all complete"):
            win.set_settings({"maxTokens": str(SHORT_ANSWER)})
            win.click(testid("settings"), "the Settings button")

            def api_field(name: str) -> str | None:
                return s.find(testid(name))

            toggle = win.need(testid("local-api-toggle"), "the Local API switch")
            s.execute("arguments[0].scrollIntoView({block: 'center'})", {ELEMENT_KEY: toggle})
            check(not s.property(toggle, "checked"), "the Local API was on before it was switched on")
            s.click(toggle)
            # The panel's controls stay in place (hidden while off): shown, and usable once applied.
            wait_for("the Local API's key in the panel", lambda: win.shown(testid("local-api-key")), 15)
            wait_for("the switch to be applied", lambda: s.enabled(toggle) and s.property(toggle, "checked"), 15)
            # A port free on this machine, typed as a person would and applied when the field is left.
            port = free_port()
            field = win.need(testid("local-api-port"), "the Local API's port")
            s.execute(
                "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('change'))",
                {ELEMENT_KEY: field}, str(port),
            )
            address = f"http://127.0.0.1:{port}/v1"

            def shown_address() -> str:
                element = api_field("local-api-address")
                return s.text(element) if element is not None else ""

            wait_for(f"the Local API at {address}", lambda: shown_address() == address, 15)
            key = s.property(win.need(testid("local-api-key"), "the API key field"), "value")
            check(isinstance(key, str) and key.startswith("gd-"), f"the panel shows the key {key!r}")
            state = s.text(win.need(testid("local-api-state"), "the Local API's state"))
            check(state.startswith("On: serving"), f"the Local API says {state!r}")
            steps.shot("local-api")
            win.click(testid("settings-cancel"), "Cancel in Settings")
            status = s.text(win.need(testid("api-status"), "the API in the status bar"))
            check(status.startswith("API:"), f"the status bar shows {status!r}")

            model_id = state.removeprefix("On: serving ").split(".")[0]
            node_dir = Path(__file__).resolve().parent.parent / "api" / "node"
            check((node_dir / "node_modules" / "openai").is_dir(),
                  f"the Node SDK is not installed in {node_dir} (make api-node-deps)")
            node_env = {**os.environ, "GD_BASE_URL": address, "GD_API_KEY": key, "GD_MODEL": model_id}

            # Four streams of the official openai Node SDK at once, and the window's own answer
            # written beside them (Settings → Local API: four answers at once by default).
            api_tokens = 160
            streams = subprocess.Popen(
                ["node", str(node_dir / "concurrent.mjs")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env={**node_env, "GD_STREAMS": "4", "GD_MAX_TOKENS": str(api_tokens)},
            )

            def api_status() -> str:
                return s.text(win.need(testid("api-status"), "the API in the status bar"))

            def four_answering() -> bool:
                if "(4)" in api_status():
                    return True
                if streams.poll() is not None:  # the streams ended (or failed) before all four ran
                    out, err = streams.communicate()
                    raise TestFailure(f"the Node SDK's four streams ended (exit {streams.returncode}) before the status bar said (4), it says {api_status()!r}:\n{out[-2000:]}\n{err[-2000:]}")
                return False

            wait_for("the status bar saying the API answers four requests", four_answering, ANSWER_TIMEOUT)
            before = {m.id for m in win.messages()}
            win.send(FIRST_MESSAGE)
            wait_streaming(win, before, 2, ANSWER_TIMEOUT)
            beside = api_status()
            steps.shot("window-beside-four-api-answers")
            answer, _ = watch_answer(win, before, ANSWER_TIMEOUT)
            check(answer.status == "complete", f"the window's answer ended {answer.status!r} beside the API")
            check("(4)" in beside, f"the window's answer streamed while the status bar said {beside!r}")
            out, err = streams.communicate(timeout=ANSWER_TIMEOUT)
            check(streams.returncode == 0, f"the Node SDK's four streams failed:\n{out[-2000:]}\n{err[-2000:]}")
            runs = json.loads(out.strip().splitlines()[-1])
            check(len(runs) == 4, f"four streams answered, got {len(runs)}")
            for k, run in enumerate(runs):
                usage = run["usage"] or {}
                check(usage.get("completion_tokens") and
                      usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"],
                      f"stream {k + 1} ended with its usage {usage!r}")
                check(run["text"] != "" or run["finish"] == "stop", f"stream {k + 1} wrote {run['text']!r}")
            first_end = min(run["last"] for run in runs)
            check(all(run["first"] is not None and run["first"] <= first_end for run in runs),
                  "the four API streams were written at once")
            # The official openai Node SDK against the app's own server (tests/api/node, the
            # same checks as against `gemma-desk-cli serve`): a client nobody here wrote. Faster
            # answers is on here (the assistant drafts for a lone answer): GD_DRAFTS says so.
            sdk = subprocess.run(
                ["node", str(node_dir / "client.mjs")], capture_output=True, text=True, timeout=600,
                env={**node_env, "GD_DRAFTS": "1"},
            )
            check(sdk.returncode == 0 and "all checks passed" in sdk.stdout,
                  f"the openai Node SDK against the app failed:\n{sdk.stdout[-3000:]}\n{sdk.stderr[-3000:]}")
            win.click(testid("settings"), "the Settings button")
            wait_for(
                "the API request in the panel's log",
                lambda: any("/v1/chat/completions" in s.text(row) for row in s.find_all(testid("local-api-log-row"))),
                15,
            )
            steps.shot("local-api-log")
            win.click(testid("settings-cancel"), "Cancel in Settings")

        with steps.step("Settings → Model shows the model and switches to another checkpoint"):
            other = model.parent / "tiny-plmp-bf16"
            check((other / "config.json").is_file(), f"no second fixture checkpoint at {other}")
            win.set_settings({"maxTokens": str(SHORT_ANSWER)})
            win.click(testid("settings"), "the Settings button")
            panel = win.need(testid("model-panel"), "the Model section of Settings")

            def fact(label: str) -> str:
                element = s.find(f'[data-fact="{label}"]', root=panel)
                return s.text(element) if element is not None else ""

            wait_same("the model named in Settings", lambda: fact("Name"), model.name, 15)
            check(fact("Folder") == str(model), f"Settings shows the folder {fact('Folder')!r}, expected {str(model)!r}")
            check(fact("Weights") == "4-bit (affine)", f"Settings shows the weights as {fact('Weights')!r}")
            check(fact("Images") == "yes", f"Settings shows images as {fact('Images')!r}")
            check("million" in fact("Parameters"), f"Settings shows the parameters as {fact('Parameters')!r}")
            wait_for("the memory the model uses in Settings", lambda: "GB held by the model" in fact("Memory in use"), 15)

            def faster() -> str:
                element = s.find(testid("faster-status"))
                return s.text(element) if element is not None else ""

            wait_for("Settings → Faster answers on, with the assistant beside the model", lambda: faster().startswith("On:"), 15)
            check(
                "assistant model tiny-assistant" in faster() and "drafts 3 tokens at a time" in faster(),
                f"Faster answers says {faster()!r}",
            )
            steps.shot("model-settings")
            win.click(testid("model-choose-folder"), "Choose Folder… in Settings → Model")
            self.desktop.choose_folder(FOLDER_DIALOG, other, timeout=30, before_accept=lambda: None)
            wait_same("the new model named in Settings", lambda: fact("Name"), other.name, MODEL_TIMEOUT)
            check(fact("Audio").startswith("no"), f"the second checkpoint has no audio tower, Settings says {fact('Audio')!r}")
            steps.shot("model-switched")
            win.click(testid("settings-cancel"), "Cancel in Settings")
            win.model_ready(other.name, MODEL_TIMEOUT)
            win.click(testid("new-chat"), "the New Chat button")
            win.send(FIRST_MESSAGE)
            answer, _ = watch_answer(win, set(), ANSWER_TIMEOUT)
            check(answer.status == "complete", f"the new model's answer ended {answer.status!r}")

        with steps.step("Forget returns to the model picker, where a Hugging Face cache snapshot loads by its repository's name"):
            win.click(testid("settings"), "the Settings button")
            win.click(testid("model-forget"), "Forget in Settings → Model")
            first_run = win.need(testid("first-run"), "the model picker after Forget")
            check(s.text(s.find("h1", root=first_run)) == WELCOME, "the model picker has another heading after Forget")
            status = s.text(win.need(testid("model-status"), "the status bar"))
            check(status == "No model", f"the status bar shows {status!r} after Forget")
            steps.shot("model-forgotten")
            repo_id = "mlx-community/gemma-4-e4b-it-4bit"
            cached = self.home / "elsewhere" / "hub" / f"models--{repo_id.replace('/', '--')}"
            snapshot = cached / "snapshots" / "0123abcd"
            snapshot.mkdir(parents=True)
            (cached / "refs").mkdir()
            (cached / "refs" / "main").write_text("0123abcd")
            for file in model.iterdir():
                (snapshot / file.name).symlink_to(file)
            win.click(testid("choose-folder"), "the Choose Folder… button")
            # The snapshot itself: typed into GTK's location field, a folder with subfolders
            # (`models--…`) opens a completion popup that swallows Enter. Choosing `models--…`
            # is covered by the app's `a_hugging_face_cache_folder_can_be_chosen_as_it_is`.
            self.desktop.choose_folder(FOLDER_DIALOG, snapshot, timeout=30, before_accept=lambda: None)
            win.model_ready(repo_id, MODEL_TIMEOUT)
            steps.shot("hf-cache-folder")

        with steps.step("a model folder deleted while the app is closed is named at start"):
            win = self.restart(while_closed=lambda: shutil.rmtree(cached))
            s = win.s
            error = win.need(testid("setup-error"), "the reason the model is not loaded", timeout=START_TIMEOUT)
            expected = f"{repo_id} at {snapshot} is gone: choose another"
            check(s.text(error) == expected, f"the start screen says {s.text(error)!r}, expected {expected!r}")
            time.sleep(1)  # WebKit paints asynchronously: let the start screen reach the surface
            steps.shot("model-gone")
            win.click(testid("choose-folder"), "the Choose Folder… button")
            self.desktop.choose_folder(FOLDER_DIALOG, model, timeout=30, before_accept=lambda: None)
            wait_for("the gone model's message to clear", lambda: win.shown(testid("setup-error")) is None, MODEL_TIMEOUT)
            win.model_ready(model.name, MODEL_TIMEOUT)

        with steps.step("a second launch on the same data folder shows the running window and exits"):
            assert self.run is not None
            before = win.messages()
            windows_before = self.desktop.windows(APP_TITLE)
            second = subprocess.run(
                [str(self.args.app), "--data-dir", str(self.data_dir)],
                env=self.env, capture_output=True, text=True, timeout=60,
            )
            check(second.returncode == 0, f"the second launch exited {second.returncode}: {second.stderr[-500:]!r}")
            check("already running" in second.stderr, f"the second launch said {second.stderr[-500:]!r}")
            windows = self.desktop.windows(APP_TITLE)
            check(windows == windows_before, f"app windows after the second launch: {windows}, before: {windows_before}")
            check(s.title() == APP_TITLE, "the first window no longer answers")
            check(win.messages() == before, "the first window changed")
            win.model_ready(model.name, 15)
            steps.shot("second-launch")

        with steps.step("hostile markdown in a stored conversation renders inert"):
            db = self.data_dir / "chats.sqlite3"
            hostile: list[tuple[str, int]] = []
            win = self.restart(while_closed=lambda: hostile.append(security.write_hostile_conversation(db)))
            s = win.s
            hostile_id, count = hostile[0]
            security.watch_violations(s)
            win.open_conversation(first_conversation)
            win.open_conversation(hostile_id)
            wait_for("the hostile conversation to render", lambda: len(s.find_all(testid("message"))) == count, 30)
            title = s.text(win.need(f'{testid("conversation-item")}[data-conversation-id="{hostile_id}"]', "its sidebar entry"))
            check(security.XSS_TITLE in title, f"the hostile title is listed as {title!r}, not as its literal text")
            seen = security.check_inert(s, count)
            steps.shot("hostile-content")
            link = win.need('.message-body a[href="https://example.com/docs"]', "the safe link in an answer")
            s.click(link)
            dialog = win.need(testid("link-dialog"), "the confirmation before opening a link")
            check("https://example.com/docs" in s.text(dialog), f"the link dialog reads {s.text(dialog)!r}")
            steps.shot("link-dialog")
            win.click(testid("confirm-cancel"), "Cancel in the link dialog")
            wait_for("the link dialog to close", lambda: s.find(testid("link-dialog")) is None, 10)
            security.check_inert(s, count)
            print(f"e2e:   {len(security.XSS_CORPUS)} payloads in {seen['messages']} messages; links kept: {seen['links']}")

        with steps.step("the webview loaded nothing but the bundled app"):
            loaded = security.check_bundled_origin(s)
            print(f"e2e:   {loaded} URLs, all from the bundle (and every earlier run checked before its restart)")

        with steps.step("the CSP, the capabilities and the navigation guard hold in the window"):
            csp = security.check_csp(s)
            print(f"e2e:   CSP: {csp}; reports: {security.violations(s)}")
            refused = security.check_capabilities(s)
            for answer in refused:
                print(f"e2e:   refused {answer['cmd']}: {answer['detail'][:100]}")
            security.check_no_navigation(s)
            steps.shot("guards")

        def faster_answers(on: bool) -> None:
            """Switches Settings → Faster answers to `on` (at once) and closes Settings."""
            win.click(testid("settings"), "the Settings button")
            status = lambda: s.text(win.need(testid("faster-status"), "Faster answers' status"))  # noqa: E731
            wait_for("Faster answers to say where it stands", lambda: status().startswith(("On", "Off")), 15)
            toggle = win.need(testid("faster-toggle"), "the Faster answers switch")
            if bool(s.property(toggle, "checked")) != on:
                s.execute("arguments[0].scrollIntoView({block: 'center'})", {ELEMENT_KEY: toggle})
                s.click(toggle)
            wait_for(f"Faster answers {'on' if on else 'off'}", lambda: status().startswith("On" if on else "Off"), 30)
            win.click(testid("settings-cancel"), "Cancel in Settings")

        with steps.step("Regenerate at temperature 0 gives the same answer, from the same prompt without the answer it replaces"):
            # Plain greedy decoding (one token a step) of a float32 copy of the model.
            faster_answers(False)
            exact = float32_copy(model, self.temp / "models" / "tiny-f32")
            win.click(testid("settings"), "the Settings button")
            win.click(testid("model-choose-folder"), "Choose Folder… in Settings → Model")
            self.desktop.choose_folder(FOLDER_DIALOG, exact, timeout=30, before_accept=lambda: None)
            panel = win.need(testid("model-panel"), "the Model section of Settings")
            wait_for("the float32 copy named in Settings", lambda: exact.name in s.text(panel), MODEL_TIMEOUT)
            win.click(testid("settings-cancel"), "Cancel in Settings")
            win.model_ready(exact.name, MODEL_TIMEOUT)
            restore = win.set_settings({"temperature": "0", "maxTokens": str(SHORT_ANSWER)})
            win.click(testid("new-chat"), "the New Chat button")
            win.send(FIRST_MESSAGE)
            first, _ = watch_answer(win, set(), ANSWER_TIMEOUT)
            check(first.status == "complete" and first.text, f"the greedy answer ended {first.status!r}: {first.text!r}")
            prompt, _ = prompt_stats(s, first.id)
            shown = {m.id for m in win.messages()}
            win.click(f'{testid("message")}[data-message-id="{first.id}"] {testid("regenerate")}', "Regenerate on the greedy answer")
            again, _ = watch_answer(win, shown, ANSWER_TIMEOUT)
            check(again.status == "complete", f"the regenerated answer ended {again.status!r}")
            check(again.text == first.text, f"at temperature 0 Regenerate wrote {again.text[:120]!r}, the first time {first.text[:120]!r}")
            again_prompt, reused = prompt_stats(s, again.id)
            check(
                again_prompt == prompt,
                f"the regenerated answer's prompt is {again_prompt} tokens ({reused} reused), the first's {prompt}: it holds the answer it replaces",
            )
            check(win.version_count(again.id) == "2/2", f"the regenerated answer reads {win.version_count(again.id)!r}, not 2/2")
            steps.shot("regenerated-greedy")
            win.set_settings(restore)

        with steps.step("Settings' Save and Cancel stay in view however far its sections are scrolled; the context length says whose it is"):
            win.click(testid("settings"), "the Settings button")
            dialog = win.need(testid("settings-dialog"), "the settings dialog")
            wait_for("the settings to load", lambda: s.enabled(s.find(testid("settings-save"))), 15)
            body = win.need(testid("settings-body"), "the part of Settings that scrolls")
            check(
                s.execute("return arguments[0].scrollHeight > arguments[0].clientHeight + 100", {ELEMENT_KEY: body}),
                "the Settings sections fit without scrolling: nothing to prove",
            )
            # Visible: inside the window and the dialog, and what a click at its middle reaches.
            reachable = """
                const [button, dialog] = arguments;
                const r = button.getBoundingClientRect(), d = dialog.getBoundingClientRect();
                const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
                return r.height > 0 && r.top >= d.top && r.bottom <= Math.min(d.bottom, window.innerHeight)
                    && (hit === button || button.contains(hit));
            """
            for where, script in (
                ("the bottom", "arguments[0].scrollTop = arguments[0].scrollHeight; return arguments[0].scrollTop"),
                ("the middle", "arguments[0].scrollTop = arguments[0].scrollHeight / 2; return arguments[0].scrollTop"),
                ("the top", "arguments[0].scrollTop = 0; return arguments[0].scrollTop"),
            ):
                top = s.execute(script, {ELEMENT_KEY: body})
                check(where == "the top" or top > 0, f"Settings did not scroll to {where} (scrollTop {top})")
                for button in ("settings-save", "settings-cancel"):
                    element = win.need(testid(button), button)
                    wait_for(
                        f"{button} in view with the sections scrolled to {where}",
                        lambda: s.execute(reachable, {ELEMENT_KEY: element}, {ELEMENT_KEY: dialog}),
                        5,
                    )
                if where == "the bottom":
                    steps.shot("settings-scrolled-to-the-bottom")
            context = win.need('[data-fact="Context length"]', "the context length in Settings → Model")
            wait_for(
                "the context length's words in Settings → Model",
                lambda: "chosen for this computer's" in s.text(context) or "your choice" in s.text(context),
                15,
            )
            win.click(testid("settings-cancel"), "Cancel in Settings")
            wait_for("Settings to close", lambda: not s.property(dialog, "open"), 10)

        with steps.step("after Forget the model picker lists the recent models, and one click loads one again"):
            win.click(testid("settings"), "the Settings button")
            win.click(testid("model-forget"), "Forget in Settings → Model")
            win.need(testid("first-run"), "the model picker after Forget")
            listed = win.need(testid("recent-models"), "the recent models on the model picker")
            dirs = [s.attribute(button, "data-dir") for button in s.find_all("button.recent-model", root=listed)]
            check(str(model) in dirs and str(other) in dirs, f"the recent models after Forget are {dirs}, expected {model} and {other}")
            check(str(snapshot) not in dirs, f"the recent models list {snapshot}, deleted earlier")
            steps.shot("recent-models-after-forget")
            s.click(win.need(f'button.recent-model[data-dir="{other}"]', f"{other.name} in the recent models"))
            win.model_ready(other.name, MODEL_TIMEOUT)
            wait_for("the model picker to give way to the chat", lambda: win.shown(testid("first-run")) is None, 15)
            win.click(testid("new-chat"), "the New Chat button")
            win.send(FIRST_MESSAGE)
            answer, _ = watch_answer(win, set(), ANSWER_TIMEOUT)
            check(answer.status == "complete", f"the recent model's answer ended {answer.status!r}")

        default_dir = self.home / ".local/share" / IDENTIFIER
        check(not default_dir.exists(), f"the app wrote outside --data-dir, into {default_dir}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", required=True, type=Path, help="the gemma-desk binary")
    parser.add_argument("--tauri-driver", required=True, type=Path)
    parser.add_argument("--model", required=True, type=Path, help="the tiny fixture model folder")
    parser.add_argument("--gtk-python", required=True, help="a python3 with GTK 3 bindings (python3-gi)")
    parser.add_argument("--out", required=True, type=Path, help="folder for screenshots and logs")
    parser.add_argument("--offline", action="store_true", help="check that no network but loopback is reachable")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.png"):
        old.unlink()
    temp = Path(tempfile.mkdtemp(prefix="gemma-desk-e2e-"))
    started = time.monotonic()
    failure = None
    scenario = None
    try:
        scenario = Scenario(args, temp)
        scenario.main()
    except (TestFailure, WebDriverError) as err:
        failure = str(err)
    finally:
        if scenario is not None:
            problems = scenario.close()
            failure = failure or "; ".join(problems) or None

    if failure:
        log = args.out / "tauri-driver.log"
        if log.exists():
            tail = log.read_text(errors="replace").splitlines()[-40:]
            print("\n".join(["e2e: tauri-driver log (last lines):", *tail]), file=sys.stderr)
        print(f"e2e: FAILED: {failure}", file=sys.stderr)
        print(f"e2e: kept the app's temporary folders in {temp}", file=sys.stderr)
        return 1
    shutil.rmtree(temp, ignore_errors=True)
    shots = sorted(path.name for path in args.out.glob("*.png"))
    print(f"e2e: passed in {time.monotonic() - started:.0f}s; screenshots in {args.out}: {', '.join(shots)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
