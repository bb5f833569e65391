#!/usr/bin/env python3
"""The official `openai` Python SDK (pinned in tests/requirements.txt), a client nobody here
wrote, against `gemma-desk-cli serve` on the tiny fixture. Each step checks what the client got,
not only that it did not raise: the model list, a plain answer and its usage (and the prompt
cache on a repeat), a streamed answer about an image with the usage chunk, a wrong key, an
unknown model and a prompt too long for the context; a second server on the same port is
refused in words. Then SIGTERM (what Ctrl+C does) stops the server cleanly.

    python tests/api/openai_client.py --cli target/debug/gemma-desk-cli --model tests/out/fixtures/tiny
"""

import argparse
import base64
import os
import re
import secrets
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import zlib
from typing import Literal

import openai
from openai import OpenAI
from pydantic import BaseModel, Field

MODEL = "tiny"
CONTEXT = 512


def png(width: int, height: int) -> bytes:
    """A small RGB PNG, written by hand (no imaging library needed)."""
    rows = b"".join(
        b"\x00" + bytes(v for x in range(width) for v in ((x * 7) % 256, (y * 5) % 256, (x + y) % 256))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}")


def start(cli: str, model: str, key_file: str, log) -> tuple[subprocess.Popen, str]:
    """Starts `serve` on a free port and returns it with the base URL it printed."""
    server = subprocess.Popen(
        [cli, "serve", "--model", model, "--port", "0", "--api-key-file", key_file,
         "--context-length", str(CONTEXT), "--dtype", "float32"],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )
    found: list[str] = []

    def read() -> None:
        assert server.stdout is not None
        for line in server.stdout:
            match = re.search(r"at (http://127\.0\.0\.1:\d+/v1)$", line.strip())
            if match:
                found.append(match.group(1))
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=300)
    if not found:
        server.kill()
        server.wait()
        log.seek(0)
        raise SystemExit(f"`serve` printed no address; stderr:\n{log.read()}")
    return server, found[0]


class Ticket(BaseModel):
    """What `parse()` must give back: every field bounded."""

    title: str = Field(max_length=12)
    priority: int = Field(ge=1, le=5)
    open: bool
    team: Literal["web", "app", "api"]


def run(client: OpenAI, base_url: str) -> None:
    models = client.models.list()
    check([m.id for m in models.data] == [MODEL], f"the model list is [{MODEL}]")
    check(client.models.retrieve(MODEL).id == MODEL, "one model by id")

    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say something."},
    ]
    first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    choice = first.choices[0]
    check(first.object == "chat.completion" and first.model == MODEL, "a chat.completion from the model")
    check(choice.message.role == "assistant" and isinstance(choice.message.content, str), "an assistant message")
    check(choice.finish_reason in ("stop", "length"), f"finish_reason {choice.finish_reason}")
    usage = first.usage
    check(usage is not None and 1 <= usage.completion_tokens <= 4, "completion tokens within max_tokens")
    check(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, "total = prompt + completion")

    again = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    cached = again.usage.prompt_tokens_details.cached_tokens
    check(cached >= again.usage.prompt_tokens // 2, f"the repeat reused the prompt cache ({cached} of {again.usage.prompt_tokens})")
    check(again.choices[0].message.content == choice.message.content, "greedy answers repeat")

    data_url = "data:image/png;base64," + base64.b64encode(png(96, 96)).decode()
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": data_url}},
        ]}],
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    check(chunks[0].choices[0].delta.role == "assistant", "the stream opens with the role")
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    check(finishes in (["stop"], ["length"]), f"one finish_reason in the stream ({finishes})")
    last = chunks[-1]
    check(last.choices == [] and last.usage is not None, "the last chunk carries the usage and no choices")
    check(all(c.usage is None for c in chunks[:-1]), "no usage before the last chunk")
    text_only = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is in this picture?"}], max_tokens=1, temperature=0
    ).usage.prompt_tokens
    check(last.usage.prompt_tokens >= text_only + 4, f"the image was read ({last.usage.prompt_tokens} vs {text_only} prompt tokens)")
    check(1 <= last.usage.completion_tokens <= 4, "streamed completion tokens within max_tokens")

    wrong = OpenAI(base_url=base_url, api_key="not-the-key-not-the-key", max_retries=0)
    try:
        wrong.models.list()
        check(False, "a wrong key is refused")
    except openai.AuthenticationError as e:
        check(e.status_code == 401 and e.code == "invalid_api_key", "a wrong key raises AuthenticationError (401, invalid_api_key)")

    try:
        client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=1)
        check(False, "an unknown model is refused")
    except openai.NotFoundError as e:
        check(e.code == "model_not_found" and MODEL in str(e.message), "an unknown model raises NotFoundError naming ours")

    try:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "word " * (CONTEXT * 2)}], max_tokens=1
        )
        check(False, "a prompt too long is refused")
    except openai.BadRequestError as e:
        check(e.code == "context_length_exceeded", "a prompt too long raises BadRequestError (context_length_exceeded)")

    # Structured output: the SDK's own schema from a pydantic model, enforced while sampling,
    # parsed back by the SDK (a random model can only satisfy it by ending: every field bounded).
    for extra in ({"temperature": 0}, {"temperature": 1, "seed": 5}):
        parsed = client.chat.completions.parse(
            model=MODEL, messages=[{"role": "user", "content": "File a ticket."}], max_tokens=200,
            response_format=Ticket, **extra,
        )
        choice = parsed.choices[0]
        ticket = choice.message.parsed
        check(choice.finish_reason == "stop" and isinstance(ticket, Ticket), f"parse() gives a Ticket ({extra}): {ticket!r}")
        check(len(ticket.title) <= 12 and 1 <= ticket.priority <= 5 and ticket.team in ("web", "app", "api"),
              "the ticket's fields are within the schema's bounds")
    try:
        client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=1,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "colour"}}},
        )
        check(False, "a schema that cannot be enforced is refused")
    except openai.BadRequestError as e:
        check(e.param == "response_format", "a schema that cannot be enforced raises BadRequestError (param response_format)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    print(f"openai {openai.__version__}")
    key = "gd-test-" + secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        key_file = os.path.join(tmp, "key")
        with open(key_file, "w") as f:
            f.write(key + "\n")
        log = open(os.path.join(tmp, "stderr"), "w+")
        server, base_url = start(args.cli, args.model, key_file, log)
        try:
            run(OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=300), base_url)
            port = base_url.split(":")[2].split("/")[0]
            busy = subprocess.run(
                [args.cli, "serve", "--model", args.model, "--port", port, "--api-key-file", key_file],
                capture_output=True, text=True, timeout=120,
            )
            check(busy.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in busy.stderr,
                  "a second server on the same port is an error in words")
        except BaseException:
            server.kill()
            server.wait()
            log.seek(0)
            print(f"server stderr:\n{log.read()}", file=sys.stderr)
            raise
        # SIGTERM takes the same path as Ctrl+C (SIGINT) in `serve`. SIGINT itself is not sent:
        # on Linux's CPU backend MLX compiles kernels through system(), which ignores SIGINT in
        # the whole process while the compiler runs, so a Ctrl+C can be lost (docs/API.md §3).
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            raise SystemExit("`serve` did not stop on SIGTERM")
        if code != 0:
            log.seek(0)
            print(f"server stderr:\n{log.read()}", file=sys.stderr)
        check(code == 0, f"SIGTERM stops the server cleanly (exit {code})")
    print("openai client: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
