"""A minimal W3C WebDriver client on the standard library: enough to drive the app via tauri-driver."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from typing import Any

ELEMENT_KEY = "element-6066-11e4-a52e-4f735466cecf"


class WebDriverError(Exception):
    """The remote end answered with an error, or did not answer."""


def call(method: str, url: str, body: Any = None, timeout: float = 30) -> Any:
    """Sends one command and returns its `value`, raising WebDriverError on any failure."""
    data = None if body is None else json.dumps(body).encode()
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
    except (urllib.error.URLError, OSError) as err:
        raise WebDriverError(f"{method} {url} -> {err}") from None


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


class Session:
    """One WebDriver session, i.e. one running copy of the app."""

    def __init__(self, base_url: str, capabilities: dict[str, Any], timeout: float = 60) -> None:
        value = call("POST", f"{base_url}/session", {"capabilities": capabilities}, timeout=timeout)
        self.url = f"{base_url}/session/{value['sessionId']}"

    def find(self, css: str) -> str | None:
        """The id of the first element matching `css`, or None."""
        try:
            return call("POST", f"{self.url}/element", {"using": "css selector", "value": css})[ELEMENT_KEY]
        except WebDriverError as err:
            if "no such element" in str(err):
                return None
            raise

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
        return call("GET", f"{self.url}/element/{element}/text")

    def css(self, element: str, prop: str) -> str:
        return call("GET", f"{self.url}/element/{element}/css/{prop}")

    def title(self) -> str:
        return call("GET", f"{self.url}/title")

    def screenshot(self) -> bytes:
        """The window's viewport as PNG bytes."""
        return base64.b64decode(call("GET", f"{self.url}/screenshot"))

    def delete(self) -> None:
        call("DELETE", self.url)
