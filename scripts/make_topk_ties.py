#!/usr/bin/env python3
"""Write ``models/tests/fixtures/topk_ties.json``: the order in which ``torch.topk`` (CPU,
largest, sorted) returns the indices of tied router probabilities.

Each case is ``{"values": [...], "k": k, "indices": torch.topk(values, k).indices}`` with
values drawn from a few levels (quarters), so most cases hold ties across the top-k boundary
and inside it. Expert counts 4 to 128 and ``k`` up to 10 with ``k · 64 > n`` (the
``nth_element`` branch ATen takes for every published Qwen MoE: 128 experts top-8, 256 top-8).
The MoE router must pick and order experts exactly as transformers does
(``models/src/moe.rs::topk_torch_order``, test ``models/tests/moe_router.rs``).

Usage:  python scripts/make_topk_ties.py
"""

from __future__ import annotations

import json
import os
import random
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    rng = random.Random(32)
    cases = []
    while len(cases) < 160:
        n = rng.choice([4, 5, 8, 16, 60, 128])
        k = rng.randint(1, min(n, 10))
        if k * 64 <= n:
            continue
        levels = rng.randint(1, 4)
        values = [rng.randint(0, levels) / 4 for _ in range(n)]
        idx = torch.topk(torch.tensor(values, dtype=torch.float32), k).indices.tolist()
        cases.append({"values": values, "k": k, "indices": idx})
    meta = {"torch": torch.__version__, "cases": cases}
    path = os.path.join(REPO, "models", "tests", "fixtures", "topk_ties.json")
    with open(path, "w") as f:
        json.dump(meta, f, separators=(",", ":"))
        f.write("\n")
    print(path, len(cases), "cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
