#!/usr/bin/env python3
"""Procedural handwriting-like digit strings, and the bundled sample dataset.

The renderer draws each digit as a jittered polyline skeleton (no font, no crop of any
real image), with random slant, scale, stroke thickness, ink/paper tone, blur and noise,
and optional thousands separators (``.``, ``,``, space). ``train_tiny_vlm.py`` imports
``render_amount`` so the demo model also learns this style.

CLI: ``python scripts/make_sample.py [--out assets/sample/data/train-00000-of-00001.parquet]
[--count 48] [--seed 7]`` writes the contract §2 input layout: columns ``image``
struct<bytes: binary, path: string>, ``qa`` list<struct<question, answer, source>> (source =
hex SHA-256 of the image bytes), ``image_sha256`` string, ``family`` = ``OrandCar``; plain
(non-large) Arrow types and the ``huggingface`` schema metadata (datasets ``Features``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import random
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

# Unit-box skeletons (x right, y down, both in [0, 1]); each digit is a list of strokes.
def _ellipse(cx: float, cy: float, rx: float, ry: float, start: float = 0.0, sweep: float = 360.0, n: int = 14):
    pts = []
    for i in range(n + 1):
        a = math.radians(start + sweep * i / n)
        pts.append((cx + rx * math.cos(a), cy + ry * math.sin(a)))
    return pts


SKELETONS: dict[str, list[list[tuple[float, float]]]] = {
    "0": [_ellipse(0.5, 0.5, 0.42, 0.5, -90, 370)],
    "1": [[(0.25, 0.22), (0.58, 0.0), (0.55, 1.0)]],
    "2": [[(0.1, 0.25), (0.3, 0.03), (0.68, 0.0), (0.9, 0.22), (0.82, 0.45), (0.1, 1.0), (0.95, 0.98)]],
    "3": [[(0.1, 0.1), (0.5, 0.0), (0.85, 0.15), (0.82, 0.36), (0.42, 0.5), (0.9, 0.64), (0.88, 0.88),
           (0.5, 1.0), (0.08, 0.88)]],
    "4": [[(0.72, 1.0), (0.7, 0.0), (0.05, 0.68), (0.97, 0.68)]],
    "5": [[(0.88, 0.0), (0.22, 0.02), (0.15, 0.45), (0.55, 0.36), (0.9, 0.58), (0.86, 0.88), (0.5, 1.0),
           (0.1, 0.88)]],
    "6": [[(0.82, 0.04), (0.45, 0.05), (0.15, 0.45), (0.12, 0.8), (0.4, 1.0), (0.75, 0.95), (0.88, 0.72),
           (0.62, 0.5), (0.3, 0.52), (0.14, 0.72)]],
    "7": [[(0.05, 0.02), (0.95, 0.0), (0.38, 1.0)]],
    "8": [_ellipse(0.5, 0.24, 0.3, 0.24, 90, 360) + _ellipse(0.5, 0.74, 0.38, 0.26, -90, 360)],
    "9": [_ellipse(0.5, 0.28, 0.36, 0.28, 0, 360), [(0.86, 0.28), (0.72, 1.0)]],
}


def render_amount(rng: random.Random, text: str) -> tuple[Image.Image, list[tuple[int, tuple[int, int, int, int]]]]:
    """Render ``text`` (digits and ``.``/``,``/space separators) as a grey handwriting-like image.

    Returns ``(image, boxes)``: a mode ``L`` PIL image (height ~36-70 px) and, for every
    digit in order, ``(digit, (x, y, w, h))`` in image pixels.
    """
    ss = 3  # supersampling factor for anti-aliasing
    digit_h = rng.uniform(22, 40)
    slant = rng.uniform(-0.15, 0.45)
    width_ratio = rng.uniform(0.5, 0.8)
    thick = rng.uniform(1.6, 4.2)
    ink = rng.randint(0, 90)
    paper = rng.randint(185, 255)
    jit = rng.uniform(0.02, 0.06)
    margin_x = rng.uniform(4, 16)
    margin_y = rng.uniform(5, 14)
    baseline_wave = rng.uniform(0, 3)

    # Layout pass: x position of each glyph.
    items = []
    x = margin_x
    for ch in text:
        if ch.isdigit():
            h = digit_h * rng.uniform(0.9, 1.1)
            w = h * width_ratio * rng.uniform(0.85, 1.15) * (0.55 if ch == "1" else 1.0)
            dy = rng.uniform(-baseline_wave, baseline_wave)
            items.append(("d", ch, x, dy, w, h))
            x += w + rng.uniform(1, digit_h * 0.35)
        elif ch in ".,":
            items.append(("s", ch, x, 0.0, digit_h * 0.15, digit_h))
            x += digit_h * rng.uniform(0.25, 0.45)
        elif ch == " ":
            x += digit_h * rng.uniform(0.3, 0.7)
        elif ch in "-=":
            items.append(("m", ch, x, 0.0, digit_h * rng.uniform(0.3, 0.6), digit_h))
            x += items[-1][4] + digit_h * 0.15
    W = int(x + margin_x + abs(slant) * digit_h)
    H = int(digit_h * 1.15 + 2 * margin_y)
    canvas = Image.new("L", (W * ss, H * ss), 255)
    draw = ImageDraw.Draw(canvas)
    top = margin_y
    boxes = []
    lw = max(1, int(round(thick * ss)))
    for kind, ch, gx, dy, w, h in items:
        y0 = top + (digit_h - h) + dy
        if kind == "d":
            xs, ys = [], []
            for stroke in SKELETONS[ch]:
                pts = []
                for (px, py) in stroke:
                    px += rng.gauss(0, jit)
                    py += rng.gauss(0, jit)
                    X = gx + px * w + slant * (1 - py) * h
                    Y = y0 + py * h
                    pts.append((X * ss, Y * ss))
                    xs.append(X)
                    ys.append(Y)
                draw.line(pts, fill=0, width=lw, joint="curve")
                for p in (pts[0], pts[-1]):
                    r = lw / 2
                    draw.ellipse([p[0] - r, p[1] - r, p[0] + r, p[1] + r], fill=0)
            bx0 = max(0, int(min(xs) - thick))
            by0 = max(0, int(min(ys) - thick))
            bx1 = min(W, int(math.ceil(max(xs) + thick)))
            by1 = min(H, int(math.ceil(max(ys) + thick)))
            boxes.append((int(ch), (bx0, by0, bx1 - bx0, by1 - by0)))
        elif kind == "m":
            ys_ = [0.55] if ch == "-" else [0.42, 0.68]
            for fy in ys_:
                yy_ = top + digit_h * (fy + rng.uniform(-0.05, 0.05))
                draw.line([(gx * ss, yy_ * ss), ((gx + w) * ss, (yy_ + rng.uniform(-2, 2)) * ss)], fill=0, width=lw)
        else:
            cx = gx + rng.uniform(0, 2)
            cy = top + digit_h - thick
            r = max(thick * 0.8, 1.2) * ss
            draw.ellipse([cx * ss - r, cy * ss - r, cx * ss + r, cy * ss + r], fill=0)
            if ch == ",":
                draw.line([(cx * ss, cy * ss), ((cx - 2) * ss, (cy + digit_h * 0.25) * ss)], fill=0, width=lw)
    img = canvas.resize((W, H), Image.BILINEAR)
    if rng.random() < 0.5:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.2, 0.9)))
    a = np.asarray(img, dtype=np.float32) / 255.0
    a = ink + (paper - ink) * a
    # paper texture: low-frequency shading plus pixel noise
    yy, xx = np.mgrid[0:H, 0:W]
    a += rng.uniform(-12, 12) * np.sin(xx / max(W, 1) * rng.uniform(1, 4) + rng.uniform(0, 6))
    nrng = np.random.default_rng(rng.randrange(1 << 30))
    a += nrng.normal(0, rng.uniform(1, 10), size=a.shape)
    img = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "L")
    return img, boxes


def random_amount_text(rng: random.Random, n_digits: int | None = None) -> str:
    """A random amount string: 1-7 digits, sometimes with thousands/decimal separators."""
    n = n_digits or rng.choice([1, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5, 6, 6, 7])
    first = rng.choice("123456789") if n > 1 else rng.choice("0123456789")
    digits = first + "".join(rng.choice("0123456789") for _ in range(n - 1))
    r = rng.random()
    if n >= 4 and r < 0.3:
        sep = rng.choice([".", ",", " "])
        text = digits[:-3] + sep + digits[-3:]
    elif n >= 3 and r < 0.4:
        text = digits[:-2] + rng.choice([".", ","]) + digits[-2:]
    else:
        text = digits
    if rng.random() < 0.2:
        text += rng.choice([".-", "-", "=", ".", ".="])
    return text


def write_sample(out: str, count: int, seed: int) -> dict:
    """Write the sample parquet; return a summary dict (rows, bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tiny_tokenizer import ORAND_QUESTION

    rng = random.Random(seed)
    images, qas, shas, fams = [], [], [], []
    for i in range(count):
        text = random_amount_text(rng)
        img, _ = render_amount(rng, text)
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=True)
        data = buf.getvalue()
        sha = hashlib.sha256(data).hexdigest()
        answer = "".join(c for c in text if c.isdigit())
        images.append({"bytes": data, "path": "sample_%03d.png" % i})
        qas.append([{"question": ORAND_QUESTION, "answer": answer, "source": sha}])
        shas.append(sha)
        fams.append("OrandCar")
    schema = pa.schema(
        [
            ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            ("qa", pa.list_(pa.struct([("question", pa.string()), ("answer", pa.string()), ("source", pa.string())]))),
            ("image_sha256", pa.string()),
            ("family", pa.string()),
        ]
    )
    features = {
        "image": {"_type": "Image"},
        "qa": {
            "feature": {
                "question": {"dtype": "string", "_type": "Value"},
                "answer": {"dtype": "string", "_type": "Value"},
                "source": {"dtype": "string", "_type": "Value"},
            },
            "_type": "List",
        },
        "image_sha256": {"dtype": "string", "_type": "Value"},
        "family": {"dtype": "string", "_type": "Value"},
    }
    schema = schema.with_metadata({b"huggingface": json.dumps({"info": {"features": features}}).encode()})
    table = pa.Table.from_pydict({"image": images, "qa": qas, "image_sha256": shas, "family": fams}, schema=schema)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    pq.write_table(table, out, compression="snappy")
    return {"rows": count, "bytes": os.path.getsize(out)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="assets/sample/data/train-00000-of-00001.parquet")
    ap.add_argument("--count", type=int, default=48)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--png-dir", default=None, help="also write the PNGs here (for looking at them)")
    a = ap.parse_args(argv)
    info = write_sample(a.out, a.count, a.seed)
    if a.png_dir:
        os.makedirs(a.png_dir, exist_ok=True)
        import pyarrow.parquet as pq

        for row in pq.read_table(a.out).to_pylist():
            with open(os.path.join(a.png_dir, row["image"]["path"]), "wb") as f:
                f.write(row["image"]["bytes"])
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
