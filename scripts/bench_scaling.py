#!/usr/bin/env python3
"""Cost against the number of rows: `verisample run` with the bundled default model on
synthetic flat datasets of N distinct rows (the ORAND-CAR-A train images in turn, row i with
one pixel changed so that no row is a duplicate of another, saved as PNG; OrandCar's task
question and the image's label), then a rerun with nothing left. Measured with
`/usr/bin/time -v`: wall seconds, peak RSS; rows/s of the first run.

    python scripts/bench_scaling.py --rows 2000 20000 --json
    python scripts/bench_scaling.py --tiny --judge off --rows 2000 200000 \\
        --resume-at 150000 --shards 4 --inspect 1000000 --json

`--tiny`: rows of 16×16 PNGs instead (row i: one pixel set from i, answer `str(i)`), so that
the per-row state, not the vision tower, is what grows. `--resume-at K`: the largest run is
run again into another folder, killed (SIGKILL) once its journal holds about K rows' answers,
resumed, and its outputs compared byte for byte with the whole run's. `--shards S`: the
largest run as S shards and `merge`, compared alike. `--inspect N`: peak RSS of `verisample
inspect` over an N-row tiny input.

The datasets are built once under --cache (default /tmp/verisample-scaling).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

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


def build_tiny(rows: int, folder: str) -> None:
    """`rows` distinct rows of 16×16 PNGs, written one file of ROWS_PER_FILE rows at a time."""
    if os.path.exists(os.path.join(folder, "done")):
        return
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    base = Image.new("RGB", (16, 16), (200, 200, 200))
    for start in range(0, rows, ROWS_PER_FILE):
        cols = {"image": [], "question": [], "answer": []}
        for i in range(start, min(rows, start + ROWS_PER_FILE)):
            img = base.copy()
            img.putpixel((i % 16, (i // 16) % 16), (i % 256, (i // 256) % 256, (i // 65536) % 256))
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            cols["image"].append({"bytes": buf.getvalue(), "path": f"r{i}.png"})
            cols["question"].append(QUESTION)
            cols["answer"].append(str(i))
        pq.write_table(pa.table(cols), os.path.join(folder, f"train-{start // ROWS_PER_FILE:05d}.parquet"))
    open(os.path.join(folder, "done"), "w").close()


# What a run writes that must not depend on how it got there (run.json and the chart hold
# timings; the journal's record order depends on the kill and the shards).
COMPARED = ("README.md", "errors.jsonl", "cleaning.jsonl", "generations.jsonl")


def differing(a: str, b: str) -> list[str]:
    """The compared files (and every file under data/ and examples/) that differ or are missing."""
    names = set(COMPARED)
    for top in ("data", "examples"):
        for root in (a, b):
            d = os.path.join(root, top)
            if os.path.isdir(d):
                names |= {os.path.join(top, f) for f in os.listdir(d)}
    out = []
    for n in sorted(names):
        pa_, pb = os.path.join(a, n), os.path.join(b, n)
        if not (os.path.exists(pa_) and os.path.exists(pb)):
            out.append(n)
            continue
        with open(pa_, "rb") as fa, open(pb, "rb") as fb:
            if fa.read() != fb.read():
                out.append(n)
    return out


def killed_at(cmd: list[str], env: dict, journal: str, size: int) -> float:
    """Start `cmd`, SIGKILL it once `journal` reaches `size` bytes; returns the seconds run."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while p.poll() is None:
        if os.path.exists(journal) and os.path.getsize(journal) >= size:
            p.send_signal(signal.SIGKILL)
            p.wait()
            return time.monotonic() - start
        time.sleep(0.2)
    sys.exit(f"{' '.join(cmd)} ended ({p.returncode}) before its journal reached {size} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "verisample"))
    ap.add_argument("--rows", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--cache", default="/tmp/verisample-scaling")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="rows of 16x16 PNGs (see above)")
    ap.add_argument("--judge", choices=["on", "off"], default="on")
    ap.add_argument("--inspect", type=int, nargs="*", default=[], help="rows of tiny inputs to inspect")
    ap.add_argument("--resume-at", type=int, help="kill the largest run at about this many rows, resume")
    ap.add_argument("--shards", type=int, help="run the largest as this many shards and merge")
    ap.add_argument("--keep", action="store_true", help="keep the output folders")
    args = ap.parse_args()
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    results = {}
    kind = "tiny-rows" if args.tiny else "rows"
    for rows in args.inspect:
        data = os.path.join(args.cache, f"tiny-rows-{rows}")
        build_tiny(rows, data)
        wall, rss = time_v([args.bin, "inspect", data], env)
        results.setdefault("inspect", {})[rows] = {"wall_s": round(wall, 2), "peak_rss_kb": rss}
    outs = []
    for rows in args.rows:
        data = os.path.join(args.cache, f"{kind}-{rows}")
        (build_tiny if args.tiny else build)(rows, data)
        out = os.path.join(args.cache, f"out-{kind}-{rows}")
        shutil.rmtree(out, ignore_errors=True)
        outs.append(out)
        base = [args.bin, "run", "-q", "--family", "OrandCar", "--data", data, "--progress", "none"]
        if args.judge == "off":
            base += ["--judge", "off"]
        cmd = base + ["--out", out]
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
    rows = args.rows[-1]
    if args.resume_at:
        # The journal grows about evenly with the rows answered (its header first).
        whole = os.path.join(outs[-1], "journal.bin")
        size = os.path.getsize(whole) * args.resume_at // rows
        out = os.path.join(args.cache, f"out-{kind}-{rows}-resumed")
        shutil.rmtree(out, ignore_errors=True)
        outs.append(out)
        killed = killed_at(base + ["--out", out], env, os.path.join(out, "journal.bin"), size)
        wall, rss = time_v(base + ["--out", out], env)
        diff = differing(outs[len(args.rows) - 1], out)
        results["resume"] = {
            "killed_after_s": round(killed, 2),
            "resume_wall_s": round(wall, 2),
            "resume_peak_rss_kb": rss,
            "identical": not diff,
            "differing": diff,
        }
    if args.shards:
        shard_outs, walls, rsss = [], [], []
        for i in range(args.shards):
            out = os.path.join(args.cache, f"out-{kind}-{rows}-shard{i}")
            shutil.rmtree(out, ignore_errors=True)
            shard_outs.append(out)
            wall, rss = time_v(base + ["--shard", f"{i}/{args.shards}", "--out", out], env)
            walls.append(wall)
            rsss.append(rss)
        merged = os.path.join(args.cache, f"out-{kind}-{rows}-merged")
        shutil.rmtree(merged, ignore_errors=True)
        wall, rss = time_v([args.bin, "merge", "-q", "--progress", "none", "--out", merged, *shard_outs], env)
        diff = differing(outs[len(args.rows) - 1], merged)
        outs += shard_outs + [merged]
        results["shards"] = {
            "shards": args.shards,
            "shard_wall_s": [round(w, 2) for w in walls],
            "shard_peak_rss_kb": rsss,
            "merge_wall_s": round(wall, 2),
            "merge_peak_rss_kb": rss,
            "identical": not diff,
            "differing": diff,
        }
    if not args.keep:
        for out in outs:
            shutil.rmtree(out, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for rows, r in results.items():
            print(rows, r)


if __name__ == "__main__":
    main()
