#!/usr/bin/env python3
"""Clients nobody here wrote against `gemma-desk-cli serve` on the tiny fixture: the official
`openai` Python SDK and `langchain-openai` (pinned in tests/requirements.txt), and with `--node`
the official `openai` Node SDK (tests/api/node/client.mjs, pinned in its package.json). Each step
checks what the client got, not only that it did not raise: the model list, a plain answer and
its usage (and the prompt cache on a repeat), a streamed answer about an image with the usage
chunk, one about a sound clip (`input_audio`) and a broken clip refused, tools and a tool's result, forced calls (`tool_choice` named and required, the SDK's
`parse()` and stream helper with a pydantic tool), thinking turned on, `responses.create` and `responses.stream`
(text, events, usage), four streams at once (each its own answer and usage), a wrong key, an
unknown model and a prompt too long for the context;
LangChain's invoke and stream agree; a second server on the same port is refused in words. Then
SIGTERM (what Ctrl+C does) stops the server cleanly.

    python tests/api/openai_client.py --cli target/debug/gemma-desk-cli --model tests/out/fixtures/tiny \
        [--node tests/api/node]
"""

import argparse
import base64
import json
import os
import re
import secrets
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
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


class Alarm(BaseModel):
    """A tool's arguments, as `openai.pydantic_function_tool` declares them (strict)."""

    hour: int = Field(ge=0, le=23)
    loud: bool


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

    tools_and_thinking(client)
    responses(client)
    audio(client)

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


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city today",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city", "maxLength": 12}},
            "required": ["city"],
        },
    },
}


def wav(seconds: float, rate: int = 16000) -> bytes:
    """A 16-bit mono WAV of a gliding tone, written with the standard library."""
    import io
    import math
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        frames = (int(9000 * math.sin(2 * math.pi * (200 + 40 * i / rate) * i / rate)) for i in range(int(seconds * rate)))
        f.writeframes(b"".join(struct.pack("<h", v) for v in frames))
    return buffer.getvalue()


def audio(client: OpenAI) -> None:
    """A streamed answer about a sound clip (`input_audio`, as the SDK types it), and a broken one."""
    question = "What is said in this recording?"
    text_only = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], max_tokens=1, temperature=0
    ).usage.prompt_tokens
    clip = base64.b64encode(wav(2.0)).decode()
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": question},
            {"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}},
        ]}],
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    # 2 s at 25 tokens per second, between `<|audio>` and `<audio|>`.
    check(usage.prompt_tokens == text_only + 52, f"the clip was heard ({usage.prompt_tokens} vs {text_only} prompt tokens)")
    check(1 <= usage.completion_tokens <= 4, "an answer about the clip")
    try:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"RIFF1234WAVEjunk").decode(), "format": "wav"}},
            ]}],
            max_tokens=2,
        )
        check(False, "a broken audio file is refused")
    except openai.BadRequestError as e:
        check("audio" in str(e), f"a broken audio file is refused in words ({e.message[:80]})")


def at_once(client: OpenAI) -> None:
    """Four streams from four threads at once: each ends with its own usage and is the answer
    it gets alone (greedy), and all four were streaming before the first of them ended."""
    def prompt(k: int) -> list[dict]:
        return [{"role": "user", "content": f"Describe a city, number {k + 1}."}]

    alone = [
        client.chat.completions.create(model=MODEL, messages=prompt(k), max_tokens=20, temperature=0)
        for k in range(4)
    ]
    results: list[dict] = [{} for _ in range(4)]

    def stream(k: int) -> None:
        text, usage, first = "", None, None
        for chunk in client.chat.completions.create(
            model=MODEL, messages=prompt(k), max_tokens=20, temperature=0, stream=True,
            stream_options={"include_usage": True},
        ):
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                if c.delta.content:
                    first = first or time.monotonic()
                    text += c.delta.content
        results[k] = {"text": text, "usage": usage, "first": first, "last": time.monotonic()}

    threads = [threading.Thread(target=stream, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    check(all(r.get("usage") is not None for r in results), "four streams at once all ended with a usage chunk")
    check(all(r["text"] == a.choices[0].message.content for r, a in zip(results, alone)),
          "each of four streams at once is the answer it gets alone (greedy)")
    check(all(r["usage"].completion_tokens == a.usage.completion_tokens
              and r["usage"].total_tokens == r["usage"].prompt_tokens + r["usage"].completion_tokens
              for r, a in zip(results, alone)), "each counts its own tokens")
    first_end = min(r["last"] for r in results)
    check(all(r["first"] is not None and r["first"] <= first_end for r in results),
          "all four were streaming before the first of them ended")


def tools_and_thinking(client: OpenAI) -> None:
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    plain = client.chat.completions.create(model=MODEL, messages=ask, max_tokens=1, temperature=0)
    offered = client.chat.completions.create(model=MODEL, messages=ask, tools=[WEATHER], max_tokens=1, temperature=0)
    check(offered.usage.prompt_tokens > plain.usage.prompt_tokens + 20,
          f"the tool is declared to the model ({offered.usage.prompt_tokens} vs {plain.usage.prompt_tokens} prompt tokens)")
    called = ask + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"sky": "sunny", "deg": 21})},
    ]
    answered = client.chat.completions.create(model=MODEL, messages=called, tools=[WEATHER], max_tokens=3, temperature=0)
    choice = answered.choices[0]
    check(choice.finish_reason in ("stop", "length", "tool_calls"), f"a tool's result is answered ({choice.finish_reason})")
    check(answered.usage.prompt_tokens > offered.usage.prompt_tokens, "the call and its result are in the prompt")
    forced = client.chat.completions.create(
        model=MODEL, messages=ask, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False, max_tokens=200, temperature=0,
    )
    calls = forced.choices[0].message.tool_calls or []
    check(forced.choices[0].finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name == "get_weather",
          "a named tool_choice makes the model call it (finish_reason tool_calls)")
    check(isinstance(json.loads(calls[0].function.arguments).get("city"), str), "the forced call's arguments are JSON with a city")

    # The SDK's own strict tools from a pydantic model, whole and through its stream helper.
    alarm_tool = openai.pydantic_function_tool(Alarm)
    parsed = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Wake me up."}], tools=[alarm_tool],
        tool_choice="required", parallel_tool_calls=False, max_tokens=200, temperature=0,
    )
    call = (parsed.choices[0].message.tool_calls or [None])[0]
    check(call is not None and isinstance(call.function.parsed_arguments, Alarm),
          f"parse() with tool_choice required gives an Alarm: {call and call.function.parsed_arguments!r}")
    with client.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": "Wake me up."}], tools=[alarm_tool],
        tool_choice="required", parallel_tool_calls=False, max_tokens=200, temperature=0,
    ) as stream:
        done = [e for e in stream if e.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()
    check(len(done) == 1 and done[0].name == "Alarm" and isinstance(done[0].parsed_arguments, Alarm),
          "the stream helper reports the call's arguments done, parsed")
    check(done[0].parsed_arguments == call.function.parsed_arguments
          and final.choices[0].message.tool_calls[0].function.parsed_arguments == call.function.parsed_arguments,
          "the streamed call is the whole answer's (greedy)")

    thinking = client.chat.completions.create(
        model=MODEL, messages=ask, max_tokens=1, temperature=0,
        extra_body={"chat_template_kwargs": {"enable_thinking": True}},
    )
    check(thinking.usage.prompt_tokens > plain.usage.prompt_tokens, "enable_thinking turns thinking on")
    stream = client.chat.completions.create(
        model=MODEL, messages=ask, max_tokens=6, temperature=0, reasoning_effort="high", stream=True,
    )
    chunks = [c for c in stream if c.choices]
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    reasoning = [getattr(c.choices[0].delta, "reasoning_content", None) for c in chunks]
    check("<|channel>" not in content and all(r is None or isinstance(r, str) for r in reasoning),
          "with reasoning on, a thought would stream as reasoning_content, never in the content")


def responses(client: OpenAI) -> None:
    first = client.responses.create(
        model=MODEL, instructions="You are terse.", input="Say something.", max_output_tokens=4, temperature=0,
    )
    check(first.object == "response" and first.status in ("completed", "incomplete"), f"a response ({first.status})")
    usage = first.usage
    check(usage is not None and 1 <= usage.output_tokens <= 4, "output tokens within max_output_tokens")
    check(usage.total_tokens == usage.input_tokens + usage.output_tokens, "total = input + output")
    check(usage.input_tokens_details.cached_tokens >= 0, "cached tokens reported")
    check(isinstance(first.output_text, str), "output_text reads the answer")

    with client.responses.stream(
        model=MODEL, instructions="You are terse.", input=[{"role": "user", "content": "Say something."}],
        max_output_tokens=4, temperature=0,
    ) as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    check(kinds[:2] == ["response.created", "response.in_progress"], "responses.stream opens with created, in_progress")
    check([e.sequence_number for e in events] == list(range(len(events))), "sequence numbers count up from 0")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    last = events[-1]
    check(last.type in ("response.completed", "response.incomplete"), f"the stream ends with {last.type}")
    check(text == first.output_text, "the streamed text is the same greedy answer")
    check(last.response.usage.output_tokens == usage.output_tokens, "the streamed usage matches")
    check(last.response.usage.input_tokens_details.cached_tokens > 0, "the repeat reused the prompt cache")

    raw = client.responses.create(model=MODEL, input="Say something.", max_output_tokens=2, temperature=0, stream=True)
    raw_kinds = [e.type for e in raw]
    check(raw_kinds[0] == "response.created" and raw_kinds[-1] in ("response.completed", "response.incomplete"),
          "responses.create(stream=True) yields the typed events")
    try:
        client.responses.create(model=MODEL, input="Again", previous_response_id="resp_123")
        check(False, "previous_response_id is refused")
    except openai.BadRequestError as e:
        check(e.param == "previous_response_id", "previous_response_id raises BadRequestError (the server keeps no responses)")


def langchain(base_url: str, key: str) -> None:
    """LangChain's `ChatOpenAI`, as an app built on LangChain would point it at us."""
    import langchain_openai
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_openai import ChatOpenAI

    print(f"langchain-openai {langchain_openai.__version__ if hasattr(langchain_openai, '__version__') else ''}".strip())
    chat = ChatOpenAI(model=MODEL, base_url=base_url, api_key=key, temperature=0, max_tokens=5,
                      max_retries=0, timeout=300, stream_usage=True)
    messages = [SystemMessage("Reply in one word."), HumanMessage("Pick a fruit.")]
    answer = chat.invoke(messages)
    check(isinstance(answer.content, str), "langchain: invoke returns an AIMessage with text")
    meta = answer.usage_metadata
    check(meta is not None and 1 <= meta["output_tokens"] <= 5, "langchain: usage_metadata counts the answer's tokens")
    check(meta["total_tokens"] == meta["input_tokens"] + meta["output_tokens"], "langchain: total = input + output")
    check(answer.response_metadata.get("finish_reason") in ("stop", "length"), "langchain: a finish_reason")
    chunks = list(chat.stream(messages))
    check(len(chunks) >= 2, f"langchain: the answer streamed in {len(chunks)} chunks")
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole = whole + chunk
    check(whole.content == answer.content, "langchain: the streamed chunks add up to the invoked answer (greedy)")
    check(whole.usage_metadata is not None and whole.usage_metadata["output_tokens"] == meta["output_tokens"],
          "langchain: the stream's usage counts the same tokens")
    tooled = chat.bind_tools([Alarm], tool_choice="Alarm", parallel_tool_calls=False).invoke(
        [HumanMessage("Wake me up.")], max_tokens=200)
    check(len(tooled.tool_calls) == 1 and tooled.tool_calls[0]["name"] == "Alarm"
          and Alarm(**tooled.tool_calls[0]["args"]) is not None,
          f"langchain: bind_tools with a forced tool gives a valid call {tooled.tool_calls}")
    ticket = chat.with_structured_output(Ticket, method="json_schema").invoke(
        [HumanMessage("File a ticket.")], max_tokens=200)
    check(isinstance(ticket, Ticket), f"langchain: with_structured_output(json_schema) gives a Ticket: {ticket!r}")
    batch = chat.batch([[HumanMessage("One.")], [HumanMessage("Two.")]])
    check(len(batch) == 2 and all(isinstance(b.content, str) for b in batch),
          "langchain: two requests sent together are both answered (queued)")


def node_client(node_dir: str, base_url: str, key: str) -> None:
    """The official Node SDK, run as a separate program against the same server."""
    env = dict(os.environ, GD_BASE_URL=base_url, GD_API_KEY=key, GD_MODEL=MODEL)
    done = subprocess.run(["node", os.path.join(node_dir, "client.mjs")], env=env, timeout=900,
                          capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
    check(done.returncode == 0, "the openai Node SDK's checks passed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--node", help="tests/api/node with its node_modules installed (npm ci)")
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
            client = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=300)
            run(client, base_url)
            at_once(client)
            langchain(base_url, key)
            if args.node:
                node_client(args.node, base_url, key)
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
