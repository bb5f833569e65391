"""Running the real app for a test: tauri-driver (which starts WebKitWebDriver, which starts the
app) in a throwaway home, sessions that launch and quit the app, and named steps that save a
screenshot when they fail.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from desktop import Desktop, DesktopError
from webdriver import Session, WebDriverError, wait_until_ready

T = TypeVar("T")

APP_TITLE = "Gemma Desk"


class TestFailure(Exception):
    """A step saw something other than what a user should see."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise TestFailure(message)


def wait_for(what: str, probe: Callable[[], T], timeout: float, interval: float = 0.1) -> T:
    """Calls `probe` until it returns something truthy and returns that.

    On timeout the failure names `what` and the last value `probe` returned (or the last error),
    so a report says what was seen instead. Stale elements (the UI re-rendered) are retried.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except WebDriverError as err:
            if "stale element" not in str(err) and "no such element" not in str(err):
                raise
            last = err
        if time.monotonic() >= deadline:
            raise TestFailure(f"{what}: not seen within {timeout:.0f}s (last seen: {last!r})")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def isolated_env(home: Path) -> dict[str, str]:
    """The driver's (and so the app's) environment: a throwaway home, no accessibility bus.

    No Hugging Face cache is found there, so the app starts without a model; the microphone is a
    mock device that plays a tone. GTK writes its
    dialog settings to memory, not dconf, and uses its own dialogs rather than a portal.
    WEBKIT_DISABLE_DMABUF_RENDERER is deliberately not set here: with WebKitGTK 2.50 under Xvfb
    it makes every WebDriver screenshot hang. Export it before running if a machine renders blank.
    """
    env = dict(os.environ)
    for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        env.pop(name, None)
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local/state"),
        NO_AT_BRIDGE="1",
        GSETTINGS_BACKEND="memory",
        GTK_USE_PORTAL="0",
        # The app's microphone is WebKitGTK's mock capture device (src-tauri/src/mock_microphone.rs).
        GEMMA_DESK_E2E_MOCK_MICROPHONE="1",
    )
    return env


def group_alive(pgid: int, grace: float) -> bool:
    """Whether any process of group `pgid` is still running after up to `grace` seconds."""
    deadline = time.monotonic() + grace
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.1)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited; it only waits for its parent (WebKitWebDriver) to reap it.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


class Driver:
    """tauri-driver on free ports, its output in `log_path`; stops it (and all it started) at exit."""

    def __init__(self, tauri_driver: Path, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        port, native_port = free_port(), free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [str(tauri_driver), "--port", str(port), "--native-port", str(native_port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        wait_until_ready(self.base_url, timeout=30)

    def stop(self) -> list[str]:
        """Stops tauri-driver with SIGTERM (it then stops WebKitWebDriver); returns any problems."""
        problems = []
        driver = self.process
        if driver.poll() is None:
            driver.send_signal(signal.SIGTERM)
            try:
                driver.wait(timeout=15)
            except subprocess.TimeoutExpired:
                problems.append("tauri-driver ignored SIGTERM for 15s")
        # Anything still in the driver's process group (WebKitWebDriver, the app) was left behind.
        if group_alive(driver.pid, grace=20):
            os.killpg(driver.pid, signal.SIGTERM)
            problems.append("processes outlived tauri-driver and were sent SIGTERM")
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        self.log.close()
        return problems


class AppRun:
    """One launch of the app through WebDriver, on a given data folder."""

    def __init__(self, driver: Driver, desktop: Desktop, app: Path, data_dir: Path) -> None:
        self.desktop = desktop
        self.session = Session(
            driver.base_url,
            {
                "alwaysMatch": {
                    "tauri:options": {"application": str(app.resolve()), "args": ["--data-dir", str(data_dir)]}
                }
            },
        )
        try:
            self.window = desktop.wait_for_window(APP_TITLE, timeout=60)
        except DesktopError as err:
            raise TestFailure(f"the app window did not appear: {err}") from None
        self.pid = desktop.window_pid(self.window)

    def quit(self, timeout: float = 90) -> None:
        """Ends the session (which closes the app) and waits until the app's process is gone."""
        began = time.monotonic()
        self.session.delete()
        if not self.desktop.wait_until_gone(self.window, APP_TITLE, timeout):
            alive = self.pid is not None and process_alive(self.pid)
            raise TestFailure(
                f"the app window was still open {timeout:.0f}s after quitting "
                f"(its process {self.pid} is {'still running' if alive else 'gone'})"
            )
        if self.pid is not None:
            wait_for(f"the app (pid {self.pid}) to exit", lambda: not process_alive(self.pid), timeout)
        print(f"e2e:   the app quit in {time.monotonic() - began:.1f}s", flush=True)


class Steps:
    """Numbered steps: each prints its outcome and time; a failing one saves screenshots."""

    def __init__(self, out: Path, desktop: Desktop) -> None:
        self.out = out
        self.desktop = desktop
        self.session: Session | None = None
        self.number = 0
        self.started = time.monotonic()

    def shot(self, name: str) -> Path:
        """Saves the app window as `NN-name.png` (NN: the current step)."""
        path = self.out / f"{self.number:02d}-{name}.png"
        if self.session is None:
            raise TestFailure("no app is running to take a screenshot of")
        path.write_bytes(self.session.screenshot())
        return path

    def screen_shot(self, name: str) -> Path:
        """Saves the whole X screen (native dialogs included) as `NN-name.png`."""
        path = self.out / f"{self.number:02d}-{name}.png"
        self.desktop.screenshot(path)
        return path

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        self.number += 1
        began = time.monotonic()
        print(f"e2e: step {self.number}: {title} …", flush=True)
        try:
            yield
        except (TestFailure, WebDriverError, DesktopError) as err:
            saved = self.failure_screenshots()
            raise TestFailure(f"step {self.number} ({title}) failed: {err}\n    screenshots: {', '.join(saved) or 'none'}") from None
        print(f"e2e: step {self.number}: ok ({time.monotonic() - began:.1f}s)", flush=True)

    def failure_screenshots(self) -> list[str]:
        saved = []
        if self.session is not None:
            try:
                path = self.out / f"FAILED-{self.number:02d}-window.png"
                path.write_bytes(self.session.screenshot())
                saved.append(str(path))
            except WebDriverError:
                pass
        try:
            path = self.out / f"FAILED-{self.number:02d}-screen.png"
            self.desktop.screenshot(path)
            saved.append(str(path))
        except DesktopError:
            pass
        return saved
