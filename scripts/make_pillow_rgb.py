#!/usr/bin/env python3
"""Decode the 4 fixture images with Pillow and store their RGB pixels losslessly as PNG.

`models/tests/parity.rs` feeds these PNGs (whose decoding is exact in any decoder) to our
image processor, so the resize + normalise steps are compared bit for bit with the goldens'
`pixel_values` (made by transformers from the same Pillow-decoded pixels); only the JPEG
decoding itself keeps a loose bound there.

Run from the repository root (needs the shared data directory, like make_fixtures.py):

    python scripts/make_pillow_rgb.py
"""
import json
import os
from pathlib import Path

import PIL
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "models/tests/fixtures"


def shared_data():
    env = os.environ.get("VERISAMPLE_SHARED_DATA")
    for p in [env, REPO / "../../shared/data", REPO / "../shared/data"]:
        if p and (Path(p) / "orand-car-a").is_dir():
            return Path(p)
    raise SystemExit("no shared data (set VERISAMPLE_SHARED_DATA)")


def main():
    data = shared_data()
    images = json.loads((FIXTURES / "qwen2_vl/goldens.json").read_text())["images"]
    out = FIXTURES / "pillow_rgb"
    out.mkdir(exist_ok=True)
    for rel in images:
        rgb = Image.open(data / rel).convert("RGB")
        rgb.save(out / (Path(rel).stem + ".png"), optimize=True)
        print(rel, rgb.size)
    (out / "README.md").write_text(
        "# Pillow-decoded fixture images\n\n"
        f"The 4 images of the model goldens (`{', '.join(images)}` of the shared data), decoded\n"
        f"by Pillow {PIL.__version__} (`Image.open(...).convert(\"RGB\")`) and stored as PNG, so\n"
        "the test decodes exactly the pixels transformers resized. Made by\n"
        "`python scripts/make_pillow_rgb.py`.\n"
    )


if __name__ == "__main__":
    main()
