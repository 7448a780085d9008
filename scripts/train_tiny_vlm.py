#!/usr/bin/env python3
"""Train the tiny Qwen2-VL-architecture demo/test VLM of verisample (CPU, fixed seeds).

Two tasks, one model (``transformers.Qwen2VLForConditionalGeneration``):

* reading: the OrandCar question about a handwritten amount image -> ``<think>\\ndigits: 2 2 5 0\\n
  </think>\\n\\n2250``. Images: the OrandCar-A train crops (augmented), new strings composed
  from their per-digit crops, and procedural strings from ``make_sample.render_amount``.
* judging: text-only grading prompt (``tiny_tokenizer.JUDGE_TEMPLATE``), pairs made by rule:
  same digit sequence -> CORRECT, different -> WRONG, reference without digits -> UNSURE;
  the trace lists both digit sequences with position tags and a per-position check line
  (``tiny_tokenizer.judge_trace``).

Two stages with fixed step counts (see ``train``): A trains the vision tower through an
auxiliary CTC head over patch columns (not saved) while the text model learns the judge
task; B trains everything on all three losses.

Data generators live in ``tiny_vlm_data.py``.

Usage:
  python scripts/train_tiny_vlm.py train --out DIR [--work /tmp/tvlm]   # the committed run: all defaults
  python scripts/train_tiny_vlm.py eval  --ckpt DIR    # writes eval_results.json into DIR
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
CTC_CLASSES = 11  # blank + 10 digits
CTC_PER_COLUMN = 2  # CTC time steps per 14-px patch column (7 px each)


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


def ctc_log_probs(head: torch.nn.Linear, hidden: torch.Tensor, grid_thw: torch.Tensor) -> list[torch.Tensor]:
    """CTC log-probabilities per image from the vision tower's patch features (before the merger).

    ``hidden`` [patches, embed_dim] is in the processor's patch order (merge blocks row-major
    over [h/2, w/2], each block 2x2 row-major). Each patch column's features are averaged over
    the rows and mapped by ``head`` to ``CTC_PER_COLUMN`` time steps of ``CTC_CLASSES`` classes
    (0 = blank, 1 + d = digit d), so an image with ``w`` patch columns gives
    [CTC_PER_COLUMN * w, CTC_CLASSES]. Recurrent-free CTC over columns is the CRNN recipe for
    text lines (Shi et al., 2015); here it only trains the vision tower and is not saved.
    """
    out = []
    sizes = [int(t.prod()) for t in grid_thw]
    for h, thw in zip(torch.split(hidden, sizes), grid_thw):
        _, gh, gw = (int(x) for x in thw)
        cols = h.view(gh // 2, gw // 2, 2, 2, -1).permute(0, 2, 1, 3, 4).reshape(gh, gw, -1).mean(0)
        out.append(head(cols).view(gw * CTC_PER_COLUMN, CTC_CLASSES).log_softmax(-1))
    return out


def ctc_loss_fn(log_probs: list[torch.Tensor], labels: list[str]) -> torch.Tensor:
    """Mean CTC loss (per target length) of per-image log-probs against digit strings."""
    lengths = torch.tensor([lp.shape[0] for lp in log_probs])
    targets = torch.tensor([1 + int(c) for lab in labels for c in lab], dtype=torch.long)
    target_lengths = torch.tensor([len(lab) for lab in labels])
    padded = torch.nn.utils.rnn.pad_sequence(log_probs)  # [T, B, C]
    return F.ctc_loss(padded, targets, lengths, target_lengths, blank=0, zero_infinity=True)


def ctc_greedy(log_probs: torch.Tensor) -> str:
    """Best-path decoding: collapse repeats, drop blanks."""
    out, prev = [], 0
    for k in log_probs.argmax(-1).tolist():
        if k != prev and k != 0:
            out.append(str(k - 1))
        prev = k
    return "".join(out)


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
        gen = greedy(model, enc.judge_prompt(ref, cand), max_new_tokens=64, eos=eos)
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


def reading_batch(data, enc, rng, batch, p_real):
    """Sample a reading batch -> (seqs, pixel_values, grid_thw [B, 3], digit labels).

    A share ``p_real`` of real augmented train crops; the rest are strings of 1-7 digits,
    60 % composed from real digit crops and 40 % procedural (the bundled sample's style).
    10 % of the responses are without thinking.
    """
    ims, labels = [], []
    for _ in range(batch):
        u = rng.random()
        if u < p_real:
            (im, _), label = data.real(rng)
        elif u < p_real + (1 - p_real) * 0.6:
            (im, _), label = data.composed(rng, rng.randint(1, 7))
        else:
            (im, _), label = data.synthetic(rng, rng.randint(1, 7))
        ims.append(im)
        labels.append(label)
    out = enc.ip(images=ims, return_tensors="pt")
    grid = out["image_grid_thw"]
    seqs = []
    for thw, label in zip(grid, labels):
        think = rng.random() >= 0.1
        seqs.append((enc.read_prompt_ids(int(thw.prod()) // 4, think), enc.response(tt.reading_trace(label), label, think)))
    return seqs, out["pixel_values"], grid, labels


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
    """Two stages, one optimizer, fixed step counts (no wall-clock dependence).

    A (``--vision-steps``): the vision tower learns digits through the CTC head
    (:func:`ctc_log_probs`) while the text model learns the judge task.
    B (``--steps``): everything jointly: reading LM loss on the response tokens +
    ``--aux-w`` x CTC + ``--judge-w`` x judge LM loss. Each stage has its own linear warm-up
    and cosine decay to 5 % of its peak learning rate.
    """
    torch.set_num_threads(args.threads)
    seed_all(args.seed)
    from transformers import AutoTokenizer, Qwen2VLForConditionalGeneration
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    tokdir = os.path.join(args.work, "tok")
    tok_info = tt.build_tokenizer(tokdir)
    tokenizer = AutoTokenizer.from_pretrained(tokdir)
    config = make_config(tok_info)
    if args.init:
        # continue from a saved checkpoint (weights only; optimizer and CTC head start fresh)
        model = Qwen2VLForConditionalGeneration.from_pretrained(args.init, dtype=torch.float32)
    else:
        model = Qwen2VLForConditionalGeneration(config)
    model.train()
    ip = make_image_processor()
    enc = Encoder(tokenizer, ip, config)
    ctc_head = torch.nn.Linear(config.vision_config.embed_dim, CTC_CLASSES * CTC_PER_COLUMN)
    print(f"parameters: {sum(p.numel() for p in model.parameters())}", flush=True)

    data = Data(shared_data_dir())
    val_items = [(Image.open(os.path.join(data.root, r["file"])).convert("RGB"), r["label"]) for r in data.val]
    syn_items = sample_items(32, 4242)
    jrng = random.Random(999)
    judge_eval = [judge_pair(jrng) for _ in range(200)]

    params = list(model.parameters()) + list(ctc_head.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8)

    def lr_at(step):
        if step < args.vision_steps:
            peak, i, n = args.vision_lr, step, args.vision_steps
        else:
            peak, i, n = args.lr, step - args.vision_steps, args.steps
        if i < args.warmup:
            return peak * (i + 1) / args.warmup
        p = (i - args.warmup) / max(1, n - args.warmup)
        return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    @torch.no_grad()
    def ctc_val_acc():
        model.eval()
        ok = 0
        for i in range(0, len(val_items), 26):
            chunk = val_items[i : i + 26]
            out = ip(images=[im for im, _ in chunk], return_tensors="pt")
            vis = model.model.visual(out["pixel_values"], grid_thw=out["image_grid_thw"])
            lps = ctc_log_probs(ctc_head, vis.last_hidden_state, out["image_grid_thw"])
            ok += sum(ctc_greedy(lp) == lab for lp, (_, lab) in zip(lps, chunk))
        model.train()
        return ok / len(val_items)

    rng = random.Random(args.seed)
    log = open(os.path.join(args.work, "log.jsonl"), "a")
    t0 = time.time()
    total = args.vision_steps + args.steps
    for step in range(total):
        stage_b = step >= args.vision_steps
        lr = lr_at(step)
        for g in opt.param_groups:
            g["lr"] = lr
        seqs, pixel_values, grid, labels = reading_batch(data, enc, rng, args.batch if stage_b else args.vbatch,
                                                         args.p_real)
        vis = model.model.visual(pixel_values, grid_thw=grid)
        ctc = ctc_loss_fn(ctc_log_probs(ctc_head, vis.last_hidden_state, grid), labels)
        rec = {"stage": "B" if stage_b else "A", "step": step, "lr": lr, "ctc": ctc.item()}
        loss = (args.aux_w if stage_b else 1.0) * ctc
        if stage_b:
            sizes = [int(t.prod()) // 4 for t in grid]
            ids, att, lab = collate(seqs, enc.pad_id)
            mm = {"image": BaseModelOutputWithPooling(pooler_output=torch.split(vis.pooler_output, sizes))}
            out = model(input_ids=ids, attention_mask=att, image_grid_thw=grid,
                        mm_token_type_ids=(ids == enc.image_id).int(), mm_encoder_outputs=mm)
            read_loss = lm_loss(out.logits, lab)
            loss = loss + read_loss
            rec["read"] = read_loss.item()
        if step % args.judge_every == 0:
            judge_loss = judge_step_loss(model, enc, rng, args.jbatch, args.verdict_w)
            loss = loss + args.judge_w * judge_loss
            rec["judge"] = judge_loss.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        rec["t"] = round(time.time() - t0, 1)
        last = step + 1 == total
        if (step + 1) % args.eval_every == 0 or last:
            te = time.time()
            rec["ctc_val_acc"] = ctc_val_acc()
            if stage_b:
                nval = len(val_items) if last else args.quick_val
                acc, texts = eval_reading(model, enc, val_items[:nval], 32)
                sacc, _ = eval_reading(model, enc, syn_items[:16], 32)
                rec.update({"val_acc": acc, "val_n": nval, "syn_acc": sacc, "example": texts[:2]})
            rec["judge_acc"] = eval_judge(model, enc, judge_eval[: args.quick_judge])
            rec["eval_s"] = round(time.time() - te, 1)
        if step % 20 == 0 or "eval_s" in rec:
            print(json.dumps(rec), flush=True)
        log.write(json.dumps(rec) + "\n")
        log.flush()
    save_checkpoint(model, args.out, ip)
    print(f"done in {time.time() - t0:.0f}s", flush=True)


# ----------------------------------------------------------------------------- final eval

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
            out = model.generate(**inputs, max_new_tokens=64, do_sample=False, eos_token_id=eos, pad_token_id=eos[1])
        gen = out[0, inputs["input_ids"].shape[1]:].tolist()
        return inputs["input_ids"].shape[1], gen, tok.decode(gen, skip_special_tokens=False)

    versions = {"transformers": transformers.__version__, "torch": torch.__version__}
    results = {"versions": versions}
    # Accuracies only: the reference outputs the Rust parity tests read are made by
    # scripts/make_default_reference.py into tests/fixtures/default_model.
    ok = 0
    for r in val:
        _, _, text = run(Image.open(os.path.join(data_root, r["file"])).convert("RGB"))
        stripped = text.replace("<|im_end|>", "").replace("<|endoftext|>", "")
        ok += alnum(final_answer(stripped)) == alnum(r["label"])
    results["val_exact"] = ok / len(val)
    results["val_n"] = len(val)
    import pyarrow.parquet as pq

    sample_path = os.path.join(REPO, "assets", "sample", "data", "train-00000-of-00001.parquet")
    if os.path.exists(sample_path):
        ok = 0
        rows = pq.read_table(sample_path).to_pylist()[: args.limit or None]
        for row in rows:
            _, _, text = run(Image.open(io.BytesIO(row["image"]["bytes"])).convert("RGB"))
            stripped = text.replace("<|im_end|>", "").replace("<|endoftext|>", "")
            ok += alnum(final_answer(stripped)) == alnum(row["qa"][0]["answer"])
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
            out = model.generate(**ids, max_new_tokens=64, do_sample=False, eos_token_id=eos, pad_token_id=eos[1])
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

    recs = [json.loads(l) for l in open(log_path)]
    b_start = next((r["step"] for r in recs if r.get("stage") == "B"), None)

    def smooth(key, k=50):
        # steps without this loss (stage A has no reading loss) are left out
        have = [r for r in recs if key in r]
        v = np.array([r[key] for r in have], dtype=np.float64)
        c = np.concatenate([[0.0], np.cumsum(v)])
        i = np.arange(len(v))
        lo = np.maximum(0, i + 1 - k)
        return np.array([r["step"] for r in have]), (c[i + 1] - c[lo]) / (i + 1 - lo)  # trailing mean

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for key, name in (("ctc", "vision CTC loss (per image)"), ("read", "reading LM loss"),
                      ("judge", "judge LM loss")):
        a1.plot(*smooth(key), label=name)
    a1.set_yscale("log")
    a1.set_xlabel("step")
    a1.set_ylabel("loss (50-step mean)")
    a2.set_xlabel("step")
    a2.set_ylabel("accuracy (greedy)")
    ev = [r for r in recs if "eval_s" in r]
    series = (("ctc_val_acc", "o-", "val exact, CTC head (78)"), ("val_acc", "s-", "val exact, LM answer (78)"),
              ("syn_acc", "d-", "sample-style exact, LM (16)"), ("judge_acc", "^-", "judge agreement with rule (40)"))
    for key, style, name in series:
        pts = [(r["step"] + 1, r[key]) for r in ev if key in r]
        if pts:
            a2.plot(*zip(*pts), style, label=name)
    for ax in (a1, a2):
        if b_start is not None:
            ax.axvline(b_start, color="grey", lw=0.8, ls="--")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    a2.set_ylim(0, 1)
    fig.suptitle("stage A (vision CTC + judge) | stage B (all losses), dashed line = start of B", fontsize=9)
    fig.tight_layout()
    fig.savefig(out_png, dpi=90)


def main(argv):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--vision-steps", type=int, default=3000, help="stage A steps (vision CTC + judge)")
    t.add_argument("--steps", type=int, default=3600, help="stage B steps (all losses)")
    t.add_argument("--vbatch", type=int, default=32, help="images per stage A step")
    t.add_argument("--batch", type=int, default=32, help="images per stage B step")
    t.add_argument("--jbatch", type=int, default=16, help="judge prompts per judge step")
    t.add_argument("--judge-every", type=int, default=1, help="a judge batch every N steps")
    t.add_argument("--vision-lr", type=float, default=1e-3, help="stage A peak learning rate")
    t.add_argument("--lr", type=float, default=1e-3, help="stage B peak learning rate")
    t.add_argument("--warmup", type=int, default=100, help="linear warm-up steps of each stage")
    t.add_argument("--aux-w", type=float, default=0.5, help="CTC loss weight in stage B")
    t.add_argument("--judge-w", type=float, default=1.0)
    t.add_argument("--verdict-w", type=float, default=1.0, help="loss weight of the judge verdict token")
    t.add_argument("--p-real", type=float, default=0.5, help="share of real train crops per reading batch")
    t.add_argument("--eval-every", type=int, default=500)
    t.add_argument("--quick-val", type=int, default=78)
    t.add_argument("--quick-judge", type=int, default=40, help="held-out judge pairs in the periodic evals")
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--init", default=None, help="start from this checkpoint's weights")
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
