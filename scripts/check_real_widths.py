#!/usr/bin/env python3
"""Real-width check: our greedy tokens vs transformers' at published widths.

For each family it builds a random checkpoint with the published widths of a real model
(every hidden size, head count and the 151936-token vocabulary; fewer layers), saves it the
way the hub does (bf16, sharded, ``model.safetensors.index.json``), and compares the greedy
tokens of verisample (the ``bench`` subcommand, f32) with transformers' ``generate`` (f32,
``AutoModelForImageTextToText``) on a few real images (orand-car-a/val, the OrandCar question,
thinking on). Tokenizer, chat template and processor come from the repository's fixture of the
family (special-token ids below 151936). Checkpoints go to a temporary folder, never the repo.

Widths (config.json of the published checkpoints):
  2b  Qwen2-VL-2B-Instruct: text 1536 / 8960, 12 heads, 2 KV heads; vision 1280, 16 heads,
      mlp_ratio 4, merger to 1536.
  7b  Qwen2.5-VL-7B-Instruct: text 3584 / 18944, 28 heads, 4 KV heads; vision 1280 / 3420,
      16 heads, window 112, merger to 3584.
  8b  Qwen3-VL-8B-Instruct: text 4096 / 12288, 32 heads, 8 KV heads, head_dim 128; vision
      1152 / 4304, 16 heads, patch 16, 2304 position embeddings, merger to 4096.
  internvl-8b  InternVL3.5-8B-HF: Qwen3-8B decoder (4096 / 12288, 32 heads, 8 KV heads,
      head_dim 128, plain RoPE 1e6); InternViT-300M (1024 / 4096, 16 heads, layer norm,
      biased attention, layer scale), tiles of 448 (256 tokens each after the 0.5 pixel
      shuffle), 1-12 tiles + a thumbnail, projector to 4096.
  glm-9b  GLM-4.1V-9B-Thinking: GLM-4 decoder (4096 / 13696, 32 heads, 2 KV heads, half of
      each 128-wide head rotated, M-RoPE [8, 12, 12], 151552-token vocabulary); vision 1536,
      12 heads, image_size 336 (24×24 learned positions), merger 13696 to 4096; the published
      pixel bounds (12544 / 9633792).

Peak memory per process: about 1 GB (2b), 4.5 GB (7b), 5 GB (8b, internvl-8b) in f32; run one
at a time.
CI (`.ci/run`) runs the 2b one.

Usage (from the repository root, after ``cargo build --release``):
    python scripts/check_real_widths.py [--models 2b,7b,8b] [--num-images 3]
        [--max-new-tokens 8] [--threads N] [--bin PATH] [--keep DIR]
Exit status 1 when any item's tokens differ beyond a near-tie (see bench_vs_transformers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vs_transformers import QUESTION, REPO, compare, list_images, run_json, shared_data  # noqa: E402

FIXTURES = os.path.join(REPO, "models", "tests", "fixtures")
VOCAB = 151936

# family fixture, text widths, vision widths (layers cut to 2 text / 4 vision blocks unless
# `build` is told otherwise). The 2B's context length is the published one (32768), so that
# the prompt of a 12.8 Mpx image (16384 image tokens) fits (scripts/bench_large_images.py).
# Published embedding ties: the 2B ties its embeddings, the 7B and 8B do not.
TIED = {"2b": True, "7b": False, "8b": False, "internvl-8b": False, "glm-9b": False}
# A vocabulary other than the Qwen one.
VOCABS = {"glm-9b": 151552}
WIDTHS = {
    "2b": ("qwen2_vl",
           dict(hidden_size=1536, intermediate_size=8960, num_attention_heads=12, num_key_value_heads=2,
                max_position_embeddings=32768,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}),
           dict(depth=4, embed_dim=1280, num_heads=16, mlp_ratio=4, hidden_size=1536)),
    "7b": ("qwen2_5_vl",
           dict(hidden_size=3584, intermediate_size=18944, num_attention_heads=28, num_key_value_heads=4,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}),
           dict(depth=4, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
                window_size=112, fullatt_block_indexes=[1, 3])),
    "8b": ("qwen3_vl",
           dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                                 "mrope_interleaved": True}),
           dict(depth=4, hidden_size=1152, intermediate_size=4304, num_heads=16, out_hidden_size=4096,
                num_position_embeddings=2304, deepstack_visual_indexes=[1, 2, 3])),
    "internvl-8b": ("internvl",
                    dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=128, max_position_embeddings=40960,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
                    dict(num_hidden_layers=4, hidden_size=1024, intermediate_size=4096, num_attention_heads=16,
                         image_size=[448, 448], patch_size=[14, 14], norm_type="layer_norm", use_qk_norm=False,
                         attention_bias=True)),
    "glm-9b": ("glm4v",
               dict(hidden_size=4096, intermediate_size=13696, num_attention_heads=32, num_key_value_heads=2,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 12, 12],
                                     "partial_rotary_factor": 0.5}),
               dict(depth=4, hidden_size=1536, intermediate_size=13696, num_heads=12, out_hidden_size=4096,
                    image_size=336, patch_size=14)),
}
# GLM-4.1V-9B-Thinking's published pixel bounds (preprocessor_config.json `size`).
GLM_SIZE = {"shortest_edge": 12544, "longest_edge": 9633792}
# InternVL's processor at the published tile: 448 pixels, 256 tokens a tile, up to 12 tiles.
INTERNVL_PROCESSOR = {"size": {"height": 448, "width": 448}, "max_patches": 12}
INTERNVL_TILE_TOKENS = 256


def build(name: str, out_dir: str, text_layers: int = 2, vision_depth: int | None = None) -> None:
    """A random checkpoint of `name`'s widths in `out_dir`: bf16, sharded with an index.

    `text_layers` decoder layers (all full attention); `vision_depth` vision blocks (default:
    the count in `WIDTHS`). Weights: transformers' own init, seed 0.
    """
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    fixture, text, vision = WIDTHS[name]
    src = os.path.join(FIXTURES, fixture)
    for f in os.listdir(src):
        if f not in ("config.json", "model.safetensors") and not f.startswith("goldens"):
            shutil.copy(os.path.join(src, f), out_dir)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["text_config"].update(text, vocab_size=VOCABS.get(name, VOCAB), num_hidden_layers=text_layers,
                              layer_types=["full_attention"] * text_layers)
    cfg["vision_config"].update(vision)
    if vision_depth is not None:
        cfg["vision_config"]["depth"] = vision_depth
    if cfg["model_type"] == "internvl":
        cfg["image_seq_length"] = INTERNVL_TILE_TOKENS
        patch_internvl_processor(out_dir)
    if cfg["model_type"] == "glm4v":
        patch_size(out_dir, GLM_SIZE)
    cfg.pop("dtype", None)
    cfg["tie_word_embeddings"] = TIED[name]
    cfg["text_config"]["tie_word_embeddings"] = TIED[name]
    config = AutoConfig.for_model(**cfg)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).to(torch.bfloat16).eval()
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size="300MB")
    if not os.path.exists(os.path.join(out_dir, "model.safetensors.index.json")):
        sys.exit(f"{name}: save_pretrained wrote no shard index")


def patch_internvl_processor(out_dir: str) -> None:
    """The fixture's processor files (tiles of 112) at the published tile size."""
    path = os.path.join(out_dir, "preprocessor_config.json")
    with open(path) as f:
        pre = json.load(f)
    pre.update(INTERNVL_PROCESSOR)
    with open(path, "w") as f:
        json.dump(pre, f, indent=2)
    path = os.path.join(out_dir, "processor_config.json")
    with open(path) as f:
        proc = json.load(f)
    proc["image_seq_length"] = INTERNVL_TILE_TOKENS
    for sub in ("image_processor", "video_processor"):
        if sub in proc:
            proc[sub].update(INTERNVL_PROCESSOR)
    with open(path, "w") as f:
        json.dump(proc, f, indent=2)


def patch_size(out_dir: str, size: dict) -> None:
    """The fixture's processor files with the published `size` (pixel bounds)."""
    for name in ("preprocessor_config.json", "processor_config.json"):
        path = os.path.join(out_dir, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            cfg = json.load(f)
        for sub in (cfg, cfg.get("image_processor")):
            if isinstance(sub, dict) and "size" in sub:
                sub["size"] = dict(size)
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)


def hf_worker(args: argparse.Namespace) -> None:
    """transformers' greedy tokens for each image, one JSON object (as bench_vs_transformers)."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    torch.set_num_threads(args.threads)
    processor = AutoProcessor.from_pretrained(args.model, use_fast=False)
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=torch.float32).eval()
    tok = processor.tokenizer
    vocab = tok.get_vocab()
    # The families' turn ends (Qwen: <|im_end|>, <|endoftext|>; GLM also <|user|>, <|observation|>).
    eos = sorted({vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "<|user|>", "<|observation|>") if t in vocab})
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    prompt = processor.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=True)
    items = []
    for f in list_images(args.images, args.num_images):
        inputs = processor(text=[prompt], images=[Image.open(f)], return_tensors="pt")
        n_in = inputs["input_ids"].shape[1]
        with torch.inference_mode():
            gen = model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=args.max_new_tokens,
                                 eos_token_id=eos, pad_token_id=eos[0], output_logits=True,
                                 return_dict_in_generate=True)
        ids = []
        for t in gen.sequences[0, n_in:].tolist():
            ids.append(t)
            if t in eos:
                break
        logits = torch.stack(gen.logits, dim=1)[0, : len(ids)].tolist()
        items.append({"file": os.path.basename(f), "token_ids": ids, "logits": logits})
    print(json.dumps({"items": items}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="2b")
    ap.add_argument("--images", default=os.path.join(shared_data(), "orand-car-a", "val"))
    ap.add_argument("--num-images", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    ap.add_argument("--bin", default=os.path.join(target, "release", "verisample"))
    ap.add_argument("--keep", help="build the checkpoints under this folder and keep them")
    ap.add_argument("--tie-tol", type=float, default=1e-3)
    ap.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_worker:
        hf_worker(args)
        return
    if not os.path.isdir(args.images):
        sys.exit(f"skipped: no images at {args.images}")
    if not os.path.exists(args.bin):
        sys.exit(f"no binary at {args.bin}: run `cargo build --release`")
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    root = args.keep or tempfile.mkdtemp(prefix="verisample-widths-")
    bad = 0
    for name in args.models.split(","):
        mdir = os.path.join(root, name)
        if not os.path.exists(os.path.join(mdir, "model.safetensors.index.json")):
            os.makedirs(mdir, exist_ok=True)
            build(name, mdir)
        common = ["--images", args.images, "--max-new-tokens", str(args.max_new_tokens)]
        limit = ["--limit", str(args.num_images)] if args.num_images else []
        ours = run_json([args.bin, "-q", "bench", "--json", "--model", mdir, "--max-batch", "1", "--warmup", "0",
                         "--question", QUESTION, *limit, *common], env)
        hf = run_json([sys.executable, __file__, "--hf-worker", "--model", mdir, "--threads", str(args.threads),
                       "--num-images", str(args.num_images), *common], env)
        for o, h in zip(ours["items"], hf["items"]):
            kind, detail = compare(o, h, args.tie_tol)
            bad += kind == "MISMATCH"
            print(f"{name} {o['label']}: {kind} {detail} ours {o['token_ids']} hf {h['token_ids']}")
        if len(ours["items"]) != len(hf["items"]):
            bad += 1
            print(f"{name}: {len(ours['items'])} items ours vs {len(hf['items'])} transformers")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
