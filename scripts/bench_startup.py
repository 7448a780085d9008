#!/usr/bin/env python3
"""Start-up cost of `verisample run` on a real-width bf16 checkpoint: the first run, then
reruns over its finished output with nothing left to generate, measured with
`/usr/bin/time -v` (wall seconds, peak RSS) and the time to the first line on stderr.

The checkpoint is random with Qwen2-VL-2B's published widths and depth (text 1536 wide, 28
layers; vision 1280 wide, 32 blocks; tied embeddings), bf16, sharded with an index, built by
`scripts/check_real_widths.py`'s `build` (about 4.4 GB; kept with `--keep`). The input is the
first `--rows` rows of the bundled sample.

Reruns measured, all over the same output:
  warm      the hash cache knows every file (the normal rerun);
  cold      the hash cache is empty (every file hashed once more, then cached);
  verify    `--verify-weights` (every file hashed in full, whatever the cache says).
Every rerun must leave the splits, card and JSONL files byte-identical to the first run's.

  python scripts/bench_startup.py --keep /tmp/startup-2b --json
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def build_checkpoint(path: str) -> None:
    """Qwen2-VL-2B widths at full depth (28 text layers, 32 vision blocks), bf16."""
    if os.path.exists(os.path.join(path, "model.safetensors.index.json")):
        return
    sys.path.insert(0, HERE)
    import check_real_widths

    os.makedirs(path, exist_ok=True)
    check_real_widths.build("2b", path, text_layers=28, vision_depth=32)


def make_input(rows: int, out_dir: str) -> str:
    import pyarrow.parquet as pq

    src = sorted(glob.glob(os.path.join(REPO, "assets/sample/data/*.parquet")))[0]
    table = pq.read_table(src).slice(0, rows)
    os.makedirs(out_dir, exist_ok=True)
    pq.write_table(table, os.path.join(out_dir, "train-00000-of-00001.parquet"))
    return out_dir


def output_hashes(out: str) -> dict[str, str]:
    """sha256 of every output file but the two that hold timings."""
    hashes = {}
    for root, _, files in os.walk(out):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), out)
            if rel in ("run.json", "chart.svg") or rel.startswith(".verisample"):
                continue
            with open(os.path.join(root, f), "rb") as fh:
                hashes[rel] = hashlib.sha256(fh.read()).hexdigest()
    return hashes


def timed_run(cmd: list[str], env: dict[str, str]) -> dict:
    """Run under /usr/bin/time -v; wall seconds, peak RSS (kB), seconds to the first stderr line."""
    start = time.monotonic()
    proc = subprocess.Popen(["/usr/bin/time", "-v", *cmd], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first_line = None
    err_lines = []
    for line in proc.stderr:
        if first_line is None:
            first_line = time.monotonic() - start
        err_lines.append(line)
    proc.wait()
    wall = time.monotonic() - start
    err = "".join(err_lines)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
    return {
        "wall_s": round(wall, 3),
        "peak_rss_kb": rss,
        "first_line_s": round(first_line, 3) if first_line is not None else None,
        "loaded_model": "load the model" in err,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "verisample"))
    ap.add_argument("--keep", help="build the checkpoint in this folder and keep it (default: a temporary one)")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="verisample-startup-")
    ckpt = args.keep or os.path.join(work, "ckpt")
    build_checkpoint(ckpt)
    weights = sum(os.path.getsize(p) for p in glob.glob(os.path.join(ckpt, "*.safetensors")))
    data = make_input(args.rows, os.path.join(work, "data"))
    out = os.path.join(work, "out")
    cache = os.path.join(work, "cache")
    env = dict(os.environ, VERISAMPLE_CACHE_DIR=cache, RAYON_NUM_THREADS=str(args.threads))
    # Info-level log lines on stderr (not a terminal): the first one is the start's first sign.
    base = [args.bin, "run", "--model", ckpt, "--data", data, "--out", out, "--max-new-tokens", "4",
            "--judge", "off", "--progress", "none"]
    results = {"checkpoint_bytes": weights, "rows": args.rows}
    results["first_run"] = timed_run(base, env)
    want = output_hashes(out)
    for name, extra, clear_cache in [("warm", [], False), ("cold", [], True), ("verify", ["--verify-weights"], False)]:
        if clear_cache:
            shutil.rmtree(cache, ignore_errors=True)
        r = timed_run(base + extra, env)
        r["identical_outputs"] = output_hashes(out) == want
        results[name] = r
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"checkpoint {weights / 1e9:.2f} GB, {args.rows} rows")
    for name in ("first_run", "warm", "cold", "verify"):
        r = results[name]
        print(f"{name:>9}: {r['wall_s']:7.2f} s  peak RSS {r['peak_rss_kb'] / 1024:8.1f} MiB  first line "
              f"{r['first_line_s']} s  model loaded: {r['loaded_model']}  identical: {r.get('identical_outputs', '-')}")


if __name__ == "__main__":
    main()
