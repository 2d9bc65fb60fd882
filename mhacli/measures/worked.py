"""A worked example small enough to redo by hand: N = 3 tokens, d = 4, h = 2.

X and every weight are small whole numbers (X in {0, 1}, weights in {−1, 0, 1},
drawn from the seed), so each product Q^i = X W_q^i is whole-number arithmetic a
student can check on paper; only the scaling by √(d/h) = √2 and the softmax bring
decimals.  The numbers go through the same step functions as any other run.
"""

from __future__ import annotations

import numpy as np

from mhacli.attention.attention import multi_head_attention
from mhacli.attention.config import Config
from mhacli.attention.embed import vocabulary
from mhacli.attention.trace import Trace

TOKENS = ("the", "cat", "sat")
D_MODEL = 4
HEADS = 2


def worked_example(seed: int = 0, causal: bool = False) -> Trace:
    """The hand-sized run: whole-number X and weights from ``seed``, every intermediate in the trace."""
    rng = np.random.default_rng(seed)
    n, d = len(TOKENS), D_MODEL
    x = rng.integers(0, 2, size=(n, d)).astype(np.float64)  # (N, d) zeros and ones
    x[np.arange(n), np.arange(n) % d] = 1.0  # no all-zero row: every token has something to say
    w_q, w_k, w_v, w_o = rng.integers(-1, 2, size=(4, d, d)).astype(np.float64)  # (d, d) each, PyTorch layout
    attention = multi_head_attention(x, x, x, w_q, w_k, w_v, w_o, HEADS, causal)
    config = Config(heads=HEADS, d_model=d, seed=seed, causal=causal, weights="worked")
    return Trace(config=config, tokens=TOKENS, token_ids=vocabulary(TOKENS)[1], X=x,
                 W_q=w_q, W_k=w_k, W_v=w_v, W_o=w_o, **vars(attention))
