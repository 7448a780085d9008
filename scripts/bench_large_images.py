#!/usr/bin/env python3
"""Large-image benchmark: verisample vs transformers on one big image per size.

Checkpoint: a random Qwen2-VL-2B-width checkpoint (``check_real_widths.build("2b", ...)``:
text 1536 / 8960, 12 heads, 2 KV heads, vocabulary 151936, context 32768; vision 1280 wide,
16 heads) with ``--vision-depth`` vision blocks and ``--text-layers`` decoder layers (3 and 3,
as in the issue), bf16 shards loaded as f32 by both engines. Its ``preprocessor_config.json``
gets Qwen2-VL's default pixel bounds (``min_pixels`` 3136, ``max_pixels`` 12845056 = 3584²),
so that both engines resize with the same bounds.

Images: one synthetic image per size (default 1400x1000, 2000x1500, 3584x3584), made here
deterministically (colour gradients, a grid, lines of rendered text, seeded noise) and saved
as PNG, so that both engines decode the same pixels. The script prints what transformers'
``smart_resize`` gives for each size and checks that both engines built prompts of the same
length (same number of image tokens = patches / 4).

Per size, one process per engine (peak RSS is per engine), same thread count:
  * verisample: ``verisample bench --json --max-batch 1 --warmup 0 --limit 1 --question QUESTION``
    on a folder holding the one image (``RAYON_NUM_THREADS``): one measured pass, no warm-up.
    Run time = that pass's ``wall_s`` (the seconds inside ``Engine::generate``: image decode,
    resize, vision tower, prefill, decode; docs/bench.md); peak RSS = its ``peak_rss_bytes``
    (``VmHWM``).
  * transformers: this script in ``--hf-worker`` mode (``torch.set_num_threads``,
    ``attn_implementation="sdpa"``, ``AutoProcessor(use_fast=False)``, greedy ``generate``).
    One untimed warm-up ``generate`` on a 56x56 image first; run time = image open + processor
    + ``generate``; peak RSS = ``ru_maxrss``.
Both: f32, the OrandCar question through the chat template (thinking on), ``--max-new-tokens``
(4) greedy tokens, compared with ``bench_vs_transformers.compare`` (a divergence where
transformers' top-two logits are closer than ``--tie-tol`` is a near-tie, not a mismatch).
The process column is the whole process (model load included), measured from outside.

With ``--lock FILE`` (default /tmp/verisample-bench.lock) each size holds an exclusive
``flock`` on FILE for its two measurements, so that benchmarks of other jobs do not overlap.

Usage (from the repository root, after ``cargo build --release``):
    python scripts/bench_large_images.py [--sizes 1400x1000,2000x1500,3584x3584]
        [--threads 2] [--max-new-tokens 4] [--vision-depth 3] [--text-layers 3]
        [--keep DIR] [--bin PATH] [--json OUT.json] [--lock FILE]
Exit status 1 when a size's tokens differ beyond a near-tie or the prompt lengths differ.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vs_transformers import QUESTION, REPO, compare  # noqa: E402
from check_real_widths import WIDTHS, build  # noqa: E402

# Qwen2-VL's default pixel bounds (transformers' Qwen2VLImageProcessor: 56·56 and
# 14·14·4·16384 = 12845056 = 3584²).
MIN_PIXELS, MAX_PIXELS = 56 * 56, 12845056
FACTOR = 28  # patch_size 14 × spatial_merge_size 2


def checkpoint(root: str, vision_depth: int, text_layers: int) -> str:
    """The 2B-width checkpoint under `root` (built when missing, checked when present), with
    Qwen2-VL's default pixel bounds in its preprocessor_config.json."""
    mdir = os.path.join(root, f"2b-v{vision_depth}-t{text_layers}")
    if not os.path.exists(os.path.join(mdir, "model.safetensors.index.json")):
        os.makedirs(mdir, exist_ok=True)
        print(f"# building the 2B-width checkpoint in {mdir}", flush=True)
        build("2b", mdir, text_layers=text_layers, vision_depth=vision_depth)
    with open(os.path.join(mdir, "config.json")) as f:
        cfg = json.load(f)
    _, text, vision = WIDTHS["2b"]
    want = {("text_config", "num_hidden_layers"): text_layers, ("vision_config", "depth"): vision_depth,
            **{("text_config", k): v for k, v in text.items() if k != "rope_parameters"},
            **{("vision_config", k): v for k, v in vision.items() if k != "depth"}}
    bad = [f"{sec}.{k} = {cfg[sec].get(k)}, want {v}" for (sec, k), v in want.items() if cfg[sec].get(k) != v]
    if bad:
        sys.exit(f"{mdir} is not the checkpoint this benchmark wants: " + "; ".join(bad))
    pp = os.path.join(mdir, "preprocessor_config.json")
    with open(pp) as f:
        proc = json.load(f)
    proc.update(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS,
                size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS})
    with open(pp + ".tmp", "w") as f:
        json.dump(proc, f, indent=2)
    os.replace(pp + ".tmp", pp)
    return mdir


def make_image(width: int, height: int, path: str) -> None:
    """A deterministic synthetic document-like image: gradients, a grid, text, seeded noise."""
    from PIL import Image, ImageDraw, ImageFont

    xs = Image.linear_gradient("L").resize((width, height))
    ys = xs.transpose(Image.Transpose.ROTATE_90).resize((width, height))
    base = Image.merge("RGB", (xs, ys, Image.blend(xs, ys, 0.5).point(lambda v: 255 - v)))
    draw = ImageDraw.Draw(base)
    for x in range(0, width, 97):
        draw.line([(x, 0), (x, height)], fill=(30, 30, 30), width=2)
    for y in range(0, height, 61):
        draw.line([(0, y), (width, y)], fill=(220, 220, 220), width=1)
    font = ImageFont.load_default(size=max(12, height // 40))
    rng = random.Random(width * 100003 + height)
    for i, y in enumerate(range(10, height - 20, max(16, height // 25))):
        words = " ".join(f"{rng.randrange(10**6):06d}" for _ in range(8))
        draw.text((20 + (i * 37) % 200, y), f"line {i}: {words}", fill=(0, 0, 90), font=font)
    noise = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
    Image.blend(base, noise, 0.15).save(path, format="PNG")


def patches_of(width: int, height: int) -> tuple[int, int, int]:
    """(resized height, resized width, patches) by transformers' `smart_resize`."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    h, w = smart_resize(height, width, factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    return h, w, (h // 14) * (w // 14)


def hf_worker(args: argparse.Namespace) -> None:
    """transformers' greedy tokens, run time and peak RSS for the one image; one JSON object."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    torch.set_num_threads(args.threads)
    processor = AutoProcessor.from_pretrained(args.model, use_fast=False)
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=torch.float32,
                                                        attn_implementation="sdpa").eval()
    tok = processor.tokenizer
    eos = sorted({tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")})
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    prompt = processor.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=True)
    kw = dict(do_sample=False, num_beams=1, eos_token_id=eos, pad_token_id=eos[0])
    with torch.inference_mode():
        warm = processor(text=[prompt], images=[Image.new("RGB", (56, 56), (128, 64, 32))], return_tensors="pt")
        model.generate(**warm, max_new_tokens=1, **kw)
        t0 = time.perf_counter()
        image = Image.open(args.image).convert("RGB")
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
        t1 = time.perf_counter()
        gen = model.generate(**inputs, max_new_tokens=args.max_new_tokens, output_logits=True,
                             return_dict_in_generate=True, **kw)
        wall = time.perf_counter() - t0
    n_in = inputs["input_ids"].shape[1]
    ids = []
    for t in gen.sequences[0, n_in:].tolist():
        ids.append(t)
        if t in eos:
            break
    logits = torch.stack(gen.logits, dim=1)[0, : len(ids)].tolist()
    print(json.dumps({"wall_secs": wall, "preprocess_secs": t1 - t0, "prompt_tokens": n_in,
                      "grid_thw": inputs["image_grid_thw"][0].tolist(),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "items": [{"file": os.path.basename(args.image), "token_ids": ids, "logits": logits}]}))


def timed_json(cmd: list[str], env: dict) -> tuple[dict, float]:
    """Run `cmd`, parse the last stdout line as JSON; also the process's wall seconds."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1]), secs


@contextlib.contextmanager
def bench_lock(path: str | None):
    """An exclusive flock(2) on `path` (as flock(1) takes it) for the duration; none when None."""
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1400x1000,2000x1500,3584x3584", help="WIDTHxHEIGHT,...")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=4)
    ap.add_argument("--vision-depth", type=int, default=3)
    ap.add_argument("--text-layers", type=int, default=3)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    ap.add_argument("--bin", default=os.path.join(target, "release", "verisample"))
    ap.add_argument("--keep", help="build (or reuse) the checkpoint under this folder and keep it")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--lock", default="/tmp/verisample-bench.lock", help="flock this file per size ('' = none)")
    ap.add_argument("--tie-tol", type=float, default=1e-3)
    ap.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--image", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_worker:
        hf_worker(args)
        return
    if not os.path.exists(args.bin):
        sys.exit(f"no binary at {args.bin}: run `cargo build --release`")
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    root = args.keep or tempfile.mkdtemp(prefix="verisample-large-")
    mdir = checkpoint(root, args.vision_depth, args.text_layers)
    work = tempfile.mkdtemp(prefix="verisample-large-images-")
    results, bad = [], 0
    try:
        for width, height in sizes:
            folder = os.path.join(work, f"{width}x{height}")
            os.makedirs(folder)
            image = os.path.join(folder, f"synthetic_{width}x{height}.png")
            make_image(width, height, image)
            rh, rw, patches = patches_of(width, height)
            print(f"# {width}x{height}: smart_resize -> {rw}x{rh}, {patches} patches", flush=True)
            with bench_lock(args.lock):
                load = [os.getloadavg()[0]]
                report, ours_proc = timed_json(
                    [args.bin, "-q", "bench", "--json", "--model", mdir, "--images", folder, "--question", QUESTION,
                     "--warmup", "0", "--limit", "1", "--max-batch", "1",
                     "--max-new-tokens", str(args.max_new_tokens)], env)
                first = report["passes"][0]  # one measured pass, no warm-up: the one image once
                ours = {"wall_secs": first["wall_s"], "peak_rss_bytes": first["peak_rss_bytes"],
                        "items": report["items"], "metrics": first}
                load.append(os.getloadavg()[0])
                hf, hf_proc = timed_json(
                    [sys.executable, os.path.abspath(__file__), "--hf-worker", "--model", mdir, "--image", image,
                     "--threads", str(args.threads), "--max-new-tokens", str(args.max_new_tokens)], env)
                load.append(os.getloadavg()[0])
            grid = hf["grid_thw"]
            hf_patches = grid[0] * grid[1] * grid[2]
            o, h = ours["items"][0], hf["items"][0]
            kind, detail = compare(o, h, args.tie_tol)
            same_prompt = o["prompt_tokens"] == hf["prompt_tokens"] and hf_patches == patches
            bad += kind == "MISMATCH" or not same_prompt
            print(f"# {width}x{height}: tokens {kind} {detail} ours {o['token_ids']} hf {h['token_ids']}; "
                  f"prompt tokens ours {o['prompt_tokens']} hf {hf['prompt_tokens']}, hf grid_thw {grid}; "
                  f"load average {' / '.join(f'{x:.2f}' for x in load)}", flush=True)
            h.pop("logits", None)
            results.append({"size": f"{width}x{height}", "resized": f"{rw}x{rh}", "patches": patches,
                            "hf_patches": hf_patches, "tokens": kind, "detail": detail, "load_average": load,
                            "ours": {**ours, "process_secs": ours_proc}, "hf": {**hf, "process_secs": hf_proc}})
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    print(f"\nthreads: {args.threads}; f32; {args.max_new_tokens} new tokens; checkpoint {mdir}\n")
    print("| image | patches | engine | run s | process s | peak RSS MiB | tokens |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        o, h = r["ours"], r["hf"]
        for name, e in (("transformers", h), ("verisample", o)):
            print(f"| {r['size']} | {r['patches']:,} | {name} | {e['wall_secs']:.1f} | {e['process_secs']:.1f} "
                  f"| {e['peak_rss_bytes'] / 2**20:,.0f} | {r['tokens']} |")
        print(f"| {r['size']} | | **hf / ours** (speed-up; RSS ours / hf) | **{h['wall_secs'] / o['wall_secs']:.2f}×** "
              f"| {h['process_secs'] / o['process_secs']:.2f}× | **{o['peak_rss_bytes'] / h['peak_rss_bytes']:.2f}×** | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "max_new_tokens": args.max_new_tokens, "checkpoint": mdir,
                       "results": results}, f, indent=1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
