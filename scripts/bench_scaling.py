#!/usr/bin/env python3
"""Cost against the number of rows: `verisample run` with the bundled default model on
synthetic flat datasets of N distinct rows (the ORAND-CAR-A train images in turn, row i with
one pixel changed so that no row is a duplicate of another, saved as PNG; OrandCar's task
question and the image's label), then a rerun with nothing left. Measured with
`/usr/bin/time -v`: wall seconds, peak RSS; rows/s of the first run.

    python scripts/bench_scaling.py --rows 2000 20000 --json

The datasets are built once under --cache (default /tmp/verisample-scaling).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_vs_transformers import QUESTION, shared_data, time_v  # noqa: E402
ROWS_PER_FILE = 10_000


def build(rows: int, folder: str) -> None:
    """`rows` distinct rows in parquet files of ROWS_PER_FILE rows under `folder`."""
    if os.path.exists(os.path.join(folder, "done")):
        return
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    orand = os.path.join(shared_data(), "orand-car-a")
    labels = [json.loads(l) for l in open(os.path.join(orand, "labels.jsonl"))]
    labels = [l for l in labels if l["split"] == "train"]
    images = [Image.open(os.path.join(orand, l["file"])).convert("RGB") for l in labels]
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for start in range(0, rows, ROWS_PER_FILE):
        cols = {"image": [], "question": [], "answer": []}
        for i in range(start, min(rows, start + ROWS_PER_FILE)):
            k = i % len(images)
            img = images[k].copy()
            # The (i // len(images))-th pixel of the image, in raster order, changed: distinct
            # bytes for every row (no image has fewer pixels than the copies asked for here).
            n = i // len(images)
            w, h = img.size
            x, y = n % w, (n // w) % h
            r, g, b = img.getpixel((x, y))
            img.putpixel((x, y), ((r + 128) % 256, g, b))
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            cols["image"].append({"bytes": buf.getvalue(), "path": f"row{i}.png"})
            cols["question"].append(QUESTION)
            cols["answer"].append(labels[k]["label"])
        table = pa.table(cols)
        pq.write_table(table, os.path.join(folder, f"train-{start // ROWS_PER_FILE:05d}.parquet"))
    open(os.path.join(folder, "done"), "w").close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "verisample"))
    ap.add_argument("--rows", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--cache", default="/tmp/verisample-scaling")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    results = {}
    for rows in args.rows:
        data = os.path.join(args.cache, f"rows-{rows}")
        build(rows, data)
        out = os.path.join(args.cache, f"out-{rows}")
        shutil.rmtree(out, ignore_errors=True)
        cmd = [args.bin, "run", "-q", "--family", "OrandCar", "--data", data, "--out", out, "--progress", "none"]
        wall, rss = time_v(cmd, env)
        again, again_rss = time_v(cmd, env)
        with open(os.path.join(out, "run.json")) as f:
            stats = json.load(f)["stats"]
        results[rows] = {
            "wall_s": round(wall, 2),
            "rows_per_s": round(rows / wall, 2),
            "peak_rss_kb": rss,
            "accepted": stats["accepted"],
            "rerun_wall_s": round(again, 2),
            "rerun_peak_rss_kb": again_rss,
        }
        shutil.rmtree(out, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for rows, r in results.items():
            print(rows, r)


if __name__ == "__main__":
    main()
