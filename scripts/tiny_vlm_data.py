#!/usr/bin/env python3
"""Training/eval sample generators of the tiny verisample VLM (used by train_tiny_vlm.py).

* ``Data``: reading samples -- augmented OrandCar-A train crops, strings composed from their
  per-digit boxes, procedural strings (``make_sample.render_amount``); each returns
  ``((PIL RGB image, [(digit, (x, y, w, h))...]), digits)``.
* ``judge_pair``: (reference, candidate, verdict) pairs made by the digit rule;
  ``judge_text`` fills the judge prompt.
"""

from __future__ import annotations

import json
import os
import random
import sys

import numpy as np
from PIL import Image, ImageFilter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_sample  # noqa: E402
import tiny_tokenizer as tt  # noqa: E402


# ----------------------------------------------------------------------------- data

class Data:
    """All training/eval sample generators. Images are returned as (PIL RGB, boxes, digits)."""

    def __init__(self, shared: str):
        self.root = os.path.join(shared, "orand-car-a")
        recs = [json.loads(l) for l in open(os.path.join(self.root, "labels.jsonl"))]
        self.train = [r for r in recs if r["split"] == "train"]
        self.val = [r for r in recs if r["split"] == "val"]
        self.train_imgs = [Image.open(os.path.join(self.root, r["file"])).convert("L") for r in self.train]
        self.bank: list[tuple[int, Image.Image]] = []
        for r, im in zip(self.train, self.train_imgs):
            for d in r["digits"]:
                x, y, w, h = d["bbox"]
                self.bank.append((d["digit"], im.crop((max(0, x - 1), max(0, y - 1), x + w + 1, y + h + 1))))

    # -- real train image, augmented; boxes follow the geometry
    def real(self, rng: random.Random):
        i = rng.randrange(len(self.train))
        r = self.train[i]
        im = self.train_imgs[i]
        boxes = [(d["digit"], tuple(d["bbox"])) for d in r["digits"]]
        return self._augment(rng, im, boxes), r["label"]

    def _augment(self, rng, im, boxes):
        W, H = im.size
        # random crop/pad per side
        l, t, rr, b = (rng.randint(-3, 10) for _ in range(4))
        bg = int(np.percentile(np.asarray(im), 80))
        canvas = Image.new("L", (W + l + rr, H + t + b), bg)
        canvas.paste(im, (l, t))
        im = canvas
        boxes = [(d, (x + l, y + t, w, h)) for d, (x, y, w, h) in boxes]
        # shear (slant change): x' = x + s * (y - H/2)
        s = rng.uniform(-0.25, 0.25)
        W2, H2 = im.size
        extra = int(abs(s) * H2 / 2) + 1
        im = im.transform((W2 + 2 * extra, H2), Image.AFFINE, (1, -s, -extra + s * H2 / 2, 0, 1, 0),
                          resample=Image.BILINEAR, fillcolor=bg)
        boxes = [(d, (x + extra + s * (y + h / 2 - H2 / 2), y, w, h)) for d, (x, y, w, h) in boxes]
        # anisotropic scale
        sx, sy = rng.uniform(0.75, 1.3), rng.uniform(0.8, 1.25)
        W3, H3 = im.size
        nw, nh = max(8, int(W3 * sx)), max(8, int(H3 * sy))
        im = im.resize((nw, nh), Image.BILINEAR)
        fx, fy = nw / W3, nh / H3
        boxes = [(d, (x * fx, y * fy, w * fx, h * fy)) for d, (x, y, w, h) in boxes]
        return self._photometric(rng, im), boxes

    def _photometric(self, rng, im):
        a = np.asarray(im, dtype=np.float32)
        if rng.random() < 0.3:
            im2 = Image.fromarray(a.astype(np.uint8)).filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
            a = np.asarray(im2, dtype=np.float32)
        lo, hi = np.percentile(a, 2), np.percentile(a, 98)
        ink, paper = rng.uniform(0, 100), rng.uniform(170, 255)
        a = (a - lo) / max(hi - lo, 1.0)
        a = np.clip(a, 0, 1) ** rng.uniform(0.7, 1.4)
        a = ink + (paper - ink) * a
        nrng = np.random.default_rng(rng.randrange(1 << 30))
        a = a + nrng.normal(0, rng.uniform(0, 8), size=a.shape)
        g = np.clip(a, 0, 255).astype(np.uint8)
        tint = [rng.uniform(0.9, 1.0) for _ in range(3)]
        rgb = np.stack([np.clip(g * t + (1 - t) * 255 * rng.uniform(0, 0.5), 0, 255) for t in tint], -1)
        return Image.fromarray(rgb.astype(np.uint8), "RGB")

    # -- string composed from per-digit crops of the train images
    def composed(self, rng: random.Random, n: int):
        text = make_sample.random_amount_text(rng, n)
        h0 = rng.uniform(24, 44)
        pieces, x = [], rng.uniform(3, 12)
        boxes = []
        gap_scale = rng.uniform(0.0, 0.35)
        for ch in text:
            if ch.isdigit():
                cands = None
                for _ in range(20):
                    d, crop = self.bank[rng.randrange(len(self.bank))]
                    if d == int(ch):
                        cands = crop
                        break
                if cands is None:
                    d, cands = next((d, c) for d, c in self.bank[rng.randrange(len(self.bank)) :] + self.bank if d == int(ch))
                h = h0 * rng.uniform(0.85, 1.12)
                w = max(4, cands.width * h / max(cands.height, 1) * rng.uniform(0.85, 1.15))
                crop = cands.resize((int(w), int(h)), Image.BILINEAR)
                y = rng.uniform(-3, 3)
                pieces.append(("d", crop, x, y))
                boxes.append((int(ch), (x, y, w, h)))
                x += w + h0 * rng.uniform(-0.08, gap_scale)
            elif ch in ".,":
                pieces.append(("s", ch, x, 0))
                x += h0 * rng.uniform(0.2, 0.45)
            elif ch == " ":
                x += h0 * rng.uniform(0.3, 0.6)
            else:  # '-' '='
                w = h0 * rng.uniform(0.3, 0.6)
                pieces.append(("m", ch, x, w))
                x += w + 3
        W = int(x + rng.uniform(3, 12))
        top = rng.uniform(3, 12)
        H = int(h0 * 1.15 + top + rng.uniform(3, 12) + 6)
        canvas = np.full((H, W), 255.0, dtype=np.float32)
        yy, xx = np.mgrid[0:H, 0:W]
        if rng.random() < 0.6:  # cheque guilloche-like pattern
            for _ in range(rng.randint(2, 8)):
                f, ph, amp = rng.uniform(0.05, 0.3), rng.uniform(0, 6), rng.uniform(2, 10)
                y0 = rng.uniform(0, H)
                line = np.abs(yy - (y0 + amp * np.sin(xx * f + ph))) < rng.uniform(0.5, 1.2)
                canvas[line] = np.minimum(canvas[line], rng.uniform(150, 220))
        for kind, obj, px, py in pieces:
            if kind == "d":
                a = np.asarray(obj, dtype=np.float32)
                paper = max(np.percentile(a, 85), 1.0)
                a = np.clip(a / paper * 255.0, 0, 255)
                x0, y0 = int(px), int(top + 3 + py)
                hh, ww = a.shape
                hh, ww = min(hh, H - y0), min(ww, W - x0)
                if hh > 0 and ww > 0:
                    canvas[y0 : y0 + hh, x0 : x0 + ww] = np.minimum(canvas[y0 : y0 + hh, x0 : x0 + ww], a[:hh, :ww])
            elif kind == "s":
                cx, cy = int(px + 2), int(top + 3 + h0 - 3)
                r = rng.uniform(1.2, 2.5)
                m = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
                if obj == ",":
                    m |= (np.abs(xx - (cx - (yy - cy) * 0.4)) < 1.0) & (yy >= cy) & (yy < cy + h0 * 0.25)
                canvas[m] = rng.uniform(0, 80)
            else:
                w = py
                for fy in ([0.55] if obj == "-" else [0.42, 0.68]):
                    cy = top + 3 + h0 * fy
                    m = (np.abs(yy - cy) < rng.uniform(0.8, 1.6)) & (xx >= px) & (xx < px + w)
                    canvas[m] = rng.uniform(0, 80)
        top_off = top + 3
        boxes = [(d, (bx, by + top_off, bw, bh)) for d, (bx, by, bw, bh) in boxes]
        im = Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8), "L")
        label = "".join(c for c in text if c.isdigit())
        return (self._photometric(rng, im), boxes), label

    def synthetic(self, rng: random.Random, n: int):
        text = make_sample.random_amount_text(rng, n)
        im, boxes = make_sample.render_amount(rng, text)
        label = "".join(c for c in text if c.isdigit())
        return (self._photometric(rng, im), boxes), label


# ----------------------------------------------------------------------------- judge pairs

UNUSABLE_REFS = ["", " ", "-", "?", "...", "N/A", "n/a", "illegible", "unreadable", "???", "*", "--", "none",
                 "(blank)", "xx", ".", "-.-", "[unreadable]", "#", "?-?"]


def fmt_number(rng: random.Random, digits: str) -> str:
    """A formatting variant that keeps the digit sequence."""
    r = rng.random()
    s = digits
    if r < 0.35:
        pass
    elif r < 0.55 and len(digits) >= 4:
        s = digits[:-3] + rng.choice([".", ",", " "]) + digits[-3:]
    elif r < 0.65 and len(digits) >= 3:
        s = digits[:-2] + rng.choice([".", ","]) + digits[-2:]
    elif r < 0.75:
        s = digits + rng.choice([".-", "-", "=", ".", ".="])
    elif r < 0.82:
        s = "$" + digits
    elif r < 0.88:
        s = " ".join(digits) if len(digits) <= 5 else digits
    elif r < 0.94:
        s = rng.choice(["The amount is ", "Amount: ", "", "It says "]) + digits
    else:
        s = " " + digits + " "
    return s


def mutate_digits(rng: random.Random, digits: str) -> str:
    """A digit sequence that differs from ``digits`` (near misses and gross errors)."""
    for _ in range(50):
        r = rng.random()
        d = list(digits)
        if r < 0.3:
            i = rng.randrange(len(d))
            d[i] = rng.choice([c for c in "0123456789" if c != d[i]])
        elif r < 0.5 and len(d) > 1:
            del d[rng.randrange(len(d))]
        elif r < 0.7:
            d.insert(rng.randrange(len(d) + 1), rng.choice("0123456789"))
        elif r < 0.8 and len(d) > 1:
            i = rng.randrange(len(d) - 1)
            d[i], d[i + 1] = d[i + 1], d[i]
        elif r < 0.9:
            d = list(random_digits(rng))
        else:
            return ""
        s = "".join(d)
        if s != digits:
            return s
    return digits + "1"


def letterise(rng: random.Random, s: str) -> str:
    """Replace some digits with look-alike letters (``11850`` -> ``ll850``)."""
    table = {"1": "l", "0": "O", "5": "S", "8": "B", "2": "Z", "6": "b"}
    out = list(s)
    idx = [i for i, c in enumerate(out) if c in table]
    if not idx:
        return s
    for i in rng.sample(idx, rng.randint(1, min(2, len(idx)))):
        out[i] = table[out[i]]
    return "".join(out)


def random_digits(rng: random.Random) -> str:
    n = rng.choice([1, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5, 6, 6, 7])
    first = rng.choice("123456789") if n > 1 else rng.choice("0123456789")
    return first + "".join(rng.choice("0123456789") for _ in range(n - 1))


def only_digits(s: str) -> str:
    return "".join(c for c in s if c in "0123456789")


def judge_pair(rng: random.Random):
    """-> (reference, candidate, verdict); the verdict follows the digit rule."""
    k = rng.random()
    digits = random_digits(rng)
    if k < 0.12:
        ref = rng.choice(UNUSABLE_REFS)
        cand = fmt_number(rng, digits) if rng.random() < 0.8 else rng.choice(UNUSABLE_REFS)
    elif k < 0.55:
        ref = fmt_number(rng, digits) if rng.random() < 0.4 else digits
        cand = fmt_number(rng, digits)
    else:
        ref = fmt_number(rng, digits) if rng.random() < 0.4 else digits
        if rng.random() < 0.25:
            cand = letterise(rng, fmt_number(rng, digits))
            if only_digits(cand) == digits:
                cand = fmt_number(rng, mutate_digits(rng, digits))
        else:
            cand = fmt_number(rng, mutate_digits(rng, digits))
    rd, cd = only_digits(ref), only_digits(cand)
    verdict = "UNSURE" if not rd else ("CORRECT" if rd == cd else "WRONG")
    return ref, cand, verdict


def judge_text(ref: str, cand: str) -> str:
    return (tt.JUDGE_TEMPLATE.replace("{question}", tt.ORAND_QUESTION)
            .replace("{reference}", ref).replace("{candidate}", cand))
