#!/usr/bin/env python3
"""Reference outputs of transformers' greedy `generate` for checkpoints that ship a
`generation_config.json`, for tests/generation_config.rs.

Each case is a checkpoint of the repository (a tiny parity fixture of models/tests/fixtures, or
the default model assets/model) plus a `generation_config.json`. The script copies the
checkpoint to a temporary folder, writes the case's `generation_config.json` there, loads it
with `from_pretrained` as a user would, and runs `model.generate(**inputs, do_sample=False,
max_new_tokens=N)` over the 48 images of the bundled sample (assets/sample/data, file order,
each row's first question; PNG, so both sides decode the same pixels). transformers then applies
what the file asks for in greedy decoding (repetition_penalty, eos_token_id; the sampling keys
do not apply with do_sample=False). It also runs the same inputs without the file's settings
(`repetition_penalty=1.0`, the end-of-sequence ids our engine uses without the file), which is
what `--generation-config off` must reproduce.

Writes tests/fixtures/generation_config/<case>.json:
  {"meta": {transformers, torch, base, base_model_sha256, generation_config, max_new_tokens,
            eos_plain, n, changed_by_settings, min_margin},
   "items": [{file, prompt_ids_len, generated_ids, plain_ids, min_margin}]}
`generated_ids` / `plain_ids` include the end-of-sequence token when generation stopped;
`min_margin` is the smallest top-1 minus top-2 of the processed scores over the steps (how close
greedy came to a tie).

Usage: python scripts/make_generation_fixtures.py [--case NAME ...] [--threads 2]
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT_DIR = os.path.join(REPO, "tests", "fixtures", "generation_config")
SAMPLE = os.path.join(REPO, "assets", "sample", "data", "train-00000-of-00001.parquet")

# Published settings (Qwen's generation_config.json of the named checkpoint), with the token
# ids of the real vocabulary ("<|endoftext|>" 151643, "<|im_end|>" 151645) replaced by the
# same tokens of the tiny tokenizer.
PUBLISHED = {
    # Qwen/Qwen2-VL-7B-Instruct
    "qwen2_vl": {"bos_token_id": "<|endoftext|>", "pad_token_id": "<|endoftext|>", "do_sample": True,
                 "eos_token_id": ["<|im_end|>", "<|endoftext|>"], "repetition_penalty": 1.05,
                 "temperature": 0.01, "top_p": 0.001, "top_k": 1, "transformers_version": "4.37.0"},
    # Qwen/Qwen2.5-VL-7B-Instruct
    "qwen2_5_vl": {"bos_token_id": "<|endoftext|>", "pad_token_id": "<|endoftext|>", "do_sample": True,
                   "eos_token_id": ["<|im_end|>", "<|endoftext|>"], "repetition_penalty": 1.05,
                   "temperature": 0.1, "top_p": 0.001, "top_k": 1, "transformers_version": "4.41.2"},
    # Qwen/Qwen3-VL-8B-Instruct
    "qwen3_vl": {"bos_token_id": "<|endoftext|>", "pad_token_id": "<|endoftext|>", "do_sample": True,
                 "eos_token_id": ["<|im_end|>", "<|endoftext|>"], "top_k": 20, "top_p": 0.8,
                 "repetition_penalty": 1.0, "temperature": 0.7, "transformers_version": "4.56.0"},
}

# name -> (checkpoint folder relative to the repository, generation_config.json, max_new_tokens)
CASES = {
    "qwen2_vl_published": ("models/tests/fixtures/qwen2_vl", PUBLISHED["qwen2_vl"], 32),
    "qwen2_5_vl_published": ("models/tests/fixtures/qwen2_5_vl", PUBLISHED["qwen2_5_vl"], 32),
    "qwen3_vl_published": ("models/tests/fixtures/qwen3_vl", PUBLISHED["qwen3_vl"], 32),
    # Held out: the trained default model (its answers are digit strings, where the penalty
    # matters) and the Qwen3-VL fixture, each with settings of its own.
    "default_model_held_out": ("assets/model",
                               {**PUBLISHED["qwen2_5_vl"], "repetition_penalty": 1.25}, 64),
    "qwen3_vl_held_out": ("models/tests/fixtures/qwen3_vl",
                          {"eos_token_id": ["<|im_end|>", "<|endoftext|>"], "repetition_penalty": 1.3,
                           "do_sample": False}, 32),
}


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sample_items():
    """(file, question, PIL image) of the bundled sample, file order, first question per row."""
    import pyarrow.parquet as pq
    from PIL import Image

    for row in pq.read_table(SAMPLE).to_pylist():
        im = Image.open(io.BytesIO(row["image"]["bytes"]))
        im.load()
        yield row["image"]["path"], row["qa"][0]["question"], im


class Processor:
    """What `AutoProcessor.from_pretrained(dir, use_fast=False)` and `processor(text, images)` do
    for one image (Qwen2VLProcessor.__call__ of transformers 5.24), spelled out because that
    class needs torchvision for its video processor: the PIL image processor, the chat template
    with enable_thinking, each `<|image_pad|>` repeated grid_t·grid_h·grid_w / merge² times,
    the tokenizer, and `mm_token_type_ids` (1 on image-pad tokens)."""

    def __init__(self, ckpt: str):
        from transformers import AutoTokenizer
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        self.images = Qwen2VLImageProcessorPil.from_pretrained(ckpt)
        self.tok = AutoTokenizer.from_pretrained(ckpt)
        with open(os.path.join(ckpt, "chat_template.jinja")) as f:
            self.template = f.read()
        self.pad_id = self.tok.convert_tokens_to_ids("<|image_pad|>")

    def __call__(self, messages, image) -> dict:
        prompt = self.tok.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                              add_generation_prompt=True, enable_thinking=True)
        pix = self.images(images=[image], return_tensors="pt")
        n = int(pix["image_grid_thw"][0].prod()) // self.images.merge_size ** 2
        enc = self.tok([prompt.replace("<|image_pad|>", "<|image_pad|>" * n)], return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                "mm_token_type_ids": (enc["input_ids"] == self.pad_id).long(),
                "pixel_values": pix["pixel_values"], "image_grid_thw": pix["image_grid_thw"]}


def with_ids(cfg: dict, tok) -> dict:
    """Replace token names by the tokenizer's ids (lists element-wise)."""
    def one(v):
        return tok.convert_tokens_to_ids(v) if isinstance(v, str) and v.startswith("<|") else v
    return {k: ([one(x) for x in v] if isinstance(v, list) else one(v)) for k, v in cfg.items()}


def run_case(name: str) -> None:
    import torch
    import transformers
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    base, cfg, max_new = CASES[name]
    src = os.path.join(REPO, base)
    tok = AutoTokenizer.from_pretrained(src)
    gen_cfg = with_ids(cfg, tok)
    with tempfile.TemporaryDirectory() as tmp:
        for f in os.listdir(src):
            if f.endswith((".json", ".safetensors", ".jinja", ".txt")) and f != "generation_config.json":
                shutil.copy(os.path.join(src, f), tmp)
        with open(os.path.join(tmp, "generation_config.json"), "w") as f:
            json.dump(gen_cfg, f, indent=2)
        model = AutoModelForImageTextToText.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        proc = Processor(tmp)
    # The end-of-sequence ids of our engine without the file: config.json's and the tokenizer's.
    text_cfg = model.config.get_text_config()
    eos_plain = {int(text_cfg.eos_token_id)} if text_cfg.eos_token_id is not None else set()
    eos_plain |= {tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    eos_plain = sorted(int(e) for e in eos_plain if e is not None and e >= 0)

    items, changed, overall = [], 0, float("inf")
    for file, question, im in sample_items():
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        inputs = proc(msgs, im)
        n = int(inputs["input_ids"].shape[1])
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=False, max_new_tokens=max_new,
                                 return_dict_in_generate=True, output_scores=True)
            plain = model.generate(**inputs, do_sample=False, max_new_tokens=max_new, repetition_penalty=1.0,
                                   eos_token_id=eos_plain, pad_token_id=eos_plain[0])
        gen = [int(x) for x in out.sequences[0, n:].tolist()]
        plain_ids = [int(x) for x in plain[0, n:].tolist()]
        margin = min(float(torch.topk(s[0].float(), 2).values.diff().abs()) for s in out.scores)
        overall = min(overall, margin)
        changed += gen != plain_ids
        items.append({"file": file, "prompt_ids_len": n, "generated_ids": gen, "plain_ids": plain_ids,
                      "min_margin": round(margin, 6)})
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "base": base,
            "base_model_sha256": file_sha256(os.path.join(src, "model.safetensors")),
            "generation_config": gen_cfg, "max_new_tokens": max_new, "eos_plain": eos_plain,
            "n": len(items), "changed_by_settings": changed, "min_margin": round(overall, 6)}
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, f"{name}.json")
    with open(path, "w") as f:
        json.dump({"meta": meta, "items": items}, f, indent=1)
        f.write("\n")
    print(f"{name}: {len(items)} images, {changed} changed by the settings, min margin {overall:.4g}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="default: all")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    for name in args.case or sorted(CASES):
        run_case(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
