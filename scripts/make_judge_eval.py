#!/usr/bin/env python3
"""Held-out judge pairs and the default checkpoint's transformers verdicts on them.

Draws 200 (reference, candidate, rule verdict) pairs with the trainer's rule-based generator
(`judge_pair` of scripts/tiny_vlm_data.py, as used by scripts/train_tiny_vlm.py) from
`random.Random(HELD_OUT_SEED)`. Seeds used by
the trainer: 1234 (training stream), 999 (its judge eval, used to pick the best checkpoint),
4242 (sample-style eval); HELD_OUT_SEED is none of them. (The generator's space is small, so
some pairs also occur in training; the set is held out by seed, not by content.)

Each pair is run text-only through transformers (the chat template's user turn is the contract §6
judge prompt, enable_thinking=True, greedy, max_new_tokens 64) and its verdict is parsed with
a port of verisample::judge::parse_verdict (contract §6, fail closed).

Writes tests/fixtures/default_model/judge_pairs.jsonl: a header line {"meta": {...}}
(versions, model SHA-256, seed, n, agreed = pairs whose parsed verdict equals the rule), then one
line per pair: question, reference, candidate, rule_verdict, prompt_ids_len, generated_ids,
text, verdict, logit_margins (top-1 minus top-2 raw logit per generated token).

Usage: python scripts/make_judge_eval.py [--ckpt assets/model] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import tiny_tokenizer as tt  # noqa: E402
from tiny_vlm_data import judge_pair  # noqa: E402

HELD_OUT_SEED = 20261130
N_PAIRS = 200
OUT_PATH = os.path.join(REPO, "tests", "fixtures", "default_model", "judge_pairs.jsonl")
VERDICTS = ("CORRECT", "WRONG", "UNSURE")


def build_judge_prompt(question: str, reference: str, candidate: str) -> str:
    """One-pass substitution of the contract §6 template (verisample::judge::build_judge_prompt)."""
    subs = {"{question}": question, "{reference}": reference, "{candidate}": candidate}
    return re.sub(r"\{question\}|\{reference\}|\{candidate\}", lambda m: subs[m.group(0)], tt.JUDGE_TEMPLATE)


def _negated(before: str) -> bool:
    t = re.sub(r"[^\w]+$", "", before)
    m = re.search(r"[\w'\u2019]*$", t)
    w = (m.group(0) if m else "").lower()
    return w in ("not", "never") or w.endswith("n't") or w.endswith("n\u2019t")


def parse_verdict(raw: str) -> str:
    """Port of verisample::judge::parse_verdict: last non-empty line of the text after the last
    </think> (none when a <think> never closed) must hold verdict words of one kind only."""
    if "</think>" in raw:
        ans = raw.rsplit("</think>", 1)[1]
    elif "<think>" in raw:
        return "UNSURE"
    else:
        ans = raw
    lines = [ln for ln in ans.splitlines() if ln.strip()]
    if not lines:
        return "UNSURE"
    last = lines[-1]
    found = []
    for v in VERDICTS:
        for m in re.finditer(re.escape(v), last):
            b, e = m.start(), m.end()
            if (b > 0 and (last[b - 1].isalnum() or last[b - 1] == "_")) or (
                    e < len(last) and (last[e].isalnum() or last[e] == "_")):
                continue
            found.append("UNSURE" if _negated(last[:b]) else v)
    return found[0] if found and all(f == found[0] for f in found) else "UNSURE"


def pairs():
    rng = random.Random(HELD_OUT_SEED)
    return [judge_pair(rng) for _ in range(N_PAIRS)]


def run(ref, ckpt: str) -> None:
    """ref: make_default_reference.Reference (model, processor, eos ids)."""
    from make_default_reference import meta

    rows, agreed = [], 0
    for reference, candidate, rule in pairs():
        prompt = build_judge_prompt(tt.ORAND_QUESTION, reference, candidate)
        n, gen, text, margins = ref.generate([{"role": "user", "content": prompt}])
        v = parse_verdict(text)
        agreed += v == rule
        rows.append({"question": tt.ORAND_QUESTION, "reference": reference, "candidate": candidate,
                     "rule_verdict": rule, "prompt_ids_len": n, "generated_ids": gen, "text": text, "verdict": v, "logit_margins": margins})
    head = meta(ref, ckpt, {"source": "tiny_vlm_data.judge_pair", "seed": HELD_OUT_SEED, "n": len(rows),
                            "agreed": agreed})
    with open(OUT_PATH, "w") as f:
        f.write(json.dumps({"meta": head}) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"{os.path.relpath(OUT_PATH, REPO)}: judge agrees with the rule on {agreed}/{len(rows)}", flush=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", default=os.path.join(REPO, "assets", "model"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    import torch

    from make_default_reference import Reference

    torch.set_num_threads(a.threads)
    os.makedirs(os.path.dirname(OUT_PATH), exist_ok=True)
    run(Reference(a.ckpt), a.ckpt)


if __name__ == "__main__":
    main(sys.argv[1:])
