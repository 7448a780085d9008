#!/usr/bin/env python3
"""transformers' greedy `generate` of a tiny fixture on every OrandCar-A val image.

The fixture is ``models/tests/fixtures/<family>`` (``--family``: qwen3_5, the default, or the
mixture-of-experts qwen3_vl_moe / qwen3_5_moe). Writes ``tests/fixtures/<family>_val/goldens.json``: the transformers / torch versions, the
question, ``max_new_tokens``, and per val row of ``labels.jsonl`` (file order) its image path
(relative to the shared data directory) and the generated token ids (prompt excluded; the run
stops at ``<|im_end|>`` or ``<|endoftext|>``, kept as ``generate`` does: the end ids of the
published Qwen ``generation_config.json`` files, and the engine's own stop set for a
checkpoint without one).

Reference path: the fixture (``scripts/make_fixtures.py``),
``AutoProcessor.from_pretrained(dir, use_fast=False)`` (Pillow processor),
``apply_chat_template(..., add_generation_prompt=True, enable_thinking=True)``,
``AutoModelForImageTextToText`` in f32 with eager attention, ``generate(do_sample=False)``, one
image at a time (no padding).

Usage:  python scripts/make_qwen3_5_val_goldens.py [--family qwen3_5|qwen3_vl_moe|qwen3_5_moe]
        [--data /work/shared/data]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tiny_tokenizer  # noqa: E402

REPO = os.path.dirname(HERE)
MAX_NEW_TOKENS = 24


def main() -> int:
    import transformers
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="qwen3_5", choices=["qwen3_5", "qwen3_vl_moe", "qwen3_5_moe"])
    ap.add_argument("--data", default=os.environ.get("VERISAMPLE_SHARED_DATA", "/work/shared/data"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    fixture = os.path.join(REPO, "models", "tests", "fixtures", args.family)
    model = AutoModelForImageTextToText.from_pretrained(
        fixture, dtype=torch.float32, attn_implementation="eager").eval()
    processor = AutoProcessor.from_pretrained(fixture, use_fast=False)
    eos = processor.tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    with open(os.path.join(args.data, "orand-car-a", "labels.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    val = [r["file"] for r in rows if r["split"] == "val"]
    messages = [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": tiny_tokenizer.ORAND_QUESTION}]}]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                           enable_thinking=True)
    items = []
    for name in val:
        image = Image.open(os.path.join(args.data, "orand-car-a", name))
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                                 eos_token_id=eos, pad_token_id=eos[0])
        tokens = out[0, inputs["input_ids"].shape[1]:].tolist()
        items.append({"image": f"orand-car-a/{name}", "tokens": tokens})
    meta = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "question": tiny_tokenizer.ORAND_QUESTION,
        "enable_thinking": True,
        "max_new_tokens": MAX_NEW_TOKENS,
        "eos_token_ids": eos,
        "items": items,
    }
    out_dir = os.path.join(REPO, "tests", "fixtures", f"{args.family}_val")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    distinct = len({tuple(i["tokens"]) for i in items})
    print(f"{len(items)} val images, {distinct} distinct token sequences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
