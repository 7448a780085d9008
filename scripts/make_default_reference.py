#!/usr/bin/env python3
"""Reference greedy outputs of the default checkpoint (assets/model) with transformers.

Writes, for tests/default_model.rs:

- tests/fixtures/default_model/val_reference.jsonl: the 78 OrandCar-A `val` images
  (../shared/data/orand-car-a, labels.jsonl order);
- tests/fixtures/default_model/sample_reference.jsonl: the 48 rows of the bundled sample
  (assets/sample/data, file order);
- then runs scripts/make_judge_eval.py (tests/fixtures/default_model/judge_pairs.jsonl),
  unless --no-judge.

Each file's first line is a header object {"meta": {...}}: transformers/torch versions, the
SHA-256 of assets/model/model.safetensors (the Rust test refuses a fixture made for another
checkpoint), max_new_tokens, and the measured counts (`correct`, `n`) that the Rust test uses
as its accuracy floor. Every following line is one image: file, label, question,
prompt_ids_len, logit_margins (top-1 minus top-2 raw logit per generated token), generated_ids (greedy, batch 1, the end-of-sequence token included when
generation stopped), text (special tokens skipped), answer (after the last </think>), correct.

Settings (tests/fixtures/default_model/README.md): processor use_fast=False, chat template with
enable_thinking=True and add_generation_prompt=True, greedy, max_new_tokens 64, float32, CPU.
Correctness is contract §5 alnum over the three candidates (scripts/alnum_reference.py) of the
answer after the last </think> (contract §4 think split), against the label.

Usage: python scripts/make_default_reference.py [--ckpt assets/model] [--threads 2] [--no-judge]
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import alnum_reference  # noqa: E402

MAX_NEW_TOKENS = 64
OUT_DIR = os.path.join(REPO, "tests", "fixtures", "default_model")


def shared_data_dir() -> str:
    """$VERISAMPLE_SHARED_DATA, else <repo>/../../shared/data (a worktree), else <repo>/../shared/data."""
    cands = [os.environ.get("VERISAMPLE_SHARED_DATA"), os.path.join(REPO, "..", "..", "shared", "data"),
             os.path.join(REPO, "..", "shared", "data")]
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "orand-car-a", "labels.jsonl")):
            return os.path.abspath(c)
    raise SystemExit("no shared data (set VERISAMPLE_SHARED_DATA)")


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def answer_after_think(text: str) -> str:
    """contract §4 split: the text after the last </think>, stripped; "" when a <think> never closed."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1].strip()
    if "<think>" in text:
        return ""
    return text.strip()


def is_correct(answer: str, label: str) -> bool:
    return alnum_reference.match_variant(answer, label) is not None


class Reference:
    """The checkpoint in transformers: model, processor, end-of-sequence ids."""

    def __init__(self, ckpt: str):
        import torch
        from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

        self.torch = torch
        self.model = Qwen2VLForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32)
        self.model.eval()
        self.proc = AutoProcessor.from_pretrained(ckpt, use_fast=False)
        self.tok = self.proc.tokenizer
        gc = json.load(open(os.path.join(ckpt, "generation_config.json")))
        eos = gc.get("eos_token_id")
        eos = eos if isinstance(eos, list) else [eos]
        for t in ("<|im_end|>", "<|endoftext|>"):
            i = self.tok.convert_tokens_to_ids(t)
            if isinstance(i, int) and i >= 0:
                eos.append(i)
        self.eos = sorted(set(int(e) for e in eos if e is not None))
        self.pad = int(gc.get("pad_token_id", self.eos[0]))

    def generate(self, messages, images=None):
        """-> (prompt length, generated ids, text with special tokens skipped, top-1 minus top-2 logit per step)."""
        prompt = self.proc.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                               enable_thinking=True)
        if images:
            inputs = self.proc(text=[prompt], images=images, return_tensors="pt")
        else:
            inputs = self.tok([prompt], return_tensors="pt", add_special_tokens=False)
        with self.torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1,
                                      eos_token_id=self.eos, pad_token_id=self.pad, return_dict_in_generate=True,
                                      output_logits=True)
        n = int(inputs["input_ids"].shape[1])
        gen = [int(x) for x in out.sequences[0, n:].tolist()]
        # top-1 minus top-2 raw logit at every generated step: how close greedy was to a tie
        margins = []
        for step_logits in out.logits:
            top = self.torch.topk(step_logits[0].float(), 2).values
            margins.append(round(float(top[0] - top[1]), 5))
        return n, gen, self.tok.decode(gen, skip_special_tokens=True), margins


def meta(ref: "Reference", ckpt: str, extra: dict) -> dict:
    import torch
    import transformers

    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "model_sha256": file_sha256(os.path.join(ckpt, "model.safetensors")),
            "max_new_tokens": MAX_NEW_TOKENS, "enable_thinking": True, "processor_use_fast": False,
            "eos_token_ids": ref.eos, **extra}


def reading_set(ref: Reference, items, ckpt: str, out_path: str, source: str) -> tuple[int, int]:
    """items: iterable of (file, label, question, PIL image)."""
    rows, ok = [], 0
    for file, label, question, im in items:
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        n, gen, text, margins = ref.generate(msgs, [im])
        ans = answer_after_think(text)
        hit = is_correct(ans, label)
        ok += hit
        rows.append({"file": file, "label": label, "question": question, "prompt_ids_len": n,
                     "generated_ids": gen, "text": text, "answer": ans, "correct": hit, "logit_margins": margins})
    head = meta(ref, ckpt, {"source": source, "n": len(rows), "correct": ok})
    with open(out_path, "w") as f:
        f.write(json.dumps({"meta": head}) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"{os.path.relpath(out_path, REPO)}: {ok}/{len(rows)} correct", flush=True)
    return ok, len(rows)


def val_items():
    from PIL import Image

    root = os.path.join(shared_data_dir(), "orand-car-a")
    import tiny_tokenizer as tt

    for line in open(os.path.join(root, "labels.jsonl")):
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("split") != "val":
            continue
        yield r["file"], r["label"], tt.ORAND_QUESTION, Image.open(os.path.join(root, r["file"])).convert("RGB")


def sample_items():
    import glob

    import pyarrow.parquet as pq
    from PIL import Image

    for path in sorted(glob.glob(os.path.join(REPO, "assets", "sample", "data", "**", "*.parquet"), recursive=True)):
        for row in pq.read_table(path).to_pylist():
            qa = row["qa"][0]
            im = Image.open(io.BytesIO(row["image"]["bytes"])).convert("RGB")
            yield row["image"]["path"], qa["answer"], qa["question"], im


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", default=os.path.join(REPO, "assets", "model"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-judge", action="store_true", help="skip scripts/make_judge_eval.py")
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    os.makedirs(OUT_DIR, exist_ok=True)
    ref = Reference(a.ckpt)
    reading_set(ref, val_items(), a.ckpt, os.path.join(OUT_DIR, "val_reference.jsonl"), "orand-car-a val")
    reading_set(ref, sample_items(), a.ckpt, os.path.join(OUT_DIR, "sample_reference.jsonl"), "assets/sample/data")
    if not a.no_judge:
        import make_judge_eval

        make_judge_eval.run(ref, a.ckpt)


if __name__ == "__main__":
    main(sys.argv[1:])
