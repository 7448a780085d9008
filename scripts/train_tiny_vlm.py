#!/usr/bin/env python3
"""Train the tiny Qwen2-VL-architecture demo/test VLM of verisample (CPU, fixed seeds).

Two tasks, one model (``transformers.Qwen2VLForConditionalGeneration``):

* reading: the OrandCar question about a handwritten amount image -> ``<think>\\ndigits: 2 2 5 0\\n
  </think>\\n\\n2250``. Images: the OrandCar-A train crops (augmented), new strings composed
  from their per-digit boxes, and procedural strings from ``make_sample.render_amount``.
  An auxiliary per-merged-token digit classifier (not saved) supervises the vision tower with
  the digit boxes (the column of each merged token -> digit under it, or "none").
  Curriculum: short strings first, the maximum length grows over the first 30 % of steps.
* judging: text-only grading prompt (``tiny_tokenizer.JUDGE_TEMPLATE``), pairs made by rule:
  same digit sequence -> CORRECT, different -> WRONG, reference without digits -> UNSURE.

Data generators live in ``tiny_vlm_data.py``.

Usage:
  python scripts/train_tiny_vlm.py train --vision-steps 200 --steps 300 --out DIR [--init CKPT] [--work /tmp/tvlm]
  python scripts/train_tiny_vlm.py eval  --ckpt DIR    # writes eval_results.json and
                                                       # reference_{val,sample}_outputs.jsonl into DIR
  python scripts/train_tiny_vlm.py plot  --log LOG.jsonl --png curves.png
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_sample  # noqa: E402
import tiny_tokenizer as tt  # noqa: E402

MIN_PIXELS = 56 * 168  # 9408: a 54x155 crop becomes 56x168 (2x6 merged tokens, 4x12 patches)
MAX_PIXELS = 84 * 336  # 28224: at most 36 merged tokens per image
NONE_CLASS = 10
CONT_CLASS = 11
N_AUX = 12


def shared_data_dir() -> str:
    env = os.environ.get("VERISAMPLE_SHARED_DATA")
    if env:
        return env
    for cand in (os.path.join(REPO, "..", "..", "shared", "data"), os.path.join(REPO, "..", "shared", "data")):
        if os.path.isdir(cand):
            return os.path.abspath(cand)
    raise SystemExit("no shared data directory (set VERISAMPLE_SHARED_DATA)")


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------- model

def make_config(tok_info: dict):
    from transformers import Qwen2VLConfig

    ids = tok_info["special_ids"]
    text = dict(
        vocab_size=tok_info["vocab_size"],
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=3,
        num_key_value_heads=1,
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 12, 12]},
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        tie_word_embeddings=True,
        use_cache=True,
    )
    vision = dict(
        depth=4,
        embed_dim=128,
        hidden_size=192,
        hidden_act="quick_gelu",
        mlp_ratio=2,
        num_heads=4,
        in_channels=3,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
    )
    return Qwen2VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )


def make_image_processor():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)


from tiny_vlm_data import Data, judge_pair, judge_text, only_digits  # noqa: E402


# ----------------------------------------------------------------------------- encoding

class Encoder:
    def __init__(self, tokenizer, image_processor, config):
        self.tok = tokenizer
        self.ip = image_processor
        self.image_id = config.image_token_id
        self.pad_id = tokenizer.pad_token_id
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": tt.ORAND_QUESTION}]}]
        self.read_prompt = {}
        for think in (True, False):
            s = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=think)
            a, b = s.split("<|image_pad|>")
            self.read_prompt[think] = (self._ids(a), self._ids(b))

    def _ids(self, s: str) -> list[int]:
        return self.tok(s, add_special_tokens=False)["input_ids"]

    def judge_prompt(self, ref, cand, think=True) -> list[int]:
        msgs = [{"role": "user", "content": judge_text(ref, cand)}]
        s = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=think)
        return self._ids(s)

    def response(self, trace: str, answer: str, think: bool) -> list[int]:
        s = ("<think>\n" + trace + "\n</think>\n\n" + answer) if think else answer
        return self._ids(s + "<|im_end|>")

    def image(self, im: Image.Image):
        out = self.ip(images=[im], return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"][0]

    def read_prompt_ids(self, n_img_tokens: int, think: bool = True) -> list[int]:
        a, b = self.read_prompt[think]
        return a + [self.image_id] * n_img_tokens + b


def aux_labels(boxes, orig_wh, grid_thw) -> torch.Tensor:
    """Per vision patch (in the processor's patch order): [digit class, centre flag].

    Patch columns (14 px in the resized image) inside a digit box get that digit (0-9; the
    box whose centre is nearest wins), columns outside every box get NONE_CLASS; the column
    holding a box centre gets centre flag 1. All rows of a column share its labels. Patch
    order is the Qwen2-VL one: merge blocks row-major over [h/2, w/2], each block 2x2
    row-major. Returns a long tensor [num_patches, 2].
    """
    W, _ = orig_wh
    gh, gw = int(grid_thw[1]), int(grid_thw[2])
    col = [NONE_CLASS] * gw
    dist = [1e9] * gw
    centre = [0] * gw
    for d, (x, y, w, h) in boxes:
        for c in range(gw):
            xc = (c + 0.5) / gw * W
            if x <= xc <= x + w and abs(x + w / 2 - xc) < dist[c]:
                col[c], dist[c] = d, abs(x + w / 2 - xc)
        cc = min(gw - 1, max(0, int((x + w / 2) / W * gw)))
        centre[cc] = 1
        if col[cc] == NONE_CLASS:
            col[cc] = d
    lab = []
    for br in range(gh // 2):
        for bc in range(gw // 2):
            for wr in range(2):
                for wc in range(2):
                    lab.append((col[bc * 2 + wc], centre[bc * 2 + wc]))
    return torch.tensor(lab, dtype=torch.long)


def aux_loss_fn(logits, labels):
    """logits [patches, 12] (11 digit/none classes + centre logit), labels [patches, 2]."""
    ce = F.cross_entropy(logits[:, :CONT_CLASS], labels[:, 0])
    bce = F.binary_cross_entropy_with_logits(logits[:, CONT_CLASS], labels[:, 1].float())
    return ce + bce


def collate(seqs, pad_id):
    """seqs: list of (prompt_ids, response_ids) -> input_ids, attention_mask, labels (right padded)."""
    L = max(len(p) + len(r) for p, r in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), L), dtype=torch.long)
    lab = torch.full((len(seqs), L), -100, dtype=torch.long)
    for i, (p, r) in enumerate(seqs):
        n = len(p) + len(r)
        ids[i, :n] = torch.tensor(p + r)
        att[i, :n] = 1
        lab[i, len(p) : n] = torch.tensor(r)
    return ids, att, lab


def lm_loss(logits, labels):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)


# ----------------------------------------------------------------------------- evaluation

def alnum(s: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]", "", (s or "").lower())


def final_answer(text: str) -> str:
    if "</think>" in text:
        text = text.split("</think>", 1)[1]
    return text.strip()


def parse_verdict(text: str) -> str:
    import re

    ans = final_answer(text)
    lines = [l for l in ans.splitlines() if l.strip()]
    if not lines:
        return "UNSURE"
    words = re.findall(r"\b(CORRECT|WRONG|UNSURE)\b", lines[-1])
    return words[0] if len(words) == 1 else "UNSURE"


@torch.no_grad()
def greedy(model, ids, pixel_values=None, grid_thw=None, image_id=None, max_new_tokens=24, eos=None):
    input_ids = torch.tensor([ids])
    kw = {}
    if pixel_values is not None:
        kw = dict(pixel_values=pixel_values, image_grid_thw=grid_thw.view(1, 3),
                  mm_token_type_ids=(input_ids == image_id).int())
    out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=eos, pad_token_id=eos, **kw)
    return out[0, len(ids):].tolist()


def eval_reading(model, enc, items, max_new_tokens=24):
    """items: list of (PIL image, label). -> accuracy, list of decoded texts."""
    model.eval()
    ok, texts = 0, []
    eos = enc.tok.convert_tokens_to_ids("<|im_end|>")
    for im, label in items:
        pv, thw = enc.image(im)
        n = int(thw.prod()) // 4
        gen = greedy(model, enc.read_prompt_ids(n), pv, thw, enc.image_id, max_new_tokens, eos)
        text = enc.tok.decode(gen, skip_special_tokens=True)
        texts.append(text)
        ok += alnum(final_answer(text)) == alnum(label)
    model.train()
    return ok / max(len(items), 1), texts


def eval_judge(model, enc, pairs):
    model.eval()
    ok = 0
    eos = enc.tok.convert_tokens_to_ids("<|im_end|>")
    for ref, cand, verdict in pairs:
        gen = greedy(model, enc.judge_prompt(ref, cand), max_new_tokens=32, eos=eos)
        ok += parse_verdict(enc.tok.decode(gen, skip_special_tokens=True)) == verdict
    model.train()
    return ok / max(len(pairs), 1)


def sample_items(count: int, seed: int):
    """The bundled-sample style eval set: (image, digits) from make_sample's generator and seed."""
    rng = random.Random(seed)
    items = []
    for _ in range(count):
        text = make_sample.random_amount_text(rng)
        im, _ = make_sample.render_amount(rng, text)
        items.append((im.convert("RGB"), make_sample_digits(text)))
    return items


def make_sample_digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


# ----------------------------------------------------------------------------- training

def save_checkpoint(model, out_dir: str, image_processor) -> None:
    from transformers import GenerationConfig

    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    image_processor.save_pretrained(out_dir)
    tt.build_tokenizer(out_dir)
    ids = json.load(open(os.path.join(out_dir, "config.json")))
    gc = GenerationConfig(bos_token_id=model.config.text_config.bos_token_id,
                          eos_token_id=[model.config.text_config.eos_token_id, model.config.text_config.pad_token_id],
                          pad_token_id=model.config.text_config.pad_token_id, do_sample=False)
    gc.save_pretrained(out_dir)
    del ids
    add_legacy_config_keys(os.path.join(out_dir, "config.json"))
    pp = os.path.join(out_dir, "preprocessor_config.json")
    pc = json.load(open(pp))
    pc["min_pixels"], pc["max_pixels"] = MIN_PIXELS, MAX_PIXELS  # Hub Qwen2-VL spelling, same values as size
    with open(pp, "w") as f:
        json.dump(pc, f, indent=2, sort_keys=True)
        f.write("\n")


def add_legacy_config_keys(path: str) -> None:
    """Also write the flat (transformers 4.x / Hub Qwen2-VL) keys next to ``text_config``.

    Loaders written against published Qwen2-VL checkpoints read ``hidden_size``,
    ``rope_theta``, ``rope_scaling.mrope_section`` ... at the top level and ``in_chans``
    in ``vision_config``; transformers 5 reads ``text_config``. Both describe the same model.
    """
    cfg = json.load(open(path))
    t = cfg["text_config"]
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps", "bos_token_id",
              "eos_token_id", "pad_token_id", "use_sliding_window", "sliding_window", "max_window_layers",
              "attention_dropout", "use_cache", "initializer_range"):
        if k in t:
            cfg.setdefault(k, t[k])
    rp = t["rope_parameters"]
    cfg.setdefault("rope_theta", rp["rope_theta"])
    cfg.setdefault("rope_scaling", {"type": "mrope", "rope_type": "default", "mrope_section": rp["mrope_section"]})
    cfg["vision_config"].setdefault("in_chans", cfg["vision_config"]["in_channels"])
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def reading_batch(data, enc, rng, batch, max_len, p_real):
    """Sample a reading batch -> (seqs, pixel_values, grid_thw [B,3], aux labels per patch)."""
    seqs, pvs, thws, auxl = [], [], [], []
    for _ in range(batch):
        think = rng.random() >= 0.1
        u = rng.random()
        if u < p_real:
            (im, boxes), label = data.real(rng)
        else:
            n = rng.randint(1, max_len)
            if u < p_real + (1 - p_real) * 0.6:
                (im, boxes), label = data.composed(rng, n)
            else:
                (im, boxes), label = data.synthetic(rng, n)
        pv, thw = enc.image(im)
        pvs.append(pv)
        thws.append(thw)
        auxl.append(aux_labels(boxes, im.size, thw))
        ntok = int(thw.prod()) // 4
        seqs.append((enc.read_prompt_ids(ntok, think), enc.response(tt.reading_trace(label), label, think)))
    return seqs, torch.cat(pvs), torch.stack(thws), torch.cat(auxl)


def judge_step_loss(model, enc, rng, batch, verdict_w=1.0):
    """LM loss of one text-only judge batch (10 % without thinking).

    ``verdict_w`` multiplies the loss of the verdict token (the first answer token after the
    trace) relative to the trace tokens; the loss is the weighted mean over response tokens.
    """
    jseqs, vpos = [], []
    for _ in range(batch):
        think = rng.random() >= 0.1
        ref, cand, verdict = judge_pair(rng)
        p = enc.judge_prompt(ref, cand, think)
        r = enc.response(tt.judge_trace(only_digits(ref), only_digits(cand)), verdict, think)
        vlen = len(enc._ids(verdict + "<|im_end|>"))
        jseqs.append((p, r))
        vpos.append(len(p) + len(r) - vlen)  # position of the verdict's first token
    jids, jatt, jlab = collate(jseqs, enc.pad_id)
    jout = model(input_ids=jids, attention_mask=jatt)
    if verdict_w == 1.0:
        return lm_loss(jout.logits, jlab)
    logits, labels = jout.logits[:, :-1], jlab[:, 1:]
    tok_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100,
                               reduction="none").view(labels.shape)
    w = (labels != -100).float()
    for i, vp in enumerate(vpos):
        w[i, vp - 1] *= verdict_w  # label at shifted index vp-1 is the token at vp
    return (tok_loss * w).sum() / w.sum()


def train(args):
    torch.set_num_threads(args.threads)
    seed_all(args.seed)
    from transformers import AutoTokenizer, Qwen2VLForConditionalGeneration
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    tokdir = os.path.join(args.work, "tok")
    tok_info = tt.build_tokenizer(tokdir)
    tokenizer = AutoTokenizer.from_pretrained(tokdir)
    config = make_config(tok_info)
    if args.init:
        # continue from a saved checkpoint (weights only; optimizer and aux head start fresh)
        model = Qwen2VLForConditionalGeneration.from_pretrained(args.init, dtype=torch.float32)
    else:
        model = Qwen2VLForConditionalGeneration(config)
    model.train()
    ip = make_image_processor()
    enc = Encoder(tokenizer, ip, config)
    aux_head = torch.nn.Linear(config.vision_config.embed_dim, N_AUX)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"parameters: {nparam}", flush=True)

    data = Data(shared_data_dir())
    val_items = [(Image.open(os.path.join(data.root, r["file"])).convert("RGB"), r["label"]) for r in data.val]
    syn_items = sample_items(32, 4242)
    jrng = random.Random(999)
    judge_eval = [judge_pair(jrng) for _ in range(200)]

    params = list(model.parameters()) + list(aux_head.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    rng = random.Random(args.seed)
    log = open(os.path.join(args.work, "log.jsonl"), "a")
    t0 = time.time()
    # ---- stage A: vision tower + aux head only (per-patch digit classes from the boxes)
    # The judge task (text only) is trained alongside from the start.
    vparams = list(model.model.visual.parameters()) + list(aux_head.parameters())
    vids = {id(p) for p in vparams}
    tparams = [p for p in model.parameters() if id(p) not in vids]
    vopt = torch.optim.AdamW([{"params": vparams}, {"params": tparams}], lr=args.vision_lr, betas=(0.9, 0.98),
                             weight_decay=0.05)
    for step in range(args.vision_steps):
        lr = args.vision_lr * min(1.0, (step + 1) / 50)
        for g in vopt.param_groups:
            g["lr"] = lr
        max_len = 2 + int(5 * min(1.0, step / max(1, args.vision_steps * 0.5)))
        p_real = 0.4 if step > args.vision_steps * 0.2 else 0.0
        _, pixel_values, grid, auxl = reading_batch(data, enc, rng, args.vbatch, max_len, p_real)
        vis = model.model.visual(pixel_values, grid_thw=grid)
        logits = aux_head(vis.last_hidden_state)
        aux_loss = aux_loss_fn(logits, auxl)
        judge_loss = judge_step_loss(model, enc, rng, args.jbatch)
        vopt.zero_grad(set_to_none=True)
        (aux_loss + judge_loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        vopt.step()
        acc = (logits[:, :CONT_CLASS].argmax(-1) == auxl[:, 0])[auxl[:, 0] < NONE_CLASS].float().mean().item()
        rec = {"stage": "A", "step": step, "t": round(time.time() - t0, 1), "lr": lr, "aux": aux_loss.item(),
               "judge": judge_loss.item(),
               "aux_digit_acc": round(acc, 4), "max_len": max_len}
        if step % 10 == 0:
            print(json.dumps(rec), flush=True)
        log.write(json.dumps(rec) + "\n")
    del vopt
    best = -1.0
    tb = time.time()
    step = 0
    while step < args.steps:
        if args.time_budget and step == 30:
            # fix the total step count once, from the measured speed (warm-up steps do not depend on it);
            # rerun with --steps N (printed) for the same schedule without a time budget.
            per = (time.time() - tb) / 30
            left = args.time_budget * 60 - (time.time() - t0)
            evals = 60.0 * args.eval_allowance
            args.steps = max(60, int((left - evals) / per))
            print(json.dumps({"fixed_steps": args.steps, "sec_per_step": round(per, 2)}), flush=True)
        prog = step / args.steps if step >= 30 else 0.0
        if args.no_curriculum:
            prog = 1.0
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        # ---- reading batch (every --read-every steps; the others are judge-only)
        max_len = 2 + int(5 * min(1.0, prog / 0.3))
        p_real = 0.0 if prog < 0.05 else min(args.p_real, args.p_real * (prog - 0.05) / 0.2)
        if step % args.read_every == 0:
            seqs, pixel_values, grid, auxl = reading_batch(data, enc, rng, args.batch, max_len, p_real)
            vis = model.model.visual(pixel_values, grid_thw=grid)
            aux_loss = aux_loss_fn(aux_head(vis.last_hidden_state), auxl)
            merged = vis.pooler_output
            sizes = [int(t.prod()) // 4 for t in grid]
            ids, att, lab = collate(seqs, enc.pad_id)
            mm = {"image": BaseModelOutputWithPooling(pooler_output=torch.split(merged, sizes))}
            out = model(input_ids=ids, attention_mask=att, image_grid_thw=grid,
                        mm_token_type_ids=(ids == enc.image_id).int(), mm_encoder_outputs=mm)
            read_loss = lm_loss(out.logits, lab)
        else:
            read_loss = aux_loss = torch.zeros(())
        # ---- judge batch
        judge_loss = judge_step_loss(model, enc, rng, args.jbatch, args.verdict_w)
        loss = read_loss + args.judge_w * judge_loss + args.aux_w * aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        rec = {"step": step, "t": round(time.time() - t0, 1), "lr": lr_at(step), "judge": judge_loss.item(),
               "max_len": max_len, "p_real": round(p_real, 3)}
        if step % args.read_every == 0:  # judge-only steps log no reading/aux loss
            rec.update({"read": read_loss.item(), "aux": aux_loss.item()})
        if step % 10 == 0:
            print(json.dumps(rec), flush=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            te = time.time()
            nval = len(val_items) if (step + 1 == args.steps or args.full_eval) else args.quick_val
            acc, texts = eval_reading(model, enc, val_items[:nval], 20)
            sacc, _ = eval_reading(model, enc, syn_items[:16], 20)
            jacc = eval_judge(model, enc, judge_eval[:args.quick_judge])
            rec.update({"val_acc": acc, "val_n": nval, "syn_acc": sacc, "judge_acc": jacc, "eval_s": round(time.time() - te, 1),
                        "example": texts[:3]})
            print(json.dumps(rec), flush=True)
            score = acc + 0.5 * jacc
            if score > best:
                best = score
                save_checkpoint(model, os.path.join(args.work, "best"), ip)
        log.write(json.dumps(rec) + "\n")
        log.flush()
        step += 1
    save_checkpoint(model, args.out, ip)
    print(f"done in {time.time() - t0:.0f}s", flush=True)


# ----------------------------------------------------------------------------- final eval / reference outputs

def final_eval(args):
    torch.set_num_threads(args.threads)
    import transformers
    from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

    ckpt = args.ckpt
    model = Qwen2VLForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32)
    model.eval()
    proc = AutoProcessor.from_pretrained(ckpt, use_fast=False)
    tok = proc.tokenizer
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    data_root = os.path.join(shared_data_dir(), "orand-car-a")
    recs = [json.loads(l) for l in open(os.path.join(data_root, "labels.jsonl"))]
    val = [r for r in recs if r["split"] == "val"][: args.limit or None]

    def run(im: Image.Image):
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": tt.ORAND_QUESTION}]}]
        prompt = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        inputs = proc(text=[prompt], images=[im], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=48, do_sample=False, eos_token_id=eos, pad_token_id=eos[1])
        gen = out[0, inputs["input_ids"].shape[1]:].tolist()
        return inputs["input_ids"].shape[1], gen, tok.decode(gen, skip_special_tokens=False)

    versions = {"transformers": transformers.__version__, "torch": torch.__version__}
    results = {"versions": versions}
    ok = 0
    with open(os.path.join(ckpt, "reference_val_outputs.jsonl"), "w") as f:
        for r in val:
            im = Image.open(os.path.join(data_root, r["file"])).convert("RGB")
            n, gen, text = run(im)
            stripped = text.replace("<|im_end|>", "").replace("<|endoftext|>", "")
            hit = alnum(final_answer(stripped)) == alnum(r["label"])
            ok += hit
            f.write(json.dumps({"file": r["file"], "label": r["label"], "prompt_ids_len": n, "generated_ids": gen,
                                "text": text, "correct": bool(hit), **versions}) + "\n")
    results["val_exact"] = ok / len(val)
    results["val_n"] = len(val)
    import pyarrow.parquet as pq

    sample_path = os.path.join(REPO, "assets", "sample", "data", "train-00000-of-00001.parquet")
    if os.path.exists(sample_path):
        ok = 0
        rows = pq.read_table(sample_path).to_pylist()[: args.limit or None]
        with open(os.path.join(ckpt, "reference_sample_outputs.jsonl"), "w") as f:
            for row in rows:
                im = Image.open(io.BytesIO(row["image"]["bytes"])).convert("RGB")
                n, gen, text = run(im)
                stripped = text.replace("<|im_end|>", "").replace("<|endoftext|>", "")
                hit = alnum(final_answer(stripped)) == alnum(row["qa"][0]["answer"])
                ok += hit
                f.write(json.dumps({"file": row["image"]["path"], "image_sha256": row["image_sha256"],
                                    "label": row["qa"][0]["answer"], "prompt_ids_len": n, "generated_ids": gen,
                                    "text": text, "correct": bool(hit), **versions}) + "\n")
        results["sample_exact"] = ok / len(rows)
        results["sample_n"] = len(rows)
    # judge agreement on the held-out 200 pairs
    enc_tok = tok
    jrng = random.Random(999)
    pairs = [judge_pair(jrng) for _ in range(200)][: args.limit or None]
    agree, confusion = 0, {}
    for ref, cand, verdict in pairs:
        prompt = enc_tok.apply_chat_template([{"role": "user", "content": judge_text(ref, cand)}], tokenize=False,
                                             add_generation_prompt=True)
        ids = enc_tok(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=48, do_sample=False, eos_token_id=eos, pad_token_id=eos[1])
        text = enc_tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        v = parse_verdict(text)
        agree += v == verdict
        confusion[f"{verdict}->{v}"] = confusion.get(f"{verdict}->{v}", 0) + 1
    results["judge_agreement"] = agree / len(pairs)
    results["judge_n"] = len(pairs)
    results["judge_confusion"] = confusion
    with open(os.path.join(ckpt, "eval_results.json"), "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(json.dumps(results, indent=2))


def plot_report(log_path: str, out_png: str) -> None:
    """Loss curves (smoothed) and eval accuracies from the training log -> PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in (json.loads(l) for l in open(log_path)) if "stage" not in r]

    def smooth(key, k=25):
        # steps without this loss (judge-only steps have no reading/aux loss) are left out
        have = [r for r in recs if key in r]
        v = np.array([r[key] for r in have], dtype=np.float64)
        c = np.concatenate([[0.0], np.cumsum(v)])
        i = np.arange(len(v))
        lo = np.maximum(0, i + 1 - k)
        return np.array([r["step"] for r in have]), (c[i + 1] - c[lo]) / (i + 1 - lo)  # trailing mean

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for key, name in (("read", "reading LM loss"), ("judge", "judge LM loss (run 6: verdict token x5)"),
                      ("aux", "aux digit loss")):
        a1.plot(*smooth(key), label=name)
    a1.set_yscale("log")
    a1.set_xlabel("step")
    a1.set_ylabel("loss (nats/token, 25-step mean)")
    a1.legend()
    a1.grid(alpha=0.3)
    ev = [r for r in recs if "val_acc" in r]
    if ev:
        es = [r["step"] + 1 for r in ev]
        a2.plot(es, [r["val_acc"] for r in ev], "o-", label="OrandCar-A val exact (78)")
        a2.plot(es, [r["syn_acc"] for r in ev], "s-", label="synthetic sample-style exact")
        a2.plot(es, [r["judge_acc"] for r in ev], "^-", label="judge agreement with rule")
    a2.set_ylim(0, 1)
    a2.set_xlabel("step")
    a2.set_ylabel("accuracy (greedy)")
    a2.legend()
    a2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=90)


def main(argv):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--steps", type=int, default=3000)
    t.add_argument("--batch", type=int, default=24)
    t.add_argument("--jbatch", type=int, default=8)
    t.add_argument("--vision-steps", type=int, default=300)
    t.add_argument("--vbatch", type=int, default=32)
    t.add_argument("--vision-lr", type=float, default=2e-3)
    t.add_argument("--lr", type=float, default=1.5e-3)
    t.add_argument("--warmup", type=int, default=150)
    t.add_argument("--aux-w", type=float, default=0.5)
    t.add_argument("--judge-w", type=float, default=1.0)
    t.add_argument("--p-real", type=float, default=0.45)
    t.add_argument("--eval-every", type=int, default=250)
    t.add_argument("--eval-allowance", type=float, default=8.0, help="minutes reserved for evals (time budget)")
    t.add_argument("--quick-val", type=int, default=78)
    t.add_argument("--quick-judge", type=int, default=40, help="held-out judge pairs in the periodic evals")
    t.add_argument("--read-every", type=int, default=1, help="a reading batch every N steps (others judge-only)")
    t.add_argument("--verdict-w", type=float, default=1.0, help="loss weight of the judge verdict token")
    t.add_argument("--no-curriculum", action="store_true", help="full string length and real share from step 0")
    t.add_argument("--full-eval", action="store_true")
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--init", default=None, help="start from this checkpoint's weights")
    t.add_argument("--time-budget", type=float, default=0.0, help="minutes for the whole run; fixes --steps at step 30")
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--out", default=os.path.join(REPO, "assets", "model"))
    t.add_argument("--work", default="/tmp/tvlm")
    e = sub.add_parser("eval")
    e.add_argument("--ckpt", default=os.path.join(REPO, "assets", "model"))
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--limit", type=int, default=0, help="only the first N items of each set (smoke test)")
    pl = sub.add_parser("plot")
    pl.add_argument("--log", default="/tmp/tvlm/log.jsonl")
    pl.add_argument("--png", default=os.path.join(REPO, "assets", "model", "training_curves.png"))
    a = ap.parse_args(argv)
    if a.cmd == "plot":
        plot_report(a.log, a.png)
    elif a.cmd == "train":
        os.makedirs(a.work, exist_ok=True)
        train(a)
    else:
        final_eval(a)


if __name__ == "__main__":
    main(sys.argv[1:])
