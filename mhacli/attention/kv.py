"""Sizes of attention whose query heads share keys and values, and of the key/value cache a model keeps.

h query heads read g key/value heads: g = h is the article's attention, 1 < g < h grouped-query (Ainslie et al.
2023), g = 1 multi-query (Shazeer 2019); query head i reads group ⌊i / (h/g)⌋. W_k, W_v and the cache shrink
to d×(g·d_h); a latent (MLA) model caches d_c + d_r numbers per token and layer. Counts only, no arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from mhacli.attention.config import divisors
from mhacli.attention.errors import UsageError

#: Bytes per number of each type a model's weights and cache come in (a config's torch_dtype).
BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "int8": 1}
CACHE_DTYPE = "float16"  # what today's models keep their cache in, unless told otherwise


def group_of(head: int, heads: int, kv_heads: int) -> int:
    """The key/value group query head ``head`` (0-based) reads: ⌊i / (h/g)⌋."""
    return head // (heads // kv_heads)


@dataclass(frozen=True)
class Sharing:
    """One attention layer's sizes (d, h, g, d_h) in a model of ``layers`` layers caching ``dtype`` numbers.

    ``kv_lora_rank`` and ``rope_dim`` (d_c and d_r) describe a latent (MLA) cache, when the model has one.
    """

    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int = 1
    dtype: str = CACHE_DTYPE
    kv_lora_rank: int | None = None
    rope_dim: int | None = None

    def __post_init__(self) -> None:
        for name in ("d_model", "heads", "kv_heads", "head_dim", "layers"):
            value = getattr(self, name)
            # g below 1 is told what g must be, as explain's --kv-heads is: a divisor of h (not "at least 1")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1 and name != "kv_heads":
                raise UsageError(f"{{{name}:name}} must be a whole number of at least 1, got {value!r}.",
                                 **{name: value})
        if not 1 <= self.kv_heads <= self.heads or self.heads % self.kv_heads:
            raise UsageError(f"{{kv_heads:name}} {self.kv_heads:,} must divide {{heads:name}} {self.heads:,} (each "
                             f"key/value head serves the same number of query heads); choose one of "
                             f"{', '.join(str(g) for g in divisors(self.heads))}.",
                             kv_heads=self.kv_heads, heads=self.heads)
        if self.dtype not in BYTES:
            raise UsageError(f"{{dtype:name}} must be one of {', '.join(BYTES)}; got {self.dtype!r}.",
                             dtype=self.dtype)

    @property
    def name(self) -> str:
        """MHA, GQA or MQA: what the literature calls this sharing."""
        return "MHA" if self.kv_heads == self.heads else "MQA" if self.kv_heads == 1 else "GQA"

    @property
    def bytes_per_number(self) -> int:
        return BYTES[self.dtype]

    def with_kv_heads(self, kv_heads: int) -> Sharing:
        """The same layer with ``kv_heads`` key/value heads."""
        return replace(self, kv_heads=kv_heads)

    # --- parameters of one layer ---------------------------------------------------------------
    @property
    def q_o_parameters(self) -> int:
        """W_q (d × h·d_h) and W_o (h·d_h × d): untouched by sharing; 2d² when d_h = d/h."""
        return 2 * self.d_model * self.heads * self.head_dim

    @property
    def kv_parameters(self) -> int:
        """W_k and W_v, each d × g·d_h: 2·d·g·d_h."""
        return 2 * self.d_model * self.kv_heads * self.head_dim

    @property
    def parameters(self) -> int:
        """All four projections of one layer: 4d² for MHA, 2d²(1 + g/h) when d_h = d/h."""
        return self.q_o_parameters + self.kv_parameters

    # --- multiply-adds for N tokens -------------------------------------------------------------
    def kv_projection_madds(self, n_tokens: int) -> int:
        """K = X W_k and V = X W_v: 2·N·d·g·d_h (2·N·d² for MHA)."""
        return 2 * n_tokens * self.d_model * self.kv_heads * self.head_dim

    def attention_madds(self, n_tokens: int) -> int:
        """Q·Kᵀ and A·V: 2·h·N²·d_h, whatever g is (every query head still scores every key)."""
        return 2 * self.heads * n_tokens * n_tokens * self.head_dim

    # --- the cache --------------------------------------------------------------------------------
    @property
    def cache_numbers(self) -> int:
        """Numbers cached per token and layer: K and V of each group, 2·g·d_h."""
        return 2 * self.kv_heads * self.head_dim

    @property
    def cache_per_token(self) -> int:
        """Bytes cached per token: 2·L·g·d_h·b."""
        return self.layers * self.cache_numbers * self.bytes_per_number

    def cache_per_sequence(self, n_tokens: int) -> int:
        """Bytes cached for a sequence of ``n_tokens``."""
        return n_tokens * self.cache_per_token

    @property
    def latent(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def latent_numbers(self) -> int | None:
        """Numbers a latent (MLA) model caches per token and layer: d_c + d_r (None without a latent)."""
        return None if self.kv_lora_rank is None else self.kv_lora_rank + (self.rope_dim or 0)

    @property
    def latent_per_token(self) -> int | None:
        """Bytes of the latent cache per token: L·(d_c + d_r)·b (None without a latent)."""
        numbers = self.latent_numbers
        return None if numbers is None else self.layers * numbers * self.bytes_per_number

    def to_dict(self, n_tokens: int) -> dict[str, Any]:
        """The numbers of this sharing for a sequence of ``n_tokens``, bytes as integers."""
        return {"name": self.name, "kv_heads": self.kv_heads, "parameters": self.parameters,
                "kv_parameters": self.kv_parameters, "kv_projection_madds": self.kv_projection_madds(n_tokens),
                "attention_madds": self.attention_madds(n_tokens), "cache_numbers_per_layer": self.cache_numbers,
                "cache_bytes_per_token": self.cache_per_token,
                "cache_bytes_per_sequence": self.cache_per_sequence(n_tokens)}


def side_by_side(layer: Sharing) -> list[Sharing]:
    """MHA, ``layer``'s own sharing and MQA, each once (g = h, g, 1)."""
    return [layer.with_kv_heads(g) for g in dict.fromkeys((layer.heads, layer.kv_heads, 1))]


@dataclass(frozen=True)
class Sized:
    """One sharing's numbers for N tokens, as ``mha shapes`` shows them side by side."""

    name: str
    kv_heads: int
    per_group: int  # query heads per key/value group, h/g
    parameters: int
    kv_projection_madds: int
    attention_madds: int
    cache_per_token: int
    cache_per_sequence: int


@dataclass(frozen=True)
class SideBySide:
    """MHA, a layer's own sharing and MQA for N tokens, with what the notes under them compare against."""

    layer: Sharing
    n_tokens: int
    sized: tuple[Sized, ...]
    mha_parameters: int
    mha_cache_numbers: int


def sized_side_by_side(layer: Sharing, n_tokens: int) -> SideBySide:
    """Every number of the side-by-side table, computed once for the renderers."""
    sized = tuple(Sized(s.name, s.kv_heads, s.heads // s.kv_heads, s.parameters, s.kv_projection_madds(n_tokens),
                        s.attention_madds(n_tokens), s.cache_per_token, s.cache_per_sequence(n_tokens))
                  for s in side_by_side(layer))
    mha = layer.with_kv_heads(layer.heads)
    return SideBySide(layer, n_tokens, sized, mha.parameters, mha.cache_numbers)


def kv_document(layer: Sharing, n_tokens: int) -> dict[str, Any]:
    """What ``mha shapes --json`` carries of the sharing and the cache."""
    return {"d_model": layer.d_model, "heads": layer.heads, "kv_heads": layer.kv_heads,
            "head_dim": layer.head_dim, "layers": layer.layers, "dtype": layer.dtype,
            "bytes_per_number": layer.bytes_per_number, "tokens": n_tokens,
            "sharings": [s.to_dict(n_tokens) for s in side_by_side(layer)],
            "latent": None if not layer.latent else {
                "kv_lora_rank": layer.kv_lora_rank, "rope_dim": layer.rope_dim or 0,
                "cache_numbers_per_layer": layer.latent_numbers, "cache_bytes_per_token": layer.latent_per_token,
                "cache_bytes_per_sequence": n_tokens * (layer.latent_per_token or 0)}}


# --- a Hugging Face config.json's numbers ---------------------------------------------------------
def _count(config: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    """A config's whole number of at least 1 (``default`` when the key is absent or null)."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"the config's {key} must be a whole number of at least 1, got {str(value)[:24]!r}.")
    return value


def from_config(config: Mapping[str, Any], dtype: str | None = None) -> Sharing:
    """The attention sizes a Hugging Face ``config.json`` (already parsed) describes.

    ``num_key_value_heads`` defaults to the head count and ``head_dim`` to d/h, as in transformers; a latent
    (MLA) config names its head width ``v_head_dim``.  ``dtype`` (given) wins over the config's ``torch_dtype``.
    """
    if not isinstance(config, Mapping):
        raise UsageError("the config must be a JSON object (a model's config.json).")
    missing = [k for k in ("hidden_size", "num_attention_heads", "num_hidden_layers") if config.get(k) is None]
    if missing:
        raise UsageError(f"the config has no {missing[0]}; a model's config.json names hidden_size, "
                         "num_attention_heads and num_hidden_layers (a multimodal one inside its text_config).")
    d, h, layers = (_count(config, k) for k in ("hidden_size", "num_attention_heads", "num_hidden_layers"))
    assert d is not None and h is not None and layers is not None
    g = _count(config, "num_key_value_heads", h)
    assert g is not None
    if g > h or h % g:
        raise UsageError(f"the config's num_key_value_heads {g:,} does not divide its num_attention_heads {h:,}.")
    head_dim = _count(config, "head_dim") or _count(config, "v_head_dim")
    if head_dim is None:
        if d % h:
            raise UsageError(f"the config's hidden_size {d:,} is not divisible by num_attention_heads {h:,} and it "
                             "names no head_dim.")
        head_dim = d // h
    if dtype is None:
        named = config.get("torch_dtype", config.get("dtype"))
        dtype = CACHE_DTYPE if named is None else str(named).removeprefix("torch.")
        if dtype not in BYTES:
            raise UsageError(f"the config's torch_dtype {dtype[:24]!r} is not one of {', '.join(BYTES)}; "
                             "give --dtype.")
    rank = _count(config, "kv_lora_rank")
    return Sharing(d, h, g, head_dim, layers, dtype, rank, _count(config, "qk_rope_head_dim", 0) if rank else None)
