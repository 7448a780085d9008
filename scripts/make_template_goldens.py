#!/usr/bin/env python3
"""Render the chat-template fixtures with transformers' own jinja2 renderer.

Writes ``models/tests/fixtures/templates/expected.json``: for each template in that folder and
each case below, the text ``render_jinja_template`` produces (transformers' jinja2 settings:
trim_blocks, lstrip_blocks, loop controls). The Rust test renders the same cases with
minijinja and compares byte for byte.

Usage: python scripts/make_template_goldens.py
"""

import json
import os

from transformers.utils.chat_template_utils import render_jinja_template

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "tests", "fixtures", "templates")
Q = "What is written in the image? Answer in short."
CASES = {
    "image_question": (
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": Q}]}],
        {"add_generation_prompt": True, "enable_thinking": True},
    ),
    "system_text_no_thinking": (
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is 11850 equal to ll.850?"}],
        {"add_generation_prompt": True, "enable_thinking": False},
    ),
    "multi_turn_two_images": (
        [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "first"}]},
            {"role": "assistant", "content": "<think>\nreading\n</think>\n\n1990"},
            {"role": "user", "content": [{"type": "text", "text": "and "}, {"type": "image"}, {"type": "text", "text": " this?"}]},
        ],
        {"add_generation_prompt": False},
    ),
}


def main() -> None:
    out = {}
    for name in sorted(os.listdir(HERE)):
        if not name.endswith(".jinja"):
            continue
        template = open(os.path.join(HERE, name), encoding="utf-8").read()
        for case, (messages, kwargs) in CASES.items():
            rendered, _ = render_jinja_template(conversations=[messages], chat_template=template, **kwargs)
            out[f"{name}/{case}"] = {"messages": messages, "kwargs": kwargs, "rendered": rendered[0]}
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
