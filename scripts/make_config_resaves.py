#!/usr/bin/env python3
"""Re-save each published config fixture the way transformers does.

For every `models/tests/fixtures/configs/<name>.config.json` (a published `config.json`),
load it with transformers' own config classes (`AutoConfig.from_pretrained`) and write what
`save_pretrained` produces to `<name>.resaved.config.json` next to it: the layout every
checkpoint fine-tuned and saved with this transformers version carries (nested
`text_config`, `rope_parameters` holding both `rope_type` and the legacy `type`, `in_chans`
next to `in_channels`, ...). The transformers version is recorded in each file's
`transformers_version`.

Usage (from the repository root): python scripts/make_config_resaves.py
"""

import pathlib
import shutil
import tempfile

from transformers import AutoConfig

CONFIGS = pathlib.Path(__file__).resolve().parent.parent / "models/tests/fixtures/configs"
SUFFIX = ".config.json"
RESAVED = ".resaved" + SUFFIX


def main() -> None:
    published = sorted(
        p for p in CONFIGS.glob("*" + SUFFIX) if not p.name.endswith(RESAVED)
    )
    if not published:
        raise SystemExit(f"no *{SUFFIX} under {CONFIGS}")
    for src in published:
        name = src.name[: -len(SUFFIX)]
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            (tmp / "in").mkdir()
            shutil.copy(src, tmp / "in" / "config.json")
            AutoConfig.from_pretrained(tmp / "in").save_pretrained(tmp / "out")
            # Same-directory temp file + rename: an interrupted run leaves no half file.
            dst = CONFIGS / (name + RESAVED)
            part = dst.with_suffix(".part")
            shutil.copy(tmp / "out" / "config.json", part)
            part.replace(dst)
        print(f"{src.name} -> {dst.name}")


if __name__ == "__main__":
    main()
