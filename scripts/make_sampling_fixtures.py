#!/usr/bin/env python3
"""Fixture for the sampler's warpers: random f32 logits and the token sets transformers'
sampling logits warpers keep (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
MinPLogitsWarper, in the order `generate` applies them), written to
tests/fixtures/sampling/warpers.json. `src/engine/sampling/tests.rs` checks `warp` against it.

    python scripts/make_sampling_fixtures.py
"""

import json
import os

import torch
import transformers
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "sampling", "warpers.json")


def main() -> None:
    g = torch.Generator().manual_seed(0)
    cases = []
    settings = [
        dict(temperature=0.7),
        dict(temperature=0.7, top_k=20),
        dict(temperature=0.7, top_p=0.8),
        dict(temperature=0.7, top_k=20, top_p=0.8),
        dict(temperature=1.0, min_p=0.1),
        dict(temperature=0.6, top_k=50, top_p=0.95, min_p=0.05),
        dict(temperature=1.3, top_p=0.5),
        dict(temperature=0.2, top_k=3),
        dict(temperature=1.0, top_k=1),
        dict(temperature=0.9, top_p=0.99, min_p=0.2),
    ]
    for i in range(40):
        s = settings[i % len(settings)]
        vocab = [64, 151, 512, 1000][i % 4]
        scale = [1.0, 3.0, 8.0][i % 3]
        logits = (torch.randn(1, vocab, generator=g) * scale).to(torch.float32)
        scores = logits.clone()
        warpers = [TemperatureLogitsWarper(s["temperature"])]
        if "top_k" in s:
            warpers.append(TopKLogitsWarper(s["top_k"]))
        if "top_p" in s:
            warpers.append(TopPLogitsWarper(s["top_p"]))
        if "min_p" in s:
            warpers.append(MinPLogitsWarper(s["min_p"]))
        ids = torch.zeros(1, 1, dtype=torch.long)
        for w in warpers:
            scores = w(ids, scores)
        kept = torch.isfinite(scores[0]).nonzero().flatten().tolist()
        cases.append({"settings": s, "logits": logits[0].tolist(), "kept": kept})
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "script": "scripts/make_sampling_fixtures.py"}
    with open(OUT, "w") as f:
        json.dump({"meta": meta, "cases": cases}, f)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
