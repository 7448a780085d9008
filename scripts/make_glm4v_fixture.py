#!/usr/bin/env python3
"""Write the tiny GLM-4.1V (``glm4v``) fixture checkpoint and goldens used by models/tests/.

Like scripts/make_fixtures.py's families (same images, question, greedy loop), with GLM-4.1V's
own parts: ``Glm4vForConditionalGeneration`` at tiny widths (GLM-4 decoder: 2 layers of 64, 4
heads of 16 over 2 KV heads, half of each head rotated, M-RoPE [2, 1, 1]; vision: 2 blocks of
32, 2 heads, a learned 8×8 position table resampled bicubically, merger to 64), the tokenizer of
scripts/tiny_tokenizer.py with GLM-4.1V's special tokens added, GLM-4.1V-9B-Thinking's chat
template (``GLM4V_CHAT_TEMPLATE`` below; the prompt ends ``<|assistant|>\\n``), ``Glm4vImageProcessorPil`` (``use_fast=False``,
Pillow bicubic) with small pixel bounds. Goldens per sequence ``i``: ``pixel_values_i``,
``grid_thw_i``, ``input_ids_i``, ``position_ids_i`` [3, L], ``rope_delta_i``,
``pos_embed_i`` [patches, 32] (the learned positions resampled by ``grid_sample``),
``image_features_i`` (the merger's output), ``logits_i``, ``greedy_i``, ``greedy_margin_i``.
``goldens.json`` also holds ``published_resize``: transformers' resize of each image at the
published pixel bounds (12544 / 9633792).

Usage:  python scripts/make_glm4v_fixture.py [--data /work/shared/data] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tiny_tokenizer  # noqa: E402
from make_fixtures import CLIP_MEAN, CLIP_STD, IMAGES, REPO, greedy, randomize  # noqa: E402

# GLM-4.1V's added tokens (tokenizer_config.json of zai-org/GLM-4.1V-9B-Thinking), after the tiny
# tokenizer's own: the special ones, then those it does not mark special — the answer tags and
# box markers, which decoding keeps (so the verifier finds the box; vLLM's users see them in
# served output).
GLM4V_TOKENS = [
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
    "<|begin_of_image|>", "<|end_of_image|>", "<|image|>", "<|begin_of_video|>", "<|end_of_video|>",
    "<|video|>",
]
GLM4V_ANSWER_TOKENS = ["<answer>", "</answer>", "<|begin_of_box|>", "<|end_of_box|>"]
# The chat template of zai-org/GLM-4.1V-9B-Thinking (its chat_template.jinja). No network here:
# the text equals, byte for byte, the `official_chat_template` a public renderer-validation
# artifact records for that checkpoint at revision 3c1471e51dc811b589d4d12b1c1c7c1c941267c2
# (its `official_chat_template_sha256` 5232dbe7… is the SHA-256 of this text JSON-encoded; the
# repository of that artifact is not named by the code index). sgl-project/sglang's
# test/srt/test_jinja_template_utils.py (`test_detect_msg_content_pattern`) holds the same text
# but for the empty line after `<|user|>{{ '\n' }}`, which renders nothing. The template has no
# `enable_thinking`: passed to apply_chat_template, transformers hands it on as a processor kwarg
# (with a warning); it has no effect.
GLM4V_CHAT_TEMPLATE = """[gMASK]<sop>
{%- for msg in messages %}
    {%- if msg.role == 'system' %}
<|system|>
{{ msg.content }}
    {%- elif msg.role == 'user' %}
<|user|>{{ '\\n' }}

        {%- if msg.content is string %}
{{ msg.content }}
        {%- else %}
            {%- for item in msg.content %}
                {%- if item.type == 'video' or 'video' in item %}
<|begin_of_video|><|video|><|end_of_video|>
                {%- elif item.type == 'image' or 'image' in item %}
<|begin_of_image|><|image|><|end_of_image|>
                {%- elif item.type == 'text' %}
{{ item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
    {%- elif msg.role == 'assistant' %}
        {%- if msg.metadata %}
<|assistant|>{{ msg.metadata }}
{{ msg.content }}
        {%- else %}
<|assistant|>
{{ msg.content }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{% if add_generation_prompt %}<|assistant|>
{% endif %}"""
# Pixel bounds of the fixture (`size`; Glm4vImageProcessor counts an image as 2 frames, so the
# bounds apply to 2·h·w): the 4 images give grids 4×14, 4×8, 6×8, 4×10, i.e. 14, 8, 12, 10 merged
# tokens (published: 12544 / 9633792, checked by `published_resize`).
SIZE = {"shortest_edge": 28 * 28 * 2 * 8, "longest_edge": 28 * 28 * 2 * 24}
PUBLISHED_SIZE = (12544, 9633792)
# Seed: no image tokens in the greedy tokens, tokens that differ by image, no EOS among them, min
# margin 0.0071 (a_car_007016). Of seeds 1-100 only 11, 31, 44, 47, 68 reach a margin ≥ 0.01; 11
# (2 distinct greedy sequences of 4) and 31 (EOS `<|observation|>` at step 2, one image one token
# repeated) are degenerate; 44 (0.011), 47 (0.023) and 68 (0.014) pass every check above but are
# not adopted (the Rust tests were run on 17; a new seed needs them rerun).
SEED = 17


@contextlib.contextmanager
def capture_grid_sample():
    """Records the output of every `grid_sample` call of the glm4v model code meanwhile: the
    learned position table resampled to an image's patches."""
    import transformers.models.glm4v.modeling_glm4v as modeling

    original = modeling.F.grid_sample
    outputs = []

    def recording(*args, **kwargs):
        out = original(*args, **kwargs)
        outputs.append(out.detach().clone())
        return out

    modeling.F.grid_sample = recording
    try:
        yield outputs
    finally:
        modeling.F.grid_sample = original


def config(vocab: int, ids: dict) -> dict:
    return {
        "model_type": "glm4v",
        "architectures": ["Glm4vForConditionalGeneration"],
        "image_token_id": ids["<|image|>"], "video_token_id": ids["<|video|>"],
        "image_start_token_id": ids["<|begin_of_image|>"], "image_end_token_id": ids["<|end_of_image|>"],
        "video_start_token_id": ids["<|begin_of_video|>"], "video_end_token_id": ids["<|end_of_video|>"],
        "text_config": {
            "model_type": "glm4v_text", "vocab_size": vocab, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5, "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1],
                                "partial_rotary_factor": 0.5},
            "eos_token_id": [ids["<|endoftext|>"], ids["<|user|>"], ids["<|observation|>"]],
            "pad_token_id": ids["<|endoftext|>"],
        },
        "vision_config": {
            "model_type": "glm4v_vision", "depth": 2, "hidden_size": 32, "num_heads": 2,
            "out_hidden_size": 64, "intermediate_size": 48, "image_size": 112, "patch_size": 14,
            "rms_norm_eps": 1e-5, "spatial_merge_size": 2, "temporal_patch_size": 2,
        },
        "tie_word_embeddings": False,
    }


def build(data: str, out: str, seed: int) -> None:
    import transformers
    from PIL import Image
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil, smart_resize

    os.makedirs(out, exist_ok=True)
    info = tiny_tokenizer.build_tokenizer(out, extra_special=GLM4V_TOKENS, chat_template=GLM4V_CHAT_TEMPLATE,
                                          extra_added=GLM4V_ANSWER_TOKENS)
    for extra in ("vocab.json", "merges.txt"):  # the Rust side reads tokenizer.json only
        os.remove(os.path.join(out, extra))
    ids = {**info["special_ids"]}
    image_processor = Glm4vImageProcessorPil(size=dict(SIZE), image_mean=CLIP_MEAN, image_std=CLIP_STD)
    image_processor.save_pretrained(out)
    # processor_config.json as Glm4vProcessor's save_pretrained writes it (image + video
    # processor nested; the video processor needs torchvision); the tokenizer files stay
    # tiny_tokenizer's, preprocessor_config.json the image processor's own (the flat file of the
    # published checkpoints).
    from transformers import AutoTokenizer, Glm4vProcessor
    from transformers.models.glm4v.video_processing_glm4v import Glm4vVideoProcessor
    proc = Glm4vProcessor(image_processor=image_processor, tokenizer=AutoTokenizer.from_pretrained(out),
                          video_processor=Glm4vVideoProcessor(image_mean=CLIP_MEAN, image_std=CLIP_STD),
                          chat_template=GLM4V_CHAT_TEMPLATE)
    with tempfile.TemporaryDirectory() as tmp:
        proc.save_pretrained(tmp)
        with open(os.path.join(tmp, "chat_template.jinja"), encoding="utf-8") as f:
            assert f.read() == GLM4V_CHAT_TEMPLATE
        shutil.copyfile(os.path.join(tmp, "processor_config.json"), os.path.join(out, "processor_config.json"))

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(**config(info["vocab_size"], ids))
    cfg._attn_implementation = "eager"
    model = AutoModelForImageTextToText.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    randomize(model, seed=seed)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    p = os.path.join(out, "generation_config.json")
    if os.path.exists(p):
        os.remove(p)
    model = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    processor = AutoProcessor.from_pretrained(out, use_fast=False)
    ip_name = type(processor.image_processor).__name__
    assert ip_name == "Glm4vImageProcessorPil", ip_name
    forbidden = {ids[t] for t in ("<|image|>", "<|begin_of_image|>", "<|end_of_image|>")}

    goldens: dict[str, torch.Tensor] = {}
    meta = {
        "family": "glm4v", "seed": seed,
        "transformers": transformers.__version__, "torch": torch.__version__,
        "image_processor": ip_name + " (use_fast=False, PIL bicubic)",
        "processor": type(processor).__name__,
        "images": [f"orand-car-a/val/{n}" for n in IMAGES],
        "question": tiny_tokenizer.ORAND_QUESTION, "enable_thinking": True,
        "prompts": [], "published_resize": [],
    }
    all_margins, bad, greedy = [], [], []
    for i, name in enumerate(IMAGES):
        image = Image.open(os.path.join(data, "orand-car-a", "val", name))
        meta["published_resize"].append(
            [image.height, image.width,
             *smart_resize(2, image.height, image.width, factor=28, min_pixels=PUBLISHED_SIZE[0],
                           max_pixels=PUBLISHED_SIZE[1])])
        messages = [{"role": "user", "content": [
            {"type": "image"}, {"type": "text", "text": tiny_tokenizer.ORAND_QUESTION}]}]
        prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                               enable_thinking=True)
        meta["prompts"].append(prompt)
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
        thw = inputs["image_grid_thw"]
        with torch.no_grad(), capture_grid_sample() as resampled:
            pos, delta = model.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                                    image_grid_thw=thw)
            feats = model.model.get_image_features(inputs["pixel_values"], thw).pooler_output
            feats = torch.cat(list(feats), 0) if isinstance(feats, (tuple, list)) else feats
            # [1, hidden, n, 1] → [n, hidden], as Glm4vVisionEmbeddings adds it.
            goldens[f"pos_embed_{i}"] = resampled.pop().squeeze(0).squeeze(-1).permute(1, 0).contiguous()
            assert not resampled
            goldens[f"logits_{i}"], toks, margins = greedy(model, inputs)
        goldens[f"pixel_values_{i}"] = inputs["pixel_values"].float().contiguous()
        goldens[f"grid_thw_{i}"] = thw.long().contiguous()
        goldens[f"input_ids_{i}"] = inputs["input_ids"][0].long().contiguous()
        goldens[f"position_ids_{i}"] = pos[:, 0].long().contiguous()
        goldens[f"rope_delta_{i}"] = delta.reshape(1).long()
        goldens[f"image_features_{i}"] = feats.float().contiguous()
        goldens[f"greedy_{i}"] = torch.tensor(toks, dtype=torch.long)
        goldens[f"greedy_margin_{i}"] = torch.tensor(margins, dtype=torch.float32)
        all_margins += margins
        bad += [t for t in toks if t in forbidden]
        greedy.append(toks)
        print(name, f"{image.width}x{image.height}", "grid", thw.tolist(), "tokens", int((inputs["input_ids"] == ids["<|image|>"]).sum()),
              "len", inputs["input_ids"].shape[1], "min margin %.4f" % min(margins), toks[:8])
    distinct = len({tuple(t) for t in greedy})
    print("seed", seed, "min margin %.4f" % min(all_margins), "image tokens in greedy:", bad or "none",
          "distinct greedy:", distinct)
    save_file(goldens, os.path.join(out, "goldens.safetensors"))
    with open(os.path.join(out, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get("VERISAMPLE_SHARED_DATA", "/work/shared/data"))
    ap.add_argument("--out", default=os.path.join(REPO, "models", "tests", "fixtures", "glm4v"))
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    torch.set_num_threads(1)
    build(args.data, args.out, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
