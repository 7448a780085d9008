#!/usr/bin/env python3
"""Write small visual-QA datasets in the layouts found on the Hub, with the real `datasets`
library (its `Image()` feature and `Dataset.to_parquet`), from ORAND-CAR-A images, for
tests/input_layouts.rs.

Usage (no network; reads only the images and labels.jsonl named):

    python3 scripts/make_layouts_datasets.py ORAND_DIR OUT_DIR [N]

ORAND_DIR holds labels.jsonl (`file`, `label`, `split`) and the images; the first N (default
6) rows of split `val` are used, in labels.jsonl order. Each layout is written to
OUT_DIR/<layout>/data/val-00000-of-00001.parquet:

  qa        image, qa: [{question, answer}]      (contract §2, our layout)
  flat      image, question, answer               (DocVQA-style)
  chartqa   img, query, label, human_or_machine   (ChartQA-style)
  multi     image, question, answers: [string]    (TextVQA-style: a decoy "0" then the label,
                                                   the first row with the label alone)
  paths     image, question, answer with the image given by absolute path and null bytes,
            as `to_parquet` writes images that were files (read with --images-root ORAND_DIR)

Every image column but `paths` embeds the file's bytes unchanged with `path` = its file name.
The question is OrandCar's fixed question (contract §4).
"""

import json
import os
import sys

from datasets import Dataset, Features, Image, List, Value

QUESTION = (
    "What is written in the image? Answer this question using the text in the image directly "
    "without any other context. Answer in short without any other content."
)


def samples(orand, n):
    out = []
    with open(os.path.join(orand, "labels.jsonl"), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("split") == "val":
                out.append((os.path.join(orand, row["file"]), row["label"]))
            if len(out) == n:
                break
    return out


def embedded(path):
    with open(path, "rb") as f:
        return {"bytes": f.read(), "path": os.path.basename(path)}


def write(out, layout, columns, features):
    path = os.path.join(out, layout, "data", "val-00000-of-00001.parquet")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Dataset.from_dict(columns, features=Features(features)).to_parquet(path)


def main():
    orand, out = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    rows = samples(orand, n)
    images = [embedded(p) for p, _ in rows]
    labels = [label for _, label in rows]
    questions = [QUESTION] * len(rows)
    string = Value("string")
    write(
        out,
        "qa",
        {"image": images, "qa": [[{"question": QUESTION, "answer": a}] for a in labels]},
        {"image": Image(), "qa": List({"question": string, "answer": string})},
    )
    write(
        out,
        "flat",
        {"image": images, "question": questions, "answer": labels},
        {"image": Image(), "question": string, "answer": string},
    )
    write(
        out,
        "chartqa",
        {
            "img": images,
            "query": questions,
            "label": labels,
            "human_or_machine": ["human"] * len(rows),
        },
        {"img": Image(), "query": string, "label": string, "human_or_machine": string},
    )
    write(
        out,
        "multi",
        {
            "image": images,
            "question": questions,
            "answers": [[a] if i == 0 else ["0", a] for i, a in enumerate(labels)],
        },
        {"image": Image(), "question": string, "answers": List(string)},
    )
    write(
        out,
        "paths",
        {
            "image": [{"bytes": None, "path": os.path.abspath(p)} for p, _ in rows],
            "question": questions,
            "answer": labels,
        },
        {"image": Image(), "question": string, "answer": string},
    )


if __name__ == "__main__":
    main()
