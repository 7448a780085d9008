#!/usr/bin/env python3
"""Golden numbers for the linear-attention kernels, from transformers' own torch functions.

Writes ``kernels/tests/fixtures/recurrent.safetensors``: a ragged step of 3 sequences
(``query_lens`` [5, 1, 3], state ``slots`` [2, 0, 3] in a pool of 4 slots, every slot starting
from a random non-zero state, so continuation is exercised) run through
``transformers.models.qwen3_5.modeling_qwen3_5``:

* ``causal_conv1d_update`` (SiLU) with a conv state of ``kernel - 1`` columns:
  ``conv_x`` [9, C], ``conv_weight`` [C, K], ``conv_bias`` [C], ``conv_state_in`` /
  ``conv_state_out`` [4, C, K-1], ``conv_out`` [9, C];
* ``torch_recurrent_gated_delta_rule`` (``use_qk_l2norm_in_kernel=True``) with 2 key heads
  and 6 value heads: ``q``, ``k`` [9, 2, 8], ``v`` [9, 6, 12], ``g``, ``beta`` [9, 6],
  ``delta_state_in`` / ``delta_state_out`` [4, 6, 8, 12], ``delta_out`` [9, 6, 12];
* ``query_lens``, ``slots`` (i64).

Each sequence is run alone (batch 1) from its slot's state; slot 1 is used by none and must
come back unchanged. All f32. Usage (from the repository root; deterministic, no network):
``python scripts/make_recurrent_fixtures.py``
"""

import pathlib

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers.models.qwen3_5 import modeling_qwen3_5 as m

OUT = pathlib.Path(__file__).resolve().parent.parent / "kernels/tests/fixtures/recurrent.safetensors"
QUERY_LENS = [5, 1, 3]
SLOTS = [2, 0, 3]
NUM_SLOTS = 4


def main() -> None:
    g = torch.Generator().manual_seed(18)
    rnd = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    total = sum(QUERY_LENS)

    channels, kernel = 20, 4
    conv_x = rnd(total, channels)
    conv_weight = rnd(channels, kernel) * 0.5
    conv_bias = rnd(channels) * 0.1
    conv_state_in = rnd(NUM_SLOTS, channels, kernel - 1)
    conv_state = conv_state_in.clone()
    conv_out = torch.zeros(total, channels)

    hk, dk, hv, dv = 2, 8, 6, 12
    q, k = rnd(total, hk, dk), rnd(total, hk, dk)
    v = rnd(total, hv, dv)
    # g = -exp(A_log) * softplus(a + dt_bias) as in Qwen3_5GatedDeltaNet: always <= 0.
    gate = -torch.exp(rnd(hv) * 0.5) * F.softplus(rnd(total, hv))
    beta = torch.sigmoid(rnd(total, hv))
    delta_state_in = rnd(NUM_SLOTS, hv, dk, dv) * 0.3
    delta_state = delta_state_in.clone()
    delta_out = torch.zeros(total, hv, dv)

    start = 0
    for ql, slot in zip(QUERY_LENS, SLOTS):
        rows = slice(start, start + ql)
        state = conv_state[slot : slot + 1].clone()
        y = m.causal_conv1d_update(
            conv_x[rows].T.unsqueeze(0).contiguous(), state, conv_weight, conv_bias, "silu"
        )
        conv_out[rows] = y[0].T
        conv_state[slot] = state[0]

        o, s = m.torch_recurrent_gated_delta_rule(
            q[rows].unsqueeze(0),
            k[rows].unsqueeze(0),
            v[rows].unsqueeze(0),
            g=gate[rows].unsqueeze(0),
            beta=beta[rows].unsqueeze(0),
            initial_state=delta_state[slot : slot + 1].clone(),
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
        )
        delta_out[rows] = o[0]
        delta_state[slot] = s[0]
        start += ql

    tensors = {
        "query_lens": torch.tensor(QUERY_LENS, dtype=torch.int64),
        "slots": torch.tensor(SLOTS, dtype=torch.int64),
        "conv_x": conv_x,
        "conv_weight": conv_weight,
        "conv_bias": conv_bias,
        "conv_state_in": conv_state_in,
        "conv_state_out": conv_state,
        "conv_out": conv_out,
        "q": q,
        "k": k,
        "v": v,
        "g": gate,
        "beta": beta,
        "delta_state_in": delta_state_in,
        "delta_state_out": delta_state,
        "delta_out": delta_out,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file({n: t.contiguous() for n, t in tensors.items()}, str(OUT))


if __name__ == "__main__":
    main()
