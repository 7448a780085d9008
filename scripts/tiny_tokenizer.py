#!/usr/bin/env python3
"""Build the small byte-level BPE tokenizer of the verisample demo/test VLM.

Writes, in the Hugging Face checkpoint layout, into ``out_dir``:

* ``tokenizer.json``        -- `tokenizers` library model: NFC normaliser, the Qwen2
  split regex followed by a ByteLevel pre-tokenizer (no prefix space), a BPE model
  trained deterministically on a fixed in-file corpus, ByteLevel decoder.
* ``vocab.json`` / ``merges.txt`` -- the same BPE in the classic GPT-2 files (for
  slow-tokenizer loaders).
* ``tokenizer_config.json`` -- Qwen2 tokenizer settings, the added tokens, the chat
  template embedded, ``eos_token`` ``<|im_end|>``, ``pad_token`` ``<|endoftext|>``.
* ``chat_template.jinja``   -- the chat template (Qwen2-VL layout, Qwen3 thinking switch).

Added tokens (ids right after the BPE vocabulary, in this order): ``<|endoftext|>``,
``<|im_start|>``, ``<|im_end|>``, ``<|vision_start|>``, ``<|vision_end|>``,
``<|image_pad|>``, ``<|video_pad|>`` (special) and ``<think>``, ``</think>``
(added, non-special, as in Qwen3).

The corpus (prompts, digit strings, reading traces, judge prompt and traces) is fixed
and generated with a fixed seed, so the output is byte-identical run to run.

Public API (kept stable; other scripts import it):
    build_tokenizer(out_dir) -> dict   # returns {"vocab_size": int, "special_ids": {tok: id}}
    build_tokenizer(out_dir, extra_special=[...], named_special={...}, chat_template=...)
        # a family's own special tokens (ids after ``</think>``) and chat template; the BPE
        # vocabulary and merges are the same
    CHAT_TEMPLATE, ORAND_QUESTION, JUDGE_TEMPLATE, reading_trace(digits), judge_trace(ref, cand)
CLI:
    python scripts/tiny_tokenizer.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import random
import sys

# Deterministic training: no thread-order effects.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from tokenizers import AddedToken  # noqa: E402

#: Qwen2 pre-tokenizer split regex (from Qwen2's tokenizer.json): digits are split one by one.
QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
NON_SPECIAL_ADDED = ["<think>", "</think>"]

#: The OrandCar question (contract §4), byte-identical.
ORAND_QUESTION = (
    "What is written in the image? Answer this question using the text in the image "
    "directly without any other context. Answer in short without any other content."
)

#: The judge user message; placeholders {question} {reference} {candidate} are substituted
#: literally (use str.replace, not str.format, so braces in answers are safe).
JUDGE_TEMPLATE = (
    "You are grading an answer to a question about an image. You cannot see the image. "
    "Do not solve the question yourself: only compare the candidate answer with the "
    "reference answer.\n\n"
    "Question: {question}\n"
    "Reference answer: {reference}\n"
    "Candidate answer: {candidate}\n\n"
    "The candidate is CORRECT if it gives the same answer as the reference, ignoring case, "
    "spacing, punctuation and formatting. Numbers must agree exactly: every digit must match. "
    "It is WRONG if it gives a different answer. Say UNSURE only if the reference itself is "
    "empty, unreadable or ambiguous.\n"
    "Reply with one word: CORRECT, WRONG or UNSURE."
)

#: Chat template: Qwen2-VL message layout (no default system message), Qwen3 thinking
#: switch. Written for both Python jinja2 and Rust minijinja (only `is defined`,
#: `is string`, loops, `==` and `+` concatenation).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
    "{%- if message['content'] is string -%}\n"
    "{{- message['content'] -}}\n"
    "{%- else -%}\n"
    "{%- for part in message['content'] -%}\n"
    "{%- if part['type'] == 'image' or part['type'] == 'image_url' -%}\n"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}\n"
    "{%- elif part['type'] == 'video' -%}\n"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}\n"
    "{%- elif part['type'] == 'text' -%}\n"
    "{{- part['text'] -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt is defined and add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- if enable_thinking is defined and enable_thinking is false -%}\n"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- endif -%}\n"
)


#: Fixed extra vocabulary (common English and visual-QA words) so the BPE has ~1-2k entries.
_COMMON_WORDS = """
about above across after again against all almost alone along already also although always
among another any anyone anything appear area around ask back background be because become
been before begin behind being below best better between big black blue board book both
bottom box boy brown building but by call can car card cat center change character child
choose circle city clear close color come could count country cup day describe detail did
do does dog door down draw each early edge else end enough even every example explain eye
face fact family far field figure find first follow food form found from front full game
get girl give go good great green group hand handwritten happen have he head hear help her
here high him his hold home horse house how however idea if important include inside into
its just keep kind know label land large last late later lead left less let letter life
light like line list little live long look low made main make man many map mark may me
mean might more most move much must my name near need never new next night no not note
nothing now object often old once only open option options other our out over own page
paper part people person picture place plain plate play point possible present print
problem provide put read real red right road room round row rule run said say scene school
see seem sentence set shape she short should show side sign simple since single small so
some something sound space speak spell stand start state still stop story street such sure
table take tell than that their them then there these they thing think this those through
time title together too top total toward tree true try turn under until up upon us use
very view want was water way we well were what when where which while white who whole why
will window word words work world would write year yellow yes yet your
"""


def reading_trace(digits: str) -> str:
    """Reasoning text (inside <think>) for a reading answer: the digits seen, space separated."""
    return "digits: " + " ".join(d for d in digits if d.isdigit())


#: Position tags of the judge trace: the i-th digit of a line is written ``<tag i><digit>``.
JUDGE_TAGS = "abcdefghijklmnopqrstuvwxyz"


def _tagged(digits: str) -> str:
    return " ".join(JUDGE_TAGS[i % len(JUDGE_TAGS)] + d for i, d in enumerate(digits)) or "none"


def judge_trace(reference_digits: str, candidate_digits: str) -> str:
    """Reasoning text (inside <think>) for a judge answer.

    Both digit sequences with a position tag before each digit (``a1 b1 c8``; an empty
    sequence is ``none``), then, when the reference has digits, a check line with one mark
    per position of the longer sequence: ``=`` where both have the same digit, ``!`` where
    they differ or one is missing. The tags make the comparison a lookup by tag instead of
    counting positions, which a 4-layer model learns far more easily; the verdict then
    only asks whether any ``!`` was written.
    """
    lines = ["reference " + _tagged(reference_digits), "candidate " + _tagged(candidate_digits)]
    if reference_digits:
        n = max(len(reference_digits), len(candidate_digits))
        marks = []
        for i in range(n):
            same = i < len(reference_digits) and i < len(candidate_digits) and reference_digits[i] == candidate_digits[i]
            marks.append(JUDGE_TAGS[i % len(JUDGE_TAGS)] + ("=" if same else "!"))
        lines.append("check " + " ".join(marks))
    return "\n".join(lines)


def _corpus() -> list[str]:
    rng = random.Random(20261130)
    texts = [ORAND_QUESTION, JUDGE_TEMPLATE, CHAT_TEMPLATE]
    words = (
        "zero one two three four five six seven eight nine ten hundred thousand million "
        "amount cheque check dollars pesos cents digits digit number numbers reference "
        "candidate answer question image written text reading judge verdict correct wrong "
        "unsure CORRECT WRONG UNSURE none empty same different system user assistant "
        "You are a helpful assistant. The the is it and or of to in for with without on"
    ).split()
    words += _COMMON_WORDS.split()
    texts.extend(["user\n", "assistant\n", "system\n"] * 200)
    texts.append(" ".join(words))
    for _ in range(3000):
        n = rng.randint(1, 7)
        digits = "".join(rng.choice("0123456789") for _ in range(n))
        texts.append(digits)
        texts.append(reading_trace(digits))
        sep = rng.choice(["", ".", ",", " "])
        shown = digits if not sep or n < 4 else digits[:-3] + sep + digits[-3:]
        cand = rng.choice([digits, shown, "ll" + digits[1:], digits[:-1]])
        texts.append(
            JUDGE_TEMPLATE.replace("{question}", ORAND_QUESTION)
            .replace("{reference}", shown)
            .replace("{candidate}", cand)
        )
        texts.append(judge_trace(digits, "".join(c for c in cand if c.isdigit())))
        texts.append(rng.choice(["CORRECT", "WRONG", "UNSURE"]))
    return texts


def _added_token(content: str, special: bool) -> AddedToken:
    return AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)


def build_tokenizer(
    out_dir: str,
    vocab_size: int = 1200,
    extra_special: list[str] | tuple[str, ...] = (),
    named_special: dict[str, str] | None = None,
    chat_template: str = CHAT_TEMPLATE,
    extra_added: list[str] | tuple[str, ...] = (),
) -> dict:
    """Train and write the tokenizer files into ``out_dir`` (created if missing).

    ``extra_special``: further special added tokens of one model family (ids after
    ``</think>``, in this order; also listed in ``additional_special_tokens``).
    ``named_special``: ``tokenizer_config.json`` ``extra_special_tokens`` (a name → token
    dict, as the InternVL checkpoints have, so transformers sets ``tokenizer.<name>``).
    ``chat_template``: the template written (the corpus always holds CHAT_TEMPLATE, so the
    BPE is the same for every family). ``extra_added``: further added tokens that are not
    special (ids after ``extra_special``; decoding keeps them, as GLM-4.1V's ``<answer>`` and
    box markers). The defaults write the common files byte for byte.

    Returns ``{"vocab_size": total size including added tokens, "special_ids": {token: id}}``.
    """
    os.makedirs(out_dir, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_special_tokens([_added_token(t, True) for t in SPECIAL_TOKENS])
    tok.add_tokens([_added_token(t, False) for t in NON_SPECIAL_ADDED])
    extra_special = list(extra_special)
    if extra_special:
        tok.add_special_tokens([_added_token(t, True) for t in extra_special])
    extra_added = list(extra_added)
    if extra_added:
        tok.add_tokens([_added_token(t, False) for t in extra_added])

    tok.save(os.path.join(out_dir, "tokenizer.json"), pretty=True)

    # Classic vocab.json / merges.txt from the trained model.
    tj = json.load(open(os.path.join(out_dir, "tokenizer.json"), encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in tj["model"]["merges"]:
            f.write((m if isinstance(m, str) else " ".join(m)) + "\n")

    added = SPECIAL_TOKENS + NON_SPECIAL_ADDED + extra_special + extra_added
    special_ids = {t: tok.token_to_id(t) for t in added}
    added_decoder = {}
    for t in added:
        added_decoder[str(special_ids[t])] = {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t not in NON_SPECIAL_ADDED and t not in extra_added,
        }
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added_decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"] + extra_special,
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        **({"extra_special_tokens": dict(named_special)} if named_special else {}),
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(out_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(chat_template)
    return {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "special_ids": special_ids}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: tiny_tokenizer.py OUT_DIR", file=sys.stderr)
        return 2
    info = build_tokenizer(argv[1])
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
