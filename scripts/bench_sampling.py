#!/usr/bin/env python3
"""Throughput of rejection sampling against greedy decoding, one machine, one run after the
other: `verisample run` on the ORAND-CAR-A train images (1,080 real cheque amounts, prepared
once into parquet) with the bundled default model, three ways:

  greedy   K = 1 at temperature 0 (the default);
  t0.7     K = 1 at temperature 0.7 (one sample: the sampler's own cost);
  k4       K = 4 at temperature 0.7 (four samples that share each prompt's prefill).

Reported from each run's `run.json` and `/usr/bin/time -v`: wall seconds, questions/s,
generations, generated tokens/s, peak RSS, pass@1 and pass@K. "4 × greedy" is what four
separate greedy-cost runs would take.

    python scripts/bench_sampling.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_vs_transformers import shared_data, time_v  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "verisample"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    orand = os.path.join(shared_data(), "orand-car-a")
    work = tempfile.mkdtemp(prefix="verisample-sampling-")
    data = os.path.join(work, "orand-train")
    subprocess.run([args.bin, "prepare", "-q", "--labels", os.path.join(orand, "labels.jsonl"), "--images", orand,
                    "--family", "OrandCar", "--split", "train", "--out", data], check=True)
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    runs = {
        "greedy": [],
        "t0.7": ["--temperature", "0.7"],
        "k4": ["--samples", "4", "--temperature", "0.7"],
    }
    results = {}
    for name, extra in runs.items():
        out = os.path.join(work, name)
        wall, rss = time_v([args.bin, "run", "-q", "--data", data, "--out", out, "--progress", "none", *extra], env)
        with open(os.path.join(out, "run.json")) as f:
            stats = json.load(f)["stats"]
        t = stats["throughput"]
        sampling = stats.get("sampling") or {}
        results[name] = {
            "wall_s": round(wall, 2),
            "questions": stats["input_items"],
            "questions_per_s": round(stats["input_items"] / wall, 2),
            "generations": t["generated_items"],
            "tokens_per_s": round(t["tokens_per_s"], 1),
            "peak_rss_kb": rss,
            "accepted_questions": stats["accepted"],
            "pass_at_1": sampling.get("pass_at_1"),
            "pass_at_k": sampling.get("pass_at_k"),
            "accepted_samples": sampling.get("accepted_samples"),
        }
    results["k4_vs_4x_greedy"] = round(results["k4"]["wall_s"] / (4 * results["greedy"]["wall_s"]), 3)
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, r in results.items():
            print(name, r)


if __name__ == "__main__":
    main()
