#!/usr/bin/env python3
"""End-to-end: a fresh install opens on the first-run screen, in the real window.

Starts tauri-driver (which starts WebKitWebDriver, which starts the app with a fresh --data-dir),
waits for the "No model installed yet" heading, checks what it shows, and saves a screenshot.
Run it through tests/e2e/run.sh, which checks prerequisites and provides an X server.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from webdriver import Session, WebDriverError, wait_until_ready

HEADING = "No model installed yet"
IDENTIFIER = "app.gemmadesk.desktop"  # tauri.conf.json `identifier`: names the default data folder


class TestFailure(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise TestFailure(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def isolated_env(home: Path) -> dict[str, str]:
    """The driver's (and so the app's) environment: a throwaway home, no accessibility bus.

    WEBKIT_DISABLE_DMABUF_RENDERER is deliberately not set here: with WebKitGTK 2.50 under Xvfb
    it makes every WebDriver screenshot hang. Export it before running if a machine renders blank.
    """
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local/state"),
        NO_AT_BRIDGE="1",
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


def stop(driver: subprocess.Popen[bytes]) -> list[str]:
    """Stops tauri-driver with SIGTERM (it then stops WebKitWebDriver); returns any problems."""
    problems = []
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
    return problems


def run_test(session: Session, data_dir: Path, home: Path, out: Path) -> None:
    heading = session.wait_for_text("main h1", timeout=60)
    # WebKit paints asynchronously: give the first-run screen time to reach the window surface
    # so the screenshot shows what a user sees, not the previous "Loading…" frame.
    time.sleep(2)
    screenshot = out / "first-run.png"
    screenshot.write_bytes(session.screenshot())
    print(f"e2e: screenshot saved to {screenshot}")

    if heading != HEADING:
        main_area = session.find("main")
        shown = session.text(main_area) if main_area else ""
        raise TestFailure(f"main heading is {heading!r}, expected {HEADING!r}; the window shows: {shown!r}")
    check(session.title() == "Gemma Desk", f"document title is {session.title()!r}")

    models_dir = data_dir / "models"
    path_element = session.find("#models-dir")
    check(path_element is not None, "the first-run screen does not show the models folder (#models-dir)")
    shown = session.text(path_element)
    check(shown == str(models_dir), f"models folder shown as {shown!r}, expected {str(models_dir)!r}")
    check(models_dir.is_dir(), f"the app did not create the models folder {models_dir}")
    check((data_dir / "webview").is_dir(), f"the webview keeps its storage outside {data_dir}")
    default_dir = home / ".local/share" / IDENTIFIER
    check(not default_dir.exists(), f"the app wrote outside --data-dir, into {default_dir}")

    # If the CSP blocked the stylesheet, the layout grid would be missing.
    app = session.find("#app")
    check(app is not None and session.css(app, "display") == "grid", "styles.css is not applied")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--app", required=True, type=Path, help="the gemma-desk binary")
    parser.add_argument("--tauri-driver", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path, help="folder for screenshots and logs")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix="gemma-desk-e2e-"))
    home, data_dir = temp / "home", temp / "data"
    home.mkdir()
    log_path = args.out / "tauri-driver.log"
    port, native_port = free_port(), free_port()
    base_url = f"http://127.0.0.1:{port}"

    failure = None
    with open(log_path, "wb") as log:
        driver = subprocess.Popen(
            [str(args.tauri_driver), "--port", str(port), "--native-port", str(native_port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=isolated_env(home),
            start_new_session=True,
        )
        session = None
        try:
            wait_until_ready(base_url, timeout=30)
            session = Session(
                base_url,
                {
                    "alwaysMatch": {
                        "tauri:options": {
                            "application": str(args.app.resolve()),
                            "args": ["--data-dir", str(data_dir)],
                        }
                    }
                },
            )
            run_test(session, data_dir, home, args.out)
        except (TestFailure, WebDriverError) as err:
            failure = str(err)
        finally:
            if session is not None:
                try:
                    session.delete()
                except WebDriverError as err:
                    failure = failure or f"could not end the session: {err}"
            problems = stop(driver)
            failure = failure or "; ".join(problems) or None

    if failure:
        log_tail = log_path.read_text(errors="replace").splitlines()[-40:]
        print("\n".join(["e2e: tauri-driver log (last lines):", *log_tail]), file=sys.stderr)
        print(f"e2e: FAILED: {failure}", file=sys.stderr)
        print(f"e2e: kept the app's temporary folders in {temp}", file=sys.stderr)
        return 1
    shutil.rmtree(temp, ignore_errors=True)
    print(f"e2e: passed: first-run screen shows {HEADING!r} and the models folder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
