#!/usr/bin/env python3
"""Render a run's dataset card (OUT/README.md, with its example images and chart) to HTML as
a Markdown viewer shows it, and take a screenshot of its top with headless Chromium.

    python3 scripts/screenshot_card.py OUT docs/images/card.png [--height 2600]

Needs `markdown-it-py` (pip) and Debian's `chromium`. The YAML header is shown as a code
block, as the Hub shows a card's metadata; `configs`/`dataset_info` are elided.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

from markdown_it import MarkdownIt

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:980px;
     margin:24px auto;font-size:14px;color:#1f2328;line-height:1.45}
pre{background:#f6f8fa;padding:10px;overflow:auto;font-size:12px}
code{background:#f6f8fa;padding:1px 3px;font-size:12px}
table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #d0d7de;padding:4px 8px;vertical-align:top}
img{max-width:100%;border:1px solid #eee}
h1,h2{border-bottom:1px solid #d0d7de;padding-bottom:4px}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="a verisample output folder")
    ap.add_argument("png", help="the screenshot to write")
    ap.add_argument("--height", type=int, default=2600, help="pixels of the card shown")
    ap.add_argument("--width", type=int, default=1100)
    args = ap.parse_args()
    text = open(os.path.join(args.out, "README.md"), encoding="utf-8").read()
    _, front, body = text.split("---\n", 2)
    head = front.split("configs:")[0] + "configs: … (data files and features)\n"
    html = MarkdownIt("commonmark").enable("table").render(f"```yaml\n{head}```\n{body}")
    # Beside the card, so that its relative links (examples/, chart.svg) resolve.
    with tempfile.NamedTemporaryFile(
        "w", suffix=".html", dir=args.out, delete=False, encoding="utf-8"
    ) as f:
        f.write(f"<!doctype html><meta charset=utf-8><style>{CSS}</style>{html}")
        page = f.name
    try:
        subprocess.run(
            [
                "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--screenshot={os.path.abspath(args.png)}",
                f"--window-size={args.width},{args.height}",
                f"file://{page}",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
    finally:
        os.unlink(page)
    print(args.png)


if __name__ == "__main__":
    main()
