#!/usr/bin/env python3
"""Write the tiny VLM fixture checkpoints and golden outputs used by models/tests/.

For each family (qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_5, the mixture-of-experts
qwen3_vl_moe and qwen3_5_moe, and internvl) this writes, under
``models/tests/fixtures/<family>/``:

* a tiny random checkpoint in the Hugging Face layout: ``config.json`` (the nested layout
  transformers 5 writes), ``model.safetensors`` (f32), ``tokenizer.json`` +
  ``tokenizer_config.json`` + ``chat_template.jinja`` (from scripts/tiny_tokenizer.py: small
  byte-level BPE with the Qwen special tokens, chat template with images and
  ``enable_thinking``), ``preprocessor_config.json``;
* ``goldens.safetensors``: per sequence ``i`` (one real image + the OrandCar question):
  ``pixel_values_i`` [n_patches, C*T*P*P] f32, ``grid_thw_i`` [1, 3] i64, ``input_ids_i`` [L] i64,
  ``position_ids_i`` [3, L] i64, ``rope_delta_i`` [1] i64, ``logits_i`` [vocab] f32 (last
  position after prefill), ``greedy_i`` [24] i64 (greedy tokens, no stop on EOS),
  ``greedy_margin_i`` [24] f32 (top-1 minus top-2 logit at each greedy step);
* ``goldens.json``: transformers/torch versions, image processor class, image file names
  (relative to the shared data directory), question, prompt text.

Reference path: ``AutoProcessor.from_pretrained(dir, use_fast=False)`` (the PIL image
processor), ``apply_chat_template(..., add_generation_prompt=True, enable_thinking=True)``,
``processor(text=..., images=...)``, ``AutoModelForImageTextToText`` in f32 with eager
attention, a manual greedy loop over the model with its KV cache.

The MoE fixtures have 4 experts, top-2 routing and GQA; qwen3_vl_moe keeps one dense layer
(``mlp_only_layers``), qwen3_5_moe has its shared expert with the sigmoid gate (every layer
sparse, as the family defines). ``moe_intermediate_size`` is chosen so ``2 · moe_inter ≠
hidden``: the expert tensors' orientation is then unambiguous from their shapes.

internvl (``InternVLForConditionalGeneration``: InternViT + pixel shuffle + MLP projector, Qwen3
decoder with plain 1-D RoPE; see ``build_internvl``) differs: the tokenizer adds ``<img>``,
``</img>``, ``<IMG_CONTEXT>``, ``<video>`` (tokenizer_config ``extra_special_tokens`` names them);
the chat template writes an image as ``<IMG_CONTEXT>`` + newline; the GotOcr2 tiles are 112
pixels (published: 448), 16 tokens per tile, at most 6 tiles (published: 12); ``preprocessor_config.json`` and
``processor_config.json`` are written by transformers' save_pretrained; the goldens per
sequence are ``pixel_values_i`` [tiles, 3, 112, 112] f32 as the processor returns it
(thumbnail last), ``num_patches_i`` [1] i64, ``input_ids_i``, ``image_features_i``
[tiles·16, 64] f32 (projector output), ``logits_i``, ``greedy_i``, ``greedy_margin_i``; the
reference image processor is ``GotOcr2ImageProcessorPil``.

Usage:  python scripts/make_fixtures.py [--family qwen2_vl|...|qwen3_5_moe|internvl|all]
        [--data /work/shared/data]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tiny_tokenizer  # noqa: E402

REPO = os.path.dirname(HERE)
IMAGES = ["a_car_007000.jpg", "a_car_007006.jpg", "a_car_007016.jpg", "a_car_007009.jpg"]
N_GREEDY = 24
FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe", "internvl"]
# Sparse MoE block of the two MoE fixtures (transformers `*SparseMoeBlock`).
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48}
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
# InternVL's special tokens (ids after `</think>`, in this order) and their names in
# tokenizer_config.json `extra_special_tokens` (as OpenGVLab/InternVL3_5-*-HF have them), which
# InternVLProcessor reads as `tokenizer.start_image_token` etc.
INTERNVL_TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>",
                   "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"}
# The tiny chat template with InternVL's image/video parts: `<IMG_CONTEXT>` + newline (the
# processor expands it to `<img>` + `<IMG_CONTEXT>`×(16·tiles) + `</img>`), `<video>` + newline.
INTERNVL_CHAT_TEMPLATE = (
    tiny_tokenizer.CHAT_TEMPLATE
    .replace("'<|vision_start|><|image_pad|><|vision_end|>'", "'<IMG_CONTEXT>\\n'")
    .replace("'<|vision_start|><|video_pad|><|vision_end|>'", "'<video>\\n'")
)
assert INTERNVL_CHAT_TEMPLATE.count("<IMG_CONTEXT>") == 1 and "<|vision_start|>" not in INTERNVL_CHAT_TEMPLATE
INTERNVL_TILE = 112  # the published checkpoints tile at 448; 112 keeps 8×8 patches of 14 per tile
INTERNVL_TILE_TOKENS = (INTERNVL_TILE // 14 // 2) ** 2  # per tile, after the 2×2 pixel shuffle: 16
INTERNVL_MAX_TILES = 6  # published: 12; fewer keeps the goldens' pixel values small


def family_config(family: str, vocab: int, ids: dict) -> dict:
    """Tiny config.json content of one family (nested transformers-5 layout)."""
    if family == "internvl":
        # InternVL3.5-8B-HF's layout at tiny widths: InternViT-300M-style tower (layer norm, no
        # q/k norm, biased attention, layer scale, mean pooling), pixel shuffle 0.5 + MLP
        # projector, Qwen3 decoder with plain 1-D RoPE.
        text = {
            "model_type": "qwen3", "vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "tie_word_embeddings": False,
        }
        vision = {
            "model_type": "internvl_vision", "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 64,
            "image_size": [INTERNVL_TILE, INTERNVL_TILE], "patch_size": [14, 14],
            "norm_type": "layer_norm", "use_qk_norm": False, "attention_bias": True,
            "layer_scale_init_value": 0.1, "hidden_act": "gelu", "layer_norm_eps": 1e-6,
            "use_mean_pooling": True,
        }
        return {"model_type": "internvl", "text_config": text, "vision_config": vision,
                "image_token_id": ids["<IMG_CONTEXT>"], "image_seq_length": INTERNVL_TILE_TOKENS,
                "downsample_ratio": 0.5, "projector_hidden_act": "gelu", "vision_feature_layer": -1,
                "vision_feature_select_strategy": "default", "tie_word_embeddings": False}
    if family == "qwen3_vl_moe":
        cfg = family_config("qwen3_vl", vocab, ids)
        cfg["text_config"].update(MOE, mlp_only_layers=[1], decoder_sparse_step=1)
        return {**cfg, "model_type": "qwen3_vl_moe"}
    if family == "qwen3_5_moe":
        cfg = family_config("qwen3_5", vocab, ids)
        cfg["text_config"].update(MOE, shared_expert_intermediate_size=40)
        del cfg["text_config"]["intermediate_size"]
        return {**cfg, "model_type": "qwen3_5_moe"}
    tok = {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }
    text = {
        "vocab_size": vocab,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
    }
    if family == "qwen2_vl":
        vision = {
            "depth": 2, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2,
            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
        }
        return {"model_type": "qwen2_vl", "text_config": text, "vision_config": vision, **tok,
                "tie_word_embeddings": False}
    if family == "qwen2_5_vl":
        vision = {
            "depth": 4, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2,
            "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "window_size": 56, "fullatt_block_indexes": [1, 3],
        }
        return {"model_type": "qwen2_5_vl", "text_config": text, "vision_config": vision, **tok,
                "tie_word_embeddings": False}
    if family == "qwen3_vl":
        text = dict(text)
        text["num_hidden_layers"] = 3
        text["head_dim"] = 16
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 5000000.0,
                                   "mrope_section": [2, 3, 3], "mrope_interleaved": True}
        vision = {
            "depth": 3, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
            "out_hidden_size": 64, "patch_size": 16, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0, 1],
        }
        return {"model_type": "qwen3_vl", "text_config": text, "vision_config": vision, **tok,
                "tie_word_embeddings": True}
    if family == "qwen3_5":
        # Hybrid decoder: Gated DeltaNet layers (2 key heads < 4 value heads) around one gated
        # full-attention layer; half of each 32-wide head rotated (partial rotary).
        text = dict(text)
        text.update({
            "num_hidden_layers": 4, "head_dim": 32,
            "layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention"],
            "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                                "mrope_section": [2, 3, 3], "mrope_interleaved": True,
                                "partial_rotary_factor": 0.5},
        })
        vision = {
            "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
            "out_hidden_size": 64, "patch_size": 16, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "num_position_embeddings": 64,
        }
        return {"model_type": "qwen3_5", "text_config": text, "vision_config": vision, **tok,
                "tie_word_embeddings": True}
    raise ValueError(family)


def preprocessor_config(family: str) -> dict:
    """preprocessor_config.json: the published layout of each family, smaller pixel bounds."""
    if family in ("qwen3_vl", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe"):
        return {
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen3VLProcessor",
            "size": {"shortest_edge": 64 * 64, "longest_edge": 32 * 32 * 64},
            "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "do_rescale": True, "do_normalize": True, "do_resize": True, "do_convert_rgb": True,
            "resample": 3, "rescale_factor": 1 / 255,
        }
    proc = "Qwen2VLProcessor" if family == "qwen2_vl" else "Qwen2_5_VLProcessor"
    return {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": proc,
        "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 64,
        "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": CLIP_MEAN, "image_std": CLIP_STD,
        "do_rescale": True, "do_normalize": True, "do_resize": True, "do_convert_rgb": True,
        "resample": 3, "rescale_factor": 0.00392156862745098,
    }


def greedy(model, inputs) -> tuple[torch.Tensor, list[int], list[float]]:
    """The prefill's last-position logits [vocab] f32, then N_GREEDY greedy tokens (no stop on
    EOS) and each step's top-1 minus top-2 logit, decoding with the model's own KV cache."""
    with torch.no_grad():
        o = model(**inputs, use_cache=True)
        prefill = logits = o.logits[0, -1].float()
        toks, margins = [], []
        for _ in range(N_GREEDY):
            top = torch.topk(logits, 2)
            nxt = int(top.indices[0])
            toks.append(nxt)
            margins.append(float(top.values[0] - top.values[1]))
            o = model(input_ids=torch.tensor([[nxt]]), cache=o.cache, use_cache=True)
            logits = o.logits[0, -1].float()
    return prefill.contiguous(), toks, margins


def randomize(model: torch.nn.Module, seed: int, zero_centred: bool = False) -> None:
    """Weights with healthy magnitudes so logits have clear margins (default init is ~0.02).

    ``zero_centred``: the decoder's RMSNorm weights are offsets from 1 (Qwen3.5
    ``Qwen3_5RMSNorm``: scale ``1 + w``), so they get ``0.1 * randn`` (the gated norm of the
    linear-attention layers keeps a plain weight). InternViT's layer scales (``lambda_1``,
    ``lambda_2``: per-channel gains of the residual branches) are drawn like norm weights,
    around 1, so the vision layers weigh in."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            offset_norm = (zero_centred and "language_model" in name and "norm" in name
                           and "linear_attn.norm" not in name)
            if p.ndim == 1 and offset_norm:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1 and ("norm" in name or "ln_" in name or ".lambda_" in name):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                # An expert stack [experts, out, in] is `experts` linears of fan-in `in`.
                fan_in = p.shape[-1] if p.ndim == 3 else math.prod(p.shape[1:])
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))


def build(family: str, data: str) -> None:
    import transformers
    from PIL import Image
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    if family == "internvl":
        return build_internvl(data)
    out = os.path.join(REPO, "models", "tests", "fixtures", family)
    os.makedirs(out, exist_ok=True)
    info = tiny_tokenizer.build_tokenizer(out)
    for extra in ("vocab.json", "merges.txt"):  # the Rust side reads tokenizer.json only
        os.remove(os.path.join(out, extra))
    cfg_dict = family_config(family, info["vocab_size"], info["special_ids"])
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor_config(family), f, indent=2)
        f.write("\n")

    torch.manual_seed(0)
    config = AutoConfig.for_model(**cfg_dict)
    config._attn_implementation = "eager"
    model = AutoModelForImageTextToText.from_config(config, attn_implementation="eager", dtype=torch.float32)
    # qwen3_5's seed is one whose greedy tokens hold no image/video pad (the tests feed decode
    # steps no image embeddings) and whose greedy margins are all ≥ 0.007; qwen3_5_moe's one
    # whose greedy tokens on all 78 val images (scripts/make_qwen3_5_val_goldens.py) hold no
    # image pad and no near-tie the engine's f32 noise flips (seeds 12-18 failed one or the other).
    seeds = {"qwen2_vl": 1, "qwen2_5_vl": 2, "qwen3_vl": 3, "qwen3_5": 9, "qwen3_vl_moe": 11,
             "qwen3_5_moe": 19}
    randomize(model, seed=seeds[family], zero_centred=family in ("qwen3_5", "qwen3_5_moe"))
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    for extra in ("generation_config.json",):
        p = os.path.join(out, extra)
        if os.path.exists(p):
            os.remove(p)
    # Reload from disk exactly as a user would.
    model = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    processor = AutoProcessor.from_pretrained(out, use_fast=False)

    goldens: dict[str, torch.Tensor] = {}
    meta = {
        "family": family,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "image_processor": type(processor.image_processor).__name__ + " (use_fast=False, PIL bicubic)",
        "images": [f"orand-car-a/val/{n}" for n in IMAGES],
        "question": tiny_tokenizer.ORAND_QUESTION,
        "enable_thinking": True,
        "prompts": [],
    }
    for i, name in enumerate(IMAGES):
        image = Image.open(os.path.join(data, "orand-car-a", "val", name))
        messages = [{"role": "user", "content": [
            {"type": "image"}, {"type": "text", "text": tiny_tokenizer.ORAND_QUESTION}]}]
        prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                               enable_thinking=True)
        meta["prompts"].append(prompt)
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
        ids = inputs["input_ids"]
        pos, delta = model.model.get_rope_index(
            ids, mm_token_type_ids=inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"])
        goldens[f"pixel_values_{i}"] = inputs["pixel_values"].float().contiguous()
        goldens[f"grid_thw_{i}"] = inputs["image_grid_thw"].long().contiguous()
        goldens[f"input_ids_{i}"] = ids[0].long().contiguous()
        goldens[f"position_ids_{i}"] = pos[:, 0, :].long().contiguous()
        goldens[f"rope_delta_{i}"] = delta.reshape(1).long().contiguous()
        goldens[f"logits_{i}"], toks, margins = greedy(model, inputs)
        goldens[f"greedy_{i}"] = torch.tensor(toks, dtype=torch.long)
        goldens[f"greedy_margin_{i}"] = torch.tensor(margins, dtype=torch.float32)
        print(family, name, "grid", inputs["image_grid_thw"].tolist(), "len", ids.shape[1],
              "min margin %.4f" % min(margins), "tokens", toks[:8])
    save_file(goldens, os.path.join(out, "goldens.safetensors"))
    with open(os.path.join(out, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=2, ensure_ascii=False)
        f.write("\n")


def build_internvl(data: str, seed: int | None = None) -> None:
    """The ``internvl`` fixture (``InternVLForConditionalGeneration``, Qwen3 decoder).

    Differs from the Qwen-VL families in: the tokenizer has InternVL's special tokens; the
    processor files are written by transformers (``preprocessor_config.json`` by the
    GotOcr2 image processor, ``processor_config.json`` by ``InternVLProcessor``, which nests
    the image and video processors); the goldens hold ``pixel_values_i`` as the processor
    returns it ([tiles, 3, 112, 112], thumbnail last), ``num_patches_i`` and
    ``image_features_i`` (projector output) instead of grid/positions (plain 1-D RoPE).
    ``seed`` overrides the chosen seed (for a seed search)."""
    import shutil
    import tempfile

    import transformers
    from PIL import Image
    from safetensors.torch import save_file
    from transformers import (AutoConfig, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer,
                              InternVLProcessor)
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import (GotOcr2ImageProcessorPil,
                                                                            get_optimal_tiled_canvas)
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

    family = "internvl"
    out = os.path.join(REPO, "models", "tests", "fixtures", family)
    os.makedirs(out, exist_ok=True)
    info = tiny_tokenizer.build_tokenizer(out, extra_special=list(INTERNVL_TOKENS.values()),
                                          named_special=INTERNVL_TOKENS,
                                          chat_template=INTERNVL_CHAT_TEMPLATE)
    for extra in ("vocab.json", "merges.txt"):  # the Rust side reads tokenizer.json only
        os.remove(os.path.join(out, extra))
    ids = info["special_ids"]
    cfg_dict = family_config(family, info["vocab_size"], ids)

    # Processor: GotOcr2 tiles of 112 (published: 448) with the ImageNet mean/std of InternVL,
    # 16 tokens per tile. transformers 5's processor save_pretrained writes everything into
    # processor_config.json (image + video processor nested) and rewrites the tokenizer files:
    # keep the tokenizer files of tiny_tokenizer, take processor_config.json from the
    # processor and preprocessor_config.json (the flat file of the published checkpoints,
    # which the Rust side reads) from the image processor's own save_pretrained.
    pixel = {"size": {"height": INTERNVL_TILE, "width": INTERNVL_TILE},
             "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD, "resample": 3,
             "rescale_factor": 1 / 255, "do_convert_rgb": True}
    image_processor = GotOcr2ImageProcessorPil(crop_to_patches=True, min_patches=1, max_patches=INTERNVL_MAX_TILES, **pixel)
    # InternVLProcessor requires a video processor (torchvision); same pixel settings.
    video_processor = InternVLVideoProcessor(**pixel)
    processor = InternVLProcessor(image_processor=image_processor, tokenizer=AutoTokenizer.from_pretrained(out),
                                  video_processor=video_processor, image_seq_length=INTERNVL_TILE_TOKENS,
                                  chat_template=INTERNVL_CHAT_TEMPLATE)
    with tempfile.TemporaryDirectory() as tmp:
        processor.save_pretrained(tmp)
        with open(os.path.join(tmp, "chat_template.jinja"), encoding="utf-8") as f:
            assert f.read() == INTERNVL_CHAT_TEMPLATE
        shutil.copyfile(os.path.join(tmp, "processor_config.json"), os.path.join(out, "processor_config.json"))
    image_processor.save_pretrained(out)

    torch.manual_seed(0)
    config = AutoConfig.for_model(**cfg_dict)
    config._attn_implementation = "eager"
    model = AutoModelForImageTextToText.from_config(config, attn_implementation="eager", dtype=torch.float32)
    # internvl's seed is one whose greedy tokens hold no <img>, </img>, <IMG_CONTEXT> and whose
    # greedy margins are all ≥ 0.007 (seeds 32-36 and 38-41 had a smaller margin at these
    # sizes), and whose greedy tokens differ from image to image.
    seeds = {"internvl": 37}
    randomize(model, seed=seeds[family] if seed is None else seed)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    for extra in ("generation_config.json",):
        p = os.path.join(out, extra)
        if os.path.exists(p):
            os.remove(p)
    # Reload from disk exactly as a user would.
    model = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    # use_fast=False selects the PIL image processor (transformers 5 deprecates it for
    # backend="pil", but that also asks the video processor for a PIL backend, which it lacks).
    processor = AutoProcessor.from_pretrained(out, use_fast=False)
    ip_name = type(processor.image_processor).__name__
    assert type(processor).__name__ == "InternVLProcessor", type(processor)
    assert ip_name == "GotOcr2ImageProcessorPil", ip_name  # the PIL backend: Pillow bicubic
    assert processor.image_seq_length == INTERNVL_TILE_TOKENS and processor.image_token_id == ids["<IMG_CONTEXT>"]
    assert (processor.start_image_token_id, processor.end_image_token_id) == (ids["<img>"], ids["</img>"])
    forbidden = {ids["<img>"], ids["</img>"], ids["<IMG_CONTEXT>"]}

    goldens: dict[str, torch.Tensor] = {}
    meta = {
        "family": family,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "image_processor": ip_name + " (use_fast=False, PIL bicubic)",
        "processor": type(processor).__name__,
        "images": [f"orand-car-a/val/{n}" for n in IMAGES],
        "question": tiny_tokenizer.ORAND_QUESTION,
        "enable_thinking": True,
        "num_patches": [],
        "prompts": [],
    }
    all_margins, bad = [], []
    for i, name in enumerate(IMAGES):
        image = Image.open(os.path.join(data, "orand-car-a", "val", name))
        messages = [{"role": "user", "content": [
            {"type": "image"}, {"type": "text", "text": tiny_tokenizer.ORAND_QUESTION}]}]
        prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                               enable_thinking=True)
        meta["prompts"].append(prompt)
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
        ids_i = inputs["input_ids"]
        pixel_values = inputs["pixel_values"]
        tiles = pixel_values.shape[0]  # InternVLProcessor pops num_patches; one image here
        assert tiles == processor.image_processor.get_number_of_image_patches(image.height, image.width)
        assert int((ids_i == ids["<IMG_CONTEXT>"]).sum()) == INTERNVL_TILE_TOKENS * tiles
        cols, rows = get_optimal_tiled_canvas((image.height, image.width), (INTERNVL_TILE, INTERNVL_TILE), 1, INTERNVL_MAX_TILES)
        meta["num_patches"].append(tiles)
        goldens[f"pixel_values_{i}"] = pixel_values.float().contiguous()
        goldens[f"num_patches_{i}"] = torch.tensor([tiles], dtype=torch.long)
        goldens[f"input_ids_{i}"] = ids_i[0].long().contiguous()
        with torch.no_grad():
            feats = model.model.get_image_features(
                pixel_values, vision_feature_layer=config.vision_feature_layer,
                vision_feature_select_strategy=config.vision_feature_select_strategy).pooler_output
            goldens[f"image_features_{i}"] = feats.reshape(-1, feats.shape[-1]).float().contiguous()
            goldens[f"logits_{i}"], toks, margins = greedy(model, inputs)
        goldens[f"greedy_{i}"] = torch.tensor(toks, dtype=torch.long)
        goldens[f"greedy_margin_{i}"] = torch.tensor(margins, dtype=torch.float32)
        all_margins += margins
        bad += [t for t in toks if t in forbidden]
        print(family, name, f"{image.width}x{image.height}", f"grid {cols}x{rows}", "tiles", tiles,
              "len", ids_i.shape[1], "min margin %.4f" % min(margins), "tokens", toks[:8])
        if os.environ.get("FIXTURE_VERBOSE"):
            print("  ", toks)
    print(family, "seed", seeds[family] if seed is None else seed, "min margin %.4f" % min(all_margins),
          "image tokens in greedy:", bad or "none")
    save_file(goldens, os.path.join(out, "goldens.safetensors"))
    with open(os.path.join(out, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="all", choices=["all", *FAMILIES])
    ap.add_argument("--data", default=os.environ.get("VERISAMPLE_SHARED_DATA", "/work/shared/data"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    fams = FAMILIES if args.family == "all" else [args.family]
    for fam in fams:
        build(fam, args.data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
