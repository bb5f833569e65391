"""The X11 side of the end-to-end test: windows, keys and the mouse through xdotool, the native
GTK folder dialog, a real XDND drag from a helper window, and screenshots of the whole screen.

WebDriver only reaches the page; everything the OS draws (the folder dialog) or delivers (a file
drop) is driven here, as a user would, under the Xvfb server run.sh provides.
"""

from __future__ import annotations

import re
import select
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent


class DesktopError(Exception):
    """Something on the X11 side did not happen in time, or a tool failed."""


@dataclass(frozen=True)
class Rect:
    x: int
    y: int
    width: int
    height: int

    def center(self) -> tuple[int, int]:
        return self.x + self.width // 2, self.y + self.height // 2

    def overlaps(self, other: Rect) -> bool:
        return not (
            self.x + self.width <= other.x
            or other.x + other.width <= self.x
            or self.y + self.height <= other.y
            or other.y + other.height <= self.y
        )


def poll(what: str, probe: Callable[[], object], timeout: float, interval: float = 0.1) -> object:
    """Calls `probe` until it returns something truthy, and returns that; DesktopError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise DesktopError(f"{what}: not seen within {timeout:.0f}s")
        time.sleep(interval)


class Desktop:
    """xdotool on the current DISPLAY, plus the GTK helper scripts (run with `gtk_python`)."""

    def __init__(self, gtk_python: str, env: dict[str, str]) -> None:
        self.gtk_python = gtk_python
        self.env = env

    def xdotool(self, *args: str) -> str:
        """Runs xdotool; an exit status of 1 with no output (nothing found) returns ''."""
        done = subprocess.run(["xdotool", *args], capture_output=True, text=True, timeout=30, env=self.env)
        if done.returncode != 0 and (done.stdout.strip() or done.stderr.strip()):
            raise DesktopError(f"xdotool {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout.strip()

    def screen_size(self) -> tuple[int, int]:
        width, height = self.xdotool("getdisplaygeometry").split()
        return int(width), int(height)

    def windows(self, title: str) -> list[int]:
        """Visible windows whose title is exactly `title`.

        A search walks every window; one destroyed meanwhile (an app quitting) makes xdotool fail
        with BadWindow, so a failed search is tried again.
        """
        for attempt in range(5):
            try:
                found = self.xdotool("search", "--onlyvisible", "--name", f"^{re.escape(title)}$")
                return [int(line) for line in found.split()]
            except DesktopError:
                if attempt == 4:
                    raise
                time.sleep(0.2)
        raise AssertionError("unreachable")

    def wait_for_window(self, title: str, timeout: float) -> int:
        return poll(f"a window titled {title!r}", lambda: next(iter(self.windows(title)), None), timeout)

    def wait_until_gone(self, window: int, title: str, timeout: float) -> bool:
        """Whether `window` is no longer shown within `timeout` seconds."""
        try:
            poll(f"{title!r} closing", lambda: window not in self.windows(title), timeout)
            return True
        except DesktopError:
            return False

    def window_pid(self, window: int) -> int | None:
        pid = self.xdotool("getwindowpid", str(window))
        return int(pid) if pid.isdigit() else None

    def geometry(self, window: int) -> Rect:
        values = dict(
            line.split("=", 1) for line in self.xdotool("getwindowgeometry", "--shell", str(window)).splitlines() if "=" in line
        )
        return Rect(int(values["X"]), int(values["Y"]), int(values["WIDTH"]), int(values["HEIGHT"]))

    def focus(self, window: int) -> None:
        # There is no window manager under Xvfb, so `windowactivate` is refused; set the X focus.
        self.xdotool("windowfocus", "--sync", str(window))

    def keys(self, *keys: str) -> None:
        self.xdotool("key", "--clearmodifiers", *keys)

    def type(self, text: str) -> None:
        self.xdotool("type", "--delay", "8", text)

    def screenshot(self, path: Path) -> None:
        """The whole X screen (native windows included) as a PNG."""
        done = subprocess.run(
            [self.gtk_python, str(HERE / "screen_grab.py"), str(path)],
            capture_output=True, text=True, timeout=30, env=self.env,
        )
        if done.returncode != 0:
            raise DesktopError(f"screen grab failed: {done.stderr.strip()}")

    def choose_folder(self, title: str, folder: Path, timeout: float, before_accept: Callable[[], None]) -> None:
        """Picks `folder` in the GTK folder dialog titled `title`, typing its path as a user would.

        The dialog opens on "Recent", where a typed location is not accepted: Alt+Home goes to the
        home folder first, Ctrl+L opens the location field, and Enter in it chooses the folder.
        `before_accept` runs once the path is typed (to take a screenshot of the dialog).
        """
        window = self.wait_for_window(title, timeout)
        for attempt in range(3):
            self.focus(window)
            self.keys("alt+Home")
            # The trailing slash ends the name: GTK's inline completion, late on a loaded
            # machine, cannot stretch `tiny` into a sibling such as `tiny-optiq/`.
            self.type_location(str(folder).rstrip("/") + "/")
            if attempt == 0:
                before_accept()
            self.keys("Return")
            if self.wait_until_gone(window, title, timeout=10):
                return
        raise DesktopError(f"the folder dialog did not accept {folder} after 3 tries")

    def type_location(self, text: str) -> None:
        """Types `text` into the open dialog's location field and reads it back (select all,
        copy, the clipboard through xclip), typing again while it differs: on a loaded machine
        the field can appear after the first keys were sent (once `/work/…` arrived as `ork/…`,
        a folder relative to the dialog's own)."""
        for _ in range(3):
            self.keys("ctrl+l")
            self.keys("ctrl+a")
            self.type(text)
            try:
                poll(f"the location field to read {text!r}", lambda: self.location_text() == text or None, 3, interval=0.3)
                return
            except DesktopError:
                continue

    def location_text(self) -> str:
        """What the focused text field holds (left selected)."""
        self.keys("ctrl+a")
        self.keys("ctrl+c")
        done = subprocess.run(
            ["xclip", "-o", "-selection", "clipboard"], capture_output=True, text=True, timeout=10, env=self.env
        )
        return done.stdout if done.returncode == 0 else ""

    def open_file(self, title: str, path: Path, timeout: float, before_accept: Callable[[], None]) -> None:
        """Opens `path` in the GTK open dialog titled `title`, typing its path into the location
        field. Once GTK has seen the folder it completes the name inline, and the first Enter
        only accepts the completion: then a second Enter opens the file."""
        window = self.wait_for_window(title, timeout)
        for attempt in range(3):
            self.focus(window)
            self.keys("alt+Home")
            self.keys("ctrl+l")
            self.keys("ctrl+a")
            self.type(str(path))
            if attempt == 0:
                before_accept()
            self.keys("Return")
            if self.wait_until_gone(window, title, timeout=3):
                return
            self.focus(window)
            self.keys("Return")
            if self.wait_until_gone(window, title, timeout=10):
                return
        raise DesktopError(f"the open dialog did not accept {path} after 3 tries")

    def save_file(self, title: str, path: Path, timeout: float, before_accept: Callable[[], None]) -> None:
        """Saves as `path` in the GTK save dialog titled `title`, typing the whole path into its
        name field (which has the focus and takes a full path), as a user may."""
        window = self.wait_for_window(title, timeout)
        for attempt in range(3):
            self.focus(window)
            self.keys("ctrl+a")
            self.type(str(path))
            if attempt == 0:
                before_accept()
            self.keys("Return")
            if self.wait_until_gone(window, title, timeout=10):
                return
        raise DesktopError(f"the save dialog did not accept {path} after 3 tries")

    def drag_files(self, files: list[Path], source_at: tuple[int, int], target: tuple[int, int], while_over: Callable[[], None]) -> None:
        """Drags `files` from a helper window at `source_at` and drops them at `target` (XDND).

        `while_over` runs with the button still held over the target (to wait for the app's drop
        overlay); the mouse keeps nudging meanwhile, since XDND reports position only on motion.
        """
        helper = subprocess.Popen(
            [self.gtk_python, str(HERE / "drag_source.py"), str(source_at[0]), str(source_at[1]), *map(str, files)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env,
        )
        try:
            ready, _, _ = select.select([helper.stdout], [], [], 20)
            line = helper.stdout.readline().strip() if ready else ""
            if line != "ready":
                helper.kill()
                raise DesktopError(f"the drag source window did not start: {line or helper.stderr.read().strip()}")
            start = (source_at[0] + 40, source_at[1] + 40)
            self.xdotool("mousemove", "--sync", str(start[0]), str(start[1]))
            self.xdotool("mousedown", "1")
            # Small steps: GTK starts a drag only past its threshold, and XDND needs motion events.
            steps = 25
            for i in range(1, steps + 1):
                x = start[0] + (target[0] - start[0]) * i // steps
                y = start[1] + (target[1] - start[1]) * i // steps
                self.xdotool("mousemove", str(x), str(y))
                time.sleep(0.02)
            try:
                while_over()
            finally:
                self.xdotool("mousemove", str(target[0] + 1), str(target[1] + 1))
                self.xdotool("mouseup", "1")
        finally:
            if helper.poll() is None:
                helper.terminate()
                try:
                    helper.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    helper.kill()
                    helper.wait()

    def nudge(self, at: tuple[int, int], offset: int) -> None:
        """Moves the pointer by a pixel or two around `at` (keeps a drag reporting its position)."""
        self.xdotool("mousemove", str(at[0] + offset), str(at[1] + offset))
