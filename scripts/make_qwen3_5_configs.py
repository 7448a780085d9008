#!/usr/bin/env python3
"""Write the Qwen3.5 config fixtures exactly as transformers saves them.

Each file under ``models/tests/fixtures/qwen3_5_configs/`` is what
``Qwen3_5Config(...).save_pretrained`` writes (transformers >= 5.2; the version is recorded in
the file's ``transformers_version``):

* ``default.config.json``: ``Qwen3_5Config()`` with the class defaults (the Qwen3.5-27B-style
  sizes: 32 layers, every 4th full attention, head_dim 256, partial rotary 0.25, no
  ``mrope_section`` in the file).
* ``tiny.config.json``: small sizes given the old way (``full_attention_interval=2``,
  ``partial_rotary_factor`` as a keyword next to ``rope_parameters``, ``mrope_section`` and
  ``mrope_interleaved``), with fewer linear key heads than value heads.

Used by ``models/tests/configs_qwen3_5.rs``. Usage (from the repository root):
``python scripts/make_qwen3_5_configs.py`` (deterministic, no network).
"""

import json
import pathlib
import tempfile

from transformers import Qwen3_5Config

OUT = pathlib.Path(__file__).resolve().parent.parent / "models/tests/fixtures/qwen3_5_configs"

TINY = Qwen3_5Config(
    text_config=dict(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=8,
        linear_value_head_dim=12,
        linear_num_key_heads=2,
        linear_num_value_heads=6,
        full_attention_interval=2,
        partial_rotary_factor=0.5,
        rms_norm_eps=1e-5,
        eos_token_id=[7, 9],
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5000.0,
            "mrope_section": [4, 2, 2],
            "mrope_interleaved": True,
        },
    ),
    vision_config=dict(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
        num_position_embeddings=64,
    ),
    tie_word_embeddings=True,
)


def save(config, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config.save_pretrained(tmp)
        text = (pathlib.Path(tmp) / "config.json").read_text()
    json.loads(text)  # well-formed
    (OUT / name).write_text(text)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    save(Qwen3_5Config(), "default.config.json")
    save(TINY, "tiny.config.json")


if __name__ == "__main__":
    main()
