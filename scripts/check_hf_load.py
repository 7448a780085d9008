#!/usr/bin/env python3
"""Load verisample's parquet output with the real Hugging Face `datasets` library.

Writes (1) the three OrandCar output splits with `examples/write_sample_splits.rs` and
(2) an input dataset with `verisample prepare`, then checks with `datasets` and `pyarrow`:
- `image` decodes to a PIL image, and undecoded its bytes equal the original bytes;
- `qa` is a list of dicts equal to what was written (the nothink split has no `think`);
- the parquet files carry the `huggingface` feature metadata, and `datasets` takes the
  features from it (Image, list of struct);
- the dataset card's configs and split sizes are what `datasets` reads from the folder;
- (3) a labels JSONL through `verisample prepare` and `verisample run` (the bundled model):
  the input's own columns the splits carry load with their types from the card
  (`width` an int64 column of Python ints, `ratio` float64), each row its input row's values.

Run from the repository root: `python3 scripts/check_hf_load.py`. Needs cargo, datasets,
pyarrow, pillow. Exits non-zero on the first failed check. No network.
"""
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

import datasets  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from PIL import Image as PILImage  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def cargo(*args):
    cmd = ["cargo", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=REPO, check=True)


def check(cond, msg):
    if not cond:
        print(f"FAIL: {msg}", file=sys.stderr)
        sys.exit(1)


def check_parquet_metadata(files):
    for f in files:
        pf = pq.ParquetFile(f)
        kv = pf.metadata.metadata or {}
        check(b"huggingface" in kv, f"{f}: no huggingface key-value metadata")
        schema_meta = pf.schema_arrow.metadata or {}
        check(b"huggingface" in schema_meta, f"{f}: pyarrow schema has no huggingface metadata")
        feats = json.loads(kv[b"huggingface"])["info"]["features"]
        check(feats["image"] == {"_type": "Image"}, f"{f}: image feature {feats['image']}")
        check(isinstance(feats["qa"], list), f"{f}: qa feature is not in list form")
        for i in range(pf.metadata.num_row_groups):
            check(pf.metadata.row_group(i).num_rows <= 100, f"{f}: row group {i} has > 100 rows")
        img_type = str(pf.schema_arrow.field("image").type)
        check(img_type == "struct<bytes: binary, path: string>", f"{f}: image type {img_type}")


def check_output_splits(out, cache):
    expected = json.loads((out / "expected.json").read_text())
    for split, rows in expected.items():
        files = sorted(str(p) for p in (out / "data").glob(f"{split}-*.parquet"))
        check(files, f"no files for {split}")
        check_parquet_metadata(files)
        ds = datasets.load_dataset("parquet", data_files={split: files}, split=split, cache_dir=cache)
        check(isinstance(ds.features["image"], datasets.Image), f"{split}: image feature {ds.features['image']}")
        qa_feat = ds.features["qa"]
        inner = getattr(qa_feat, "feature", None) or (qa_feat[0] if isinstance(qa_feat, list) else None)
        check(isinstance(inner, dict), f"{split}: qa feature is not a list of struct: {qa_feat}")
        check(("think" in inner) == split.endswith("_RS_think"), f"{split}: think field presence {list(inner)}")
        check(len(ds) == len(rows), f"{split}: {len(ds)} rows, expected {len(rows)}")
        raw = ds.cast_column("image", datasets.Image(decode=False))
        for i, (got, want) in enumerate(zip(ds, rows)):
            img = got["image"]
            check(isinstance(img, PILImage.Image), f"{split}[{i}]: image is {type(img)}")
            orig = bytes.fromhex(want["image_hex"])
            check(img.size == PILImage.open(io.BytesIO(orig)).size, f"{split}[{i}]: size {img.size}")
            check(isinstance(got["qa"], list) and all(isinstance(q, dict) for q in got["qa"]), f"{split}[{i}]: qa {got['qa']!r}")
            check(got["qa"] == want["qa"], f"{split}[{i}]: qa {got['qa']!r} != {want['qa']!r}")
            check(got["clean_meta"] == want["clean_meta"], f"{split}[{i}]: clean_meta")
            check(got["image_sha256"] == hashlib.sha256(orig).hexdigest(), f"{split}[{i}]: image_sha256")
            r = raw[i]["image"]
            check(r["bytes"] == orig, f"{split}[{i}]: image bytes differ from the original")
            check(r["path"] == want["path"], f"{split}[{i}]: path {r['path']!r}")
        print(f"ok: {split}: {len(ds)} rows load with datasets {datasets.__version__}")
    # The card: each kind is a config; datasets reads its splits and sizes from README.md.
    for config, split in [("RS_think", "OrandCar_RS_think"), ("RS_nothink", "OrandCar_RS_nothink"), ("rejected", "OrandCar_rejected")]:
        builder = datasets.load_dataset_builder(str(out), config, cache_dir=cache)
        info_splits = builder.info.splits or {}
        check(split in info_splits, f"card config {config}: splits {list(info_splits)}")
        check(info_splits[split].num_examples == len(expected[split]), f"card {split}: num_examples {info_splits[split].num_examples}")
        check(isinstance(builder.info.features["image"], datasets.Image), f"card {config}: features {builder.info.features}")
        dd = datasets.load_dataset(str(out), config, cache_dir=cache)
        check(list(dd) == [split] and len(dd[split]) == len(expected[split]), f"card config {config}: loaded {dd}")
    print("ok: dataset card configs load")


def check_prepared_input(tmp, cache):
    src = tmp / "src"
    (src / "imgs").mkdir(parents=True)
    originals = {}
    lines = []
    for i in range(5):
        buf = io.BytesIO()
        PILImage.new("RGB", (10 + i, 6), (i * 40, 100, 200)).save(buf, format="PNG")
        name = f"imgs/{i}.png"
        (src / name).write_bytes(buf.getvalue())
        originals[f"{i}.png"] = buf.getvalue()
        lines.append(json.dumps({"image": name, "question": f"Q{i}?", "answer": str(i)}))
    (src / "qa.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp / "prepared"
    cargo("run", "--release", "--quiet", "--", "-q", "prepare", "--jsonl", str(src / "qa.jsonl"), "--family", "Demo", "--out", str(out))
    files = sorted(str(p) for p in (out / "data").glob("*.parquet"))
    check_parquet_metadata(files)
    ds = datasets.load_dataset("parquet", data_files={"train": files}, split="train", cache_dir=cache)
    raw = ds.cast_column("image", datasets.Image(decode=False))
    check(len(ds) == 5, f"prepared: {len(ds)} rows")
    for i in range(len(ds)):
        check(isinstance(ds[i]["image"], PILImage.Image), "prepared: image does not decode")
        r = raw[i]["image"]
        check(r["bytes"] == originals[r["path"]], f"prepared: bytes of {r['path']} differ")
        check(ds[i]["qa"][0]["source"] == hashlib.sha256(r["bytes"]).hexdigest(), "prepared: qa source is not the sha")
    print("ok: prepared input loads with datasets")


def check_carried_columns(tmp, cache):
    src = tmp / "labels-src"
    (src / "val").mkdir(parents=True)
    widths = {}
    lines = []
    for i in range(4):
        name = f"val/a_car_{i:06}.png"
        buf = io.BytesIO()
        PILImage.new("RGB", (30 + i, 12), (i * 50, 90, 160)).save(buf, format="PNG")
        (src / name).write_bytes(buf.getvalue())
        widths[name] = 30 + i
        lines.append(json.dumps({"file": name, "split": "val", "label": str(100 + i),
                                 "width": 30 + i, "height": 12, "ratio": 2.5 + i}))
    (src / "labels.jsonl").write_text("\n".join(lines) + "\n")
    prepared = tmp / "labels-prepared"
    cargo("run", "--release", "--quiet", "--", "-q", "prepare", "--labels", str(src / "labels.jsonl"),
          "--family", "OrandCar", "--out", str(prepared))
    out = tmp / "carried"
    cargo("run", "--release", "--quiet", "--", "-q", "run", "--data", str(prepared), "--out", str(out))
    configs = datasets.get_dataset_config_names(str(out))
    check(configs, f"carried: no configs in {out}")
    rows = 0
    for config in configs:
        dd = datasets.load_dataset(str(out), config, cache_dir=cache)
        for split, ds in dd.items():
            feats = ds.features
            check(feats["width"] == datasets.Value("int64"), f"{config}/{split}: width feature {feats['width']}")
            check(feats["ratio"] == datasets.Value("float64"), f"{config}/{split}: ratio feature {feats['ratio']}")
            check(feats["file"] == datasets.Value("string"), f"{config}/{split}: file feature {feats['file']}")
            for row in ds:
                check(type(row["width"]) is int, f"{config}/{split}: width {row['width']!r} is not an int")
                check(row["width"] == widths[row["file"]], f"{config}/{split}: {row['file']} width {row['width']}")
                rows += 1
    check(rows >= 4, f"carried: {rows} split rows for 4 input rows")
    print(f"ok: carried input columns load with their types ({rows} rows, configs {configs})")


def main():
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        cache = str(tmp / "hf-cache")
        out = tmp / "out"
        cargo("run", "--release", "--quiet", "--example", "write_sample_splits", "--", str(out))
        check_output_splits(out, cache)
        check_prepared_input(tmp, cache)
        check_carried_columns(tmp, cache)
    print("check_hf_load: all checks passed")


if __name__ == "__main__":
    main()
