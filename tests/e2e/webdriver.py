"""A minimal W3C WebDriver client on the standard library: enough to drive the app via tauri-driver."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from typing import Any

ELEMENT_KEY = "element-6066-11e4-a52e-4f735466cecf"
# How often a command dropped on its way through tauri-driver is sent again (see `call`).
DROPPED_RETRIES = 4


class WebDriverError(Exception):
    """The remote end answered with an error, or did not answer."""


def call(method: str, url: str, body: Any = None, timeout: float = 30) -> Any:
    """Sends one command and returns its `value`, raising WebDriverError on any failure.

    tauri-driver 2.1.0 forwards commands over pooled connections to WebKitWebDriver with
    `retry_canceled_requests(false)`: a command sent right after another can go out on a
    connection WebKitWebDriver has already closed, and tauri-driver then drops ours with no
    answer. The command never reached WebKitWebDriver, so it is sent again.
    """
    data = None if body is None else json.dumps(body).encode()
    for attempt in range(DROPPED_RETRIES + 1):
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json; charset=utf-8")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.load(response).get("value")
        except urllib.error.HTTPError as err:
            try:
                value = json.load(err).get("value", {})
                detail = f"{value.get('error')}: {value.get('message')}"
            except (ValueError, AttributeError):
                detail = err.reason
            raise WebDriverError(f"{method} {url} -> HTTP {err.code} {detail}") from None
        except ConnectionResetError as err:  # http.client.RemoteDisconnected is one
            if attempt == DROPPED_RETRIES:
                raise WebDriverError(f"{method} {url} -> {err} ({attempt + 1} tries)") from None
            time.sleep(0.02 * (attempt + 1))
        except (urllib.error.URLError, OSError) as err:
            raise WebDriverError(f"{method} {url} -> {err}") from None
    raise AssertionError("unreachable")


def wait_until_ready(base_url: str, timeout: float) -> None:
    """Polls GET /status until the server answers ready."""
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        try:
            if (call("GET", f"{base_url}/status", timeout=2) or {}).get("ready"):
                return
            last_error = "not ready"
        except WebDriverError as err:
            last_error = str(err)
        time.sleep(0.2)
    raise WebDriverError(f"WebDriver server at {base_url} not ready after {timeout:.0f}s ({last_error})")


KEY_ENTER = "\ue007"
KEY_ESCAPE = "\ue00c"


class Session:
    """One WebDriver session, i.e. one running copy of the app."""

    def __init__(self, base_url: str, capabilities: dict[str, Any], timeout: float = 60) -> None:
        value = call("POST", f"{base_url}/session", {"capabilities": capabilities}, timeout=timeout)
        self.url = f"{base_url}/session/{value['sessionId']}"

    def find(self, css: str, root: str | None = None) -> str | None:
        """The id of the first element matching `css` (inside `root` if given), or None."""
        scope = f"{self.url}/element/{root}" if root else self.url
        try:
            return call("POST", f"{scope}/element", {"using": "css selector", "value": css})[ELEMENT_KEY]
        except WebDriverError as err:
            if "no such element" in str(err):
                return None
            raise

    def find_all(self, css: str, root: str | None = None) -> list[str]:
        """The ids of every element matching `css` (inside `root` if given), in document order."""
        scope = f"{self.url}/element/{root}" if root else self.url
        found = call("POST", f"{scope}/elements", {"using": "css selector", "value": css})
        return [element[ELEMENT_KEY] for element in found]

    def wait_for_text(self, css: str, timeout: float) -> str:
        """Polls until an element matching `css` exists with non-empty text, and returns that text."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            element = self.find(css)
            if element is not None:
                text = self.text(element)
                if text:
                    return text
            time.sleep(0.25)
        raise WebDriverError(f"no element {css!r} with text appeared within {timeout:.0f}s")

    def text(self, element: str) -> str:
        """The element's rendered text (`innerText`).

        Not WebDriver's "Get Element Text": that returns "" for whatever its visibility guess
        (see `rendered`) gets wrong.
        """
        return call("GET", f"{self.url}/element/{element}/property/innerText") or ""

    def attribute(self, element: str, name: str) -> str | None:
        return call("GET", f"{self.url}/element/{element}/attribute/{name}")

    def property(self, element: str, name: str) -> Any:
        return call("GET", f"{self.url}/element/{element}/property/{name}")

    def rect(self, element: str) -> dict[str, float]:
        """The element's box in the page: x, y, width, height."""
        return call("GET", f"{self.url}/element/{element}/rect")

    def rendered(self, element: str) -> bool:
        """Whether the element takes up space on the page (not `hidden`, not in a closed dialog).

        WebDriver's own "is displayed" guesses wrong for text that clips with `overflow: hidden`.
        """
        try:
            box = self.rect(element)
        except WebDriverError as err:
            if "not interactable" in str(err):  # WebKitWebDriver's answer for `display: none`
                return False
            raise
        return box["width"] > 0 and box["height"] > 0

    def enabled(self, element: str) -> bool:
        return bool(call("GET", f"{self.url}/element/{element}/enabled"))

    def css(self, element: str, prop: str) -> str:
        return call("GET", f"{self.url}/element/{element}/css/{prop}")

    def click(self, element: str) -> None:
        call("POST", f"{self.url}/element/{element}/click", {})

    def clear(self, element: str) -> None:
        call("POST", f"{self.url}/element/{element}/clear", {})

    def send_keys(self, element: str, text: str) -> None:
        """Types `text` into `element` as key presses (KEY_ENTER, KEY_ESCAPE for those keys)."""
        call("POST", f"{self.url}/element/{element}/value", {"text": text})

    def title(self) -> str:
        return call("GET", f"{self.url}/title")

    def window_handles(self) -> list[str]:
        return call("GET", f"{self.url}/window/handles")

    def window_rect(self) -> dict[str, int]:
        """The window's position and size on screen: x, y, width, height."""
        return call("GET", f"{self.url}/window/rect")

    def screenshot(self) -> bytes:
        """The window's viewport as PNG bytes."""
        return base64.b64decode(call("GET", f"{self.url}/screenshot"))

    def execute(self, script: str, *args: Any) -> Any:
        """Runs `script` (a function body; `arguments` holds `args`) in the page and returns its result."""
        return call("POST", f"{self.url}/execute/sync", {"script": script, "args": list(args)})

    def execute_async(self, script: str, *args: Any, timeout: float = 30) -> Any:
        """Runs `script` in the page; it answers by calling `arguments[arguments.length - 1]`."""
        return call("POST", f"{self.url}/execute/async", {"script": script, "args": list(args)}, timeout=timeout)

    def alert_text(self) -> str | None:
        """The text of the open alert/confirm/prompt dialog, or None when there is none."""
        try:
            return call("GET", f"{self.url}/alert/text")
        except WebDriverError as err:
            if "no such alert" in str(err):
                return None
            raise

    def delete(self) -> None:
        call("DELETE", self.url)
