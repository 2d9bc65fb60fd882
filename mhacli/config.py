"""The run configuration: every knob of one attention run, validated once.

Pure Python (no numpy), so the CLI can validate options before it imports
anything heavy, and ``mha shapes`` never needs the numerical core.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from mhacli.errors import UsageError

TOKENIZERS = ("word", "char", "whitespace")
WEIGHT_KINDS = ("random", "designed")
DTYPES = ("float64", "float32")

# Numbers kept in memory per run, in units of one float, used to refuse a
# size before allocating it (a MemoryError half-way is the worst answer).
_DTYPE_BYTES = {"float64": 8, "float32": 4}


def memory_limit_bytes() -> int:
    """Three quarters of physical memory: the most one run may plan to use."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        total = 8 * 2**30
    return int(total * 0.75)


def divisors(n: int) -> list[int]:
    """All head counts h that split d_model = n into equal heads."""
    return [k for k in range(1, n + 1) if n % k == 0]


@dataclass(frozen=True)
class Config:
    """Everything that decides the numbers of a run (the trace records it)."""

    heads: int = 4
    d_model: int = 16
    seed: int = 0
    tokenizer: str = "word"
    positions: bool = True
    causal: bool = False
    weights: str = "random"
    dtype: str = "float64"

    def __post_init__(self) -> None:
        self.validate()

    @property
    def d_k(self) -> int:
        """Width of one head, d/h."""
        return self.d_model // self.heads

    def validate(self) -> None:
        """Raise :class:`UsageError` with a one-line fix for any bad value."""
        for name in ("heads", "d_model", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"--{name.replace('_', '-')} must be a whole number, got {value!r}.")
        if self.heads < 1:
            raise UsageError(f"--heads must be at least 1, got {self.heads}.")
        if self.d_model < 1:
            raise UsageError(f"--d-model must be at least 1, got {self.d_model}.")
        if self.seed < 0 or self.seed >= 2**63:
            raise UsageError(f"--seed must be between 0 and 2**63-1, got {self.seed}.")
        if self.d_model % self.heads:
            ok = ", ".join(str(k) for k in divisors(self.d_model))
            raise UsageError(
                f"--d-model {self.d_model} is not divisible by --heads {self.heads}; "
                f"head counts that work for d_model {self.d_model}: {ok}."
            )
        if self.tokenizer not in TOKENIZERS:
            raise UsageError(
                f"unknown tokenizer {self.tokenizer!r}; choose one of: {', '.join(TOKENIZERS)}."
            )
        if self.weights not in WEIGHT_KINDS:
            raise UsageError(
                f"unknown weights {self.weights!r}; choose one of: {', '.join(WEIGHT_KINDS)}."
            )
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r}; choose one of: {', '.join(DTYPES)}.")
        self.check_fits(1)

    def planned_bytes(self, n_tokens: int) -> int:
        """Memory a run over ``n_tokens`` keeps: weights, per-token and per-head arrays."""
        n, d, h = n_tokens, self.d_model, self.heads
        floats = 4 * d * d + 9 * n * d + 2 * h * n * n
        return floats * _DTYPE_BYTES[self.dtype]

    def check_fits(self, n_tokens: int) -> None:
        """Refuse, before allocating, a run that would not fit in memory."""
        need, limit = self.planned_bytes(n_tokens), memory_limit_bytes()
        if need > limit:
            raise UsageError(
                f"{n_tokens} tokens with --d-model {self.d_model} and --heads {self.heads} "
                f"need about {need / 2**30:.1f} GiB, more than the {limit / 2**30:.1f} GiB "
                "this machine allows; use a smaller --d-model or a shorter text."
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON, with the derived head width."""
        return {**asdict(self), "d_k": self.d_k}
