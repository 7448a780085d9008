#!/usr/bin/env python3
"""How fast `verisample view` serves the first page of a large output.

Writes a synthetic output folder of `--rows` rows (default 10^6) as `run` writes one: the
`run.json` of a real run of the bundled sample (copied), and `data/` split files with that
run's schema and `huggingface` metadata, row groups of 100 rows, the image bytes uncompressed
and without a dictionary, the rest zstd, a page index — OrandCar_RS_think and _RS_nothink
45 % of the rows each, OrandCar_rejected 10 %, in shards of at most `--rows-per-shard` rows.
Every row has a tiny distinct-looking PNG (one of 256) and its true SHA-256.

Then starts `verisample view OUT --port 0` and times, with curl:
  ready       start of the process → its address printed (the footers read);
  page        `GET /api/rows?page=1&per=25`, the page's first request;
  image       `GET /image/OrandCar_RS_think/0`, the page's first image;
  first page  start of the process → both answered;
and, for scale, a page deep in the output, and a search that matches nothing (a whole
scan of the text columns, never the images).

  python3 scripts/bench_view.py                       # 10^6 rows, in a temporary folder
  python3 scripts/bench_view.py --keep /tmp/view-1m   # keep (and reuse) the output
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
QUESTION = (
    "What is written in the image? Answer this question using the text in the image directly "
    "without any other context. Answer in short without any other content."
)


def png(seed: int) -> bytes:
    """An 8x4 grey PNG whose pixels depend on `seed`."""
    rows = b"".join(b"\x00" + bytes((seed * 7 + x * 13 + y * 29) % 256 for x in range(8)) for y in range(4))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 4, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


IMAGES = [png(i) for i in range(256)]
SHAS = [hashlib.sha256(b).hexdigest() for b in IMAGES]


def batch(schema: pa.Schema, kind: str, start: int, n: int) -> pa.RecordBatch:
    ids = range(start, start + n)
    image = [{"bytes": IMAGES[i % 256], "path": f"img_{i:07d}.png"} for i in ids]
    if kind == "rejected":
        qa = [
            [
                {
                    "question": QUESTION,
                    "answer": str(10000 + i),
                    "wrong_vlm": str(20000 + i),
                    "reason": "wrong_answer",
                    "judge_verdict": "WRONG",
                    "judge_raw": "<think>\nreference and candidate differ\n</think>\n\nWRONG",
                }
            ]
            for i in ids
        ]
    else:
        qa = [
            [
                {
                    "question": QUESTION,
                    "answer": str(10000 + i),
                    "org_answer": str(10000 + i),
                    "vlm_answer": str(10000 + i),
                    **({"think": "digits: " + " ".join(str(10000 + i))} if kind == "think" else {}),
                    "accepted_by": "verifier:alnum:whole",
                    "judge_verdict": None,
                    "judge_raw": None,
                }
            ]
            for i in ids
        ]
    meta = [json.dumps({"position": i, "row_index": i, "source_file": "synthetic.parquet"}) for i in ids]
    sha = [SHAS[i % 256] for i in ids]
    return pa.RecordBatch.from_arrays(
        [pa.array(image, schema.field("image").type), pa.array(qa, schema.field("qa").type), pa.array(meta, pa.string()), pa.array(sha, pa.string())],
        schema=schema,
    )


def write_split(data: str, real: str, split: str, kind: str, rows: int, per_shard: int) -> None:
    """`rows` rows of `kind` as split `split`, with the schema and settings of `real`."""
    schema = pq.read_schema(real)
    leaves = [c.path for c in pq.ParquetFile(real).schema]
    shards = max(1, -(-rows // per_shard))
    done = 0
    for s in range(shards):
        n = min(per_shard, rows - done)
        path = os.path.join(data, f"{split}-{s:05d}-of-{shards:05d}.parquet")
        with pq.ParquetWriter(
            path,
            schema,
            compression={c: ("NONE" if c == "image.bytes" else "ZSTD") for c in leaves},
            use_dictionary=[c for c in leaves if c != "image.bytes"],
            write_statistics=[c for c in leaves if c != "image.bytes"],
            write_page_index=True,
        ) as w:
            for start in range(done, done + n, 10_000):
                w.write_batch(batch(schema, kind, start, min(10_000, done + n - start)), row_group_size=100)
        done += n


def make_output(out: str, rows: int, per_shard: int, binary: str) -> None:
    real = os.path.join(out, "real")
    subprocess.run(
        [binary, "run", "-q", "--device", "cpu", "--progress", "none", "--model", os.path.join(REPO, "assets/model"),
         "--data", os.path.join(REPO, "assets/sample/data"), "--out", real],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    big = os.path.join(out, "big")
    data = os.path.join(big, "data")
    os.makedirs(data)
    shutil.copy(os.path.join(real, "run.json"), os.path.join(big, "run.json"))
    parts = {"RS_think": (rows * 45 // 100, "think"), "RS_nothink": (rows * 45 // 100, "nothink")}
    parts["rejected"] = (rows - 2 * parts["RS_think"][0], "rejected")
    for suffix, (n, kind) in parts.items():
        real_file = [f for f in os.listdir(os.path.join(real, "data")) if f.startswith(f"OrandCar_{suffix}-")][0]
        write_split(data, os.path.join(real, "data", real_file), f"OrandCar_{suffix}", kind, n, per_shard)


def curl(url: str) -> tuple[float, int, int]:
    """(seconds, HTTP status, bytes) of one GET."""
    r = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{time_total} %{http_code} %{size_download}", url],
        check=True, capture_output=True, text=True,
    )
    t, code, size = r.stdout.split()
    return float(t), int(code), int(size)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rows-per-shard", type=int, default=250_000)
    ap.add_argument("--bin", default=os.path.join(REPO, "target/release/verisample"))
    ap.add_argument("--keep", help="write the output here (reused when it is there)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    a = ap.parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="bench-view-")
    big = os.path.join(root, "big")
    if not os.path.isdir(big):
        os.makedirs(root, exist_ok=True)
        t = time.monotonic()
        make_output(root, a.rows, a.rows_per_shard, a.bin)
        print(f"wrote {a.rows:,} rows to {big} in {time.monotonic() - t:.1f} s", file=sys.stderr)
    size = sum(os.path.getsize(os.path.join(big, "data", f)) for f in os.listdir(os.path.join(big, "data")))
    figures: dict[str, object] = {"rows": a.rows, "data_bytes": size, "files": len(os.listdir(os.path.join(big, "data")))}
    start = time.monotonic()
    view = subprocess.Popen([a.bin, "view", big, "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = view.stdout.readline()
        figures["ready_s"] = round(time.monotonic() - start, 4)
        url = line.split()[1]
        page = curl(url + "api/rows?page=1&per=25")
        image = curl(url + "image/OrandCar_RS_think/0")
        figures["first_page_s"] = round(time.monotonic() - start, 4)
        figures["page_curl_s"], figures["image_curl_s"] = page[0], image[0]
        assert page[1] == 200 and image[1] == 200, (page, image)
        deep = curl(url + f"api/rows?page={a.rows // 25 - 2}&per=25")
        figures["deep_page_curl_s"] = deep[0]
        scan = curl(url + "api/rows?q=no-such-text&per=25")
        figures["full_scan_curl_s"] = scan[0]
    finally:
        view.kill()
        view.wait()
    if not a.keep:
        shutil.rmtree(root)
    if a.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k:>18}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
