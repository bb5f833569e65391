"""Regenerate the chat-template test data of the engine crate from the Python reference.

    .deps/py/bin/python src-tauri/crates/engine/tests/data/make_template_cases.py

(run from the repository root). Writes a tiny checkpoint with tests/fixtures/make_checkpoint.py,
copies its text files (tokenizer, template, configs) to tests/data/tiny/, renders every case
below with tests/parity/reference.py (transformers' apply_chat_template, mlx-vlm's processor
for image expansion) and stores the results in tests/data/template_cases.json.
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[5]
HERE = Path(__file__).resolve().parent
TEXT_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json", "generation_config.json"]


def text(role, content):
    return {"role": role, "content": content}


SYSTEM = text("system", "You are a helpful assistant.  ")
CONVERSATION = [
    SYSTEM,
    text("user", "Hello there!"),
    text("assistant", "Hi! How can I help?"),
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this picture?"}]},
]

# name -> (messages, thinking, add_generation_prompt, number of images)
CASES = {
    "system_multiturn_image": (CONVERSATION, False, True, 1),
    "system_multiturn_image_thinking": (CONVERSATION, True, True, 1),
    "thinking_without_system": ([text("user", "Why is the sky blue?")], True, True, 0),
    "plain_user_trimmed": ([text("user", "  Good morning \n")], False, True, 0),
    "history_with_thoughts": (
        [
            text("user", "2+2?"),
            text("assistant", "<|channel>thought\nsimple arithmetic<channel|>It is 4."),
            text("user", "And 3+3?"),
        ],
        True,
        True,
        0,
    ),
    "two_images_unicode": (
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare"},
                    {"type": "image"},
                    {"type": "text", "text": "with"},
                    {"type": "image"},
                    {"type": "text", "text": "— which is 更好? 👍"},
                ],
            }
        ],
        False,
        True,
        2,
    ),
    "no_generation_prompt": (CONVERSATION[:3], False, False, 0),
}


def reference(model: Path, messages, thinking: bool, generation_prompt: bool, images: list[Path]) -> dict:
    cmd = [sys.executable, str(ROOT / "tests/parity/reference.py"), "template", "--model", str(model)]
    cmd += ["--messages", json.dumps(messages, ensure_ascii=False)]
    if thinking:
        cmd.append("--thinking")
    if not generation_prompt:
        cmd.append("--no-generation-prompt")
    for image in images:
        cmd += ["--image", str(image)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"reference.py failed:\n{done.stderr}")
    out = done.stdout
    return json.loads(out.strip().splitlines()[-1])


def soft_tokens(ids: list[int], image_id: int) -> list[int]:
    """Lengths of the runs of image tokens: one per image."""
    runs, current = [], 0
    for token in ids + [None]:
        if token == image_id:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "tiny"
        subprocess.run(
            [sys.executable, str(ROOT / "tests/fixtures/make_checkpoint.py"), "--variant", "tiny", "--out", str(model)],
            check=True,
        )
        (HERE / "tiny").mkdir(exist_ok=True)
        for name in TEXT_FILES:
            shutil.copyfile(model / name, HERE / "tiny" / name)
        image_id = json.loads((model / "config.json").read_text())["image_token_id"]

        images = [Path(tmp) / "wide.png", Path(tmp) / "tall.png"]
        Image.new("RGB", (320, 160), (200, 40, 40)).save(images[0])
        Image.new("RGB", (96, 224), (40, 40, 200)).save(images[1])

        cases = []
        for name, (messages, thinking, generation_prompt, n_images) in CASES.items():
            plain = reference(model, messages, thinking, generation_prompt, [])
            case = {
                "name": name,
                "messages": messages,
                "enable_thinking": thinking,
                "add_generation_prompt": generation_prompt,
                "prompt": plain["prompt"],
                "prompt_ids": plain["input_ids"],
            }
            if n_images:
                expanded = reference(model, messages, thinking, generation_prompt, images[:n_images])
                if expanded["prompt"] != plain["prompt"]:
                    raise SystemExit(f"{name}: the prompt changed when images were given")
                case["soft_tokens_per_image"] = soft_tokens(expanded["input_ids"], image_id)
                case["input_ids"] = expanded["input_ids"]
            cases.append(case)

    header = "Generated by make_template_cases.py from the Python reference; do not edit by hand."
    (HERE / "template_cases.json").write_text(
        json.dumps({"about": header, "cases": cases}, indent=1, ensure_ascii=False) + "\n"
    )
    print(f"wrote {len(cases)} cases to {HERE / 'template_cases.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
