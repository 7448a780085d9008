#!/usr/bin/env python3
"""Pillow's decoded pixels of JPEG files, the reference of the Rust JPEG decoder.

A row's image reaches the model as `datasets`' `Image` feature decodes it
(`PIL.Image.open`, `load()`, `PIL.ImageOps.exif_transpose` when the EXIF Orientation tag is
present) and transformers' image processor converts it (`convert("RGB")`). This script
applies exactly that and records, per file, width, height and the SHA-256 of the RGB bytes.

Writes (from the repository root):
- `tests/fixtures/jpeg/*.jpg`: a generated set of small JPEGs covering 4:4:4 / 4:2:2 / 4:2:0 /
  4:4:0 / 4:1:1 subsampling, progressive, restart markers, grayscale, CMYK (Adobe), RGB
  (Adobe transform 0), odd sizes, extreme qualities and EXIF orientations 1-8; the 4:4:0 and
  4:1:1 files come from libjpeg-turbo's `cjpeg` (`apt-get install libjpeg-turbo-progs`),
  which Pillow cannot write;
- `tests/fixtures/jpeg/expected.tsv`: `name width height sha256` of each;
- with `--orand DIR` (the shared data's `orand-car-a`): `tests/fixtures/jpeg/orand.tsv`, the
  same for every `*.jpg` under `DIR/train` and `DIR/val` (hash cut to 16 hex digits).

Usage: python scripts/make_jpeg_references.py [--orand ../shared/data/orand-car-a]
"""

import argparse
import hashlib
import io
import pathlib
import subprocess
import tempfile

import numpy as np
import PIL
from PIL import Image, ImageOps, features

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "jpeg"


def decode_like_datasets(data: bytes) -> Image.Image:
    """`datasets.Image.decode_example` on `{"bytes": data}`, then `convert("RGB")`."""
    image = Image.open(io.BytesIO(data))
    image.load()
    if image.getexif().get(Image.ExifTags.Base.Orientation) is not None:
        image = ImageOps.exif_transpose(image)
    return image.convert("RGB")


def record(data: bytes, digits: int = 64) -> str:
    rgb = decode_like_datasets(data)
    sha = hashlib.sha256(rgb.tobytes()).hexdigest()[:digits]
    return f"{rgb.width}\t{rgb.height}\t{sha}"


def pattern(w: int, h: int, seed: int) -> Image.Image:
    """Gradients, hard colour edges and noise: every chroma path gets work to do."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1)).astype(np.int32)
    g = (y * 255 // max(h - 1, 1)).astype(np.int32)
    b = np.where((x // 3 + y // 2) % 2 == 0, 230, 20)
    img = np.stack([r, g, b], axis=-1) + rng.integers(-40, 41, size=(h, w, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def pillow(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", **kw)
    return buf.getvalue()


def cjpeg(img: Image.Image, *args: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        ppm = pathlib.Path(tmp) / "in.ppm"
        img.save(ppm)
        return subprocess.run(["cjpeg", *args, str(ppm)], check=True, capture_output=True).stdout


def with_orientation(img: Image.Image, value: int) -> bytes:
    exif = Image.Exif()
    exif[Image.ExifTags.Base.Orientation] = value
    return pillow(img, quality=90, exif=exif.tobytes())


def variants() -> dict[str, bytes]:
    base = pattern(37, 29, 1)
    out = {
        "s444_q90": pillow(base, quality=90, subsampling=0),
        "s422_q90": pillow(base, quality=90, subsampling=1),
        "s420_q90": pillow(base, quality=90, subsampling=2),
        "s420_q100": pillow(base, quality=100, subsampling=2),
        "s420_q5": pillow(base, quality=5, subsampling=2),
        "s444_q100": pillow(base, quality=100, subsampling=0),
        "s420_progressive": pillow(base, quality=85, subsampling=2, progressive=True),
        "s444_progressive": pillow(base, quality=85, subsampling=0, progressive=True),
        "s420_restart_blocks": pillow(base, quality=85, restart_marker_blocks=1),
        "s422_restart_rows": pillow(base, quality=85, subsampling=1, restart_marker_rows=1),
        "s420_optimized": pillow(base, quality=85, optimize=True),
        "gray": pillow(base.convert("L"), quality=90),
        "gray_progressive": pillow(base.convert("L"), quality=90, progressive=True),
        "cmyk": pillow(base.convert("CMYK"), quality=90),
        "rgb_adobe": pillow(base, quality=90, keep_rgb=True, subsampling=0),
        "s440_cjpeg": cjpeg(base, "-quality", "90", "-sample", "1x2"),
        "s411_cjpeg": cjpeg(base, "-quality", "90", "-sample", "4x1"),
        "s420_cjpeg_restart": cjpeg(base, "-quality", "80", "-restart", "1B"),
        "s420_cjpeg_progressive": cjpeg(base, "-quality", "80", "-progressive"),
        "tiny_1x1": pillow(pattern(1, 1, 2), quality=90),
        "wide_101x3": pillow(pattern(101, 3, 3), quality=90),
        "tall_3x101": pillow(pattern(3, 101, 4), quality=90),
        "odd_17x9_s422": pillow(pattern(17, 9, 5), quality=90, subsampling=1),
    }
    for value in range(1, 9):
        out[f"exif_orientation_{value}"] = with_orientation(base, value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orand", type=pathlib.Path, help="orand-car-a folder of the shared data")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    lines = [f"# Pillow {PIL.__version__}, libjpeg-turbo {features.version('libjpeg_turbo')}"]
    for name, data in variants().items():
        (OUT / f"{name}.jpg").write_bytes(data)
        lines.append(f"{name}.jpg\t{record(data)}")
    (OUT / "expected.tsv").write_text("\n".join(lines) + "\n")
    if args.orand:
        rows = [lines[0]]
        files = sorted(args.orand.glob("train/*.jpg")) + sorted(args.orand.glob("val/*.jpg"))
        for f in files:
            rows.append(f"{f.parent.name}/{f.name}\t{record(f.read_bytes(), 16)}")
        (OUT / "orand.tsv").write_text("\n".join(rows) + "\n")
        print(f"{len(files)} ORAND images")


if __name__ == "__main__":
    main()
