"""One magnifier against h: the numbers behind ``mha compare``, read from the attention weights only.

First what each head brings back against the single head (:class:`~mhacli.measures.analysis.ReadBack`); then
how spread each head is (mean row entropy in bits against the uniform maximum) and how different the heads are
(mean Jensen–Shannon divergence over pairs of heads: 0 identical, 1 bit never the same key).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from mhacli.measures.analysis import Analysis, ReadBack, analyse, focus, max_row_entropy, mean_pairwise_js, row_entropy

if TYPE_CHECKING:
    from mhacli.grammar.score import Control, Crowd
    from mhacli.attention.trace import Trace


@dataclass(frozen=True)
class Spread:
    """How widely one head (or the single head) spreads its attention."""

    name: str  # "1 head" or "head 3"
    head: int | None  # 0-based head index; None for the single head
    d_k: int  # the head's width: d for the single head, d/h for each of h heads
    mean_entropy: float  # bits, mean over queries
    max_entropy: float  # bits, mean over queries of log2(visible keys)

    @property
    def focus(self) -> float:
        """1 − entropy / maximum: 0 = uniform, 1 = every query on one key."""
        return focus(self.mean_entropy, self.max_entropy)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "head": None if self.head is None else self.head + 1,
                "d_k": self.d_k, "mean_entropy_bits": self.mean_entropy,
                "max_entropy_bits": self.max_entropy, "focus": self.focus}


@dataclass(frozen=True)
class TrainedApart:
    """The single head trained ALONE on the h heads' task, with as many parameters: what each reached.

    The held-out accuracies are :func:`mhacli.grammar.score.score`'s (the card's sentences), the parameter counts the
    training records', so
    ``mha compare --weights trained`` can say how one head fares where h heads share the work.
    """

    task: str
    single_accuracy: float  # held-out accuracy of the one head trained alone, 0 … 1
    heads_accuracy: float  # held-out accuracy of the h heads trained together
    single_parameters: int
    heads_parameters: int
    single_relations: tuple[str, ...] = ()  # what the lone head learned to follow
    heads_relations: tuple[str, ...] = ()  # what each of the h heads learned to follow
    # Per relation the task reads out: (name, the lone head's held-out accuracy, the h heads'), when recorded.
    by_relation: tuple[tuple[str, float, float], ...] = ()
    crowds: tuple[Crowd, Crowd] | None = None  # a grammar pair's verb accuracy by nouns of a class (lone, h heads)
    control: Control | None = None  # the same training with positions in the values (score.control), if measured

    @property
    def gap(self) -> float:
        """How many points of held-out accuracy the h heads gain over the lone head (0 … 100)."""
        return 100 * (self.heads_accuracy - self.single_accuracy)

    @property
    def worst(self) -> tuple[str, float, float] | None:
        """The relation where the lone head falls furthest behind, if the records hold any per relation."""
        return max(self.by_relation, key=lambda r: r[2] - r[1]) if self.by_relation else None

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "single_accuracy": self.single_accuracy, "heads_accuracy": self.heads_accuracy,
                "single_parameters": self.single_parameters, "heads_parameters": self.heads_parameters,
                "single_relations": list(self.single_relations), "heads_relations": list(self.heads_relations),
                "by_relation": [{"relation": r, "single_accuracy": a, "heads_accuracy": b}
                                for r, a, b in self.by_relation],
                "by_nouns_of_a_class": None if self.crowds is None else {"single": self.crowds[0].to_dict(),
                                                                         "heads": self.crowds[1].to_dict()},
                "control": None if self.control is None else self.control.to_dict()}


def trained_apart(alone: Any, alone_metrics: dict[str, Any], heads: Any, heads_metrics: dict[str, Any]) -> TrainedApart:
    """What ``alone`` (one head) and ``heads`` (h heads), trained apart on one task, reached: the accuracies are
    :func:`mhacli.grammar.score.score`'s (the card's sentences), the parameter counts the training records'."""
    from mhacli.grammar.score import by_relation, control, crowd, score

    if alone.config.task != heads.config.task or alone.config.heads != 1:
        raise ValueError("a trained pair is one head and h heads trained on one task")
    single, many = score(alone), score(heads)
    return TrainedApart(task=str(heads.config.task), single_accuracy=single.accuracy, heads_accuracy=many.accuracy,
                        single_parameters=int(alone_metrics["parameters"]),
                        heads_parameters=int(heads_metrics["parameters"]),
                        single_relations=tuple(str(name) for name, _ in alone.relations),
                        heads_relations=tuple(str(name) for name, _ in heads.relations),
                        by_relation=by_relation(single, many),
                        crowds=(crowd(alone), crowd(heads)) if alone.sentences else None,
                        control=control(single.accuracy, many.accuracy) if alone.sentences else None)


@dataclass(frozen=True)
class Comparison:
    """The single head and each of the h heads, side by side, with how different the heads are."""

    tokens: tuple[str, ...]
    d_model: int
    causal: bool
    single: Spread
    heads: tuple[Spread, ...]
    mean_pairwise_js: float  # bits; 0 for identical heads (and for h = 1)
    readback: ReadBack | None = None  # per token: what the h heads bring back against the single head
    analysis: Analysis | None = None  # the h heads' per-query measures (with the read-back)
    single_analysis: Analysis | None = None  # the single head's, for the relation it follows
    apart: TrainedApart | None = None  # set when the single head was trained alone (its own weights)

    @property
    def mean_head_entropy(self) -> float:
        return float(np.mean([s.mean_entropy for s in self.heads]))

    def to_dict(self) -> dict[str, Any]:
        single = self.single.to_dict()
        per_head = [s.to_dict() for s in self.heads]
        out: dict[str, Any] = {
            "tokens": list(self.tokens),
            "d_model": self.d_model,
            "heads": len(self.heads),
            "causal": self.causal,
            "uniform_max_entropy_bits": self.single.max_entropy,
            "single_head": single,
            "per_head": per_head,
            "mean_head_entropy_bits": self.mean_head_entropy,
            "mean_pairwise_js_bits": self.mean_pairwise_js,
            "readback": None if self.readback is None else self.readback.to_dict(),
            # null: the single head is the h heads' own matrices run as one head (same X, same weights)
            "single_trained_alone": None if self.apart is None else self.apart.to_dict(),
        }
        # The relation each head's per-query top key follows, and how often two heads pick the same key.
        for entry, found in ((single, self.single_analysis), *zip(per_head, [self.analysis] * len(per_head))):
            if found is not None:
                s = found.heads[entry["head"] - 1 if entry["head"] is not None else 0]
                entry.update(pattern=s.pattern, pattern_key=s.pattern_key, pattern_share=s.pattern_share)
        if self.analysis is not None:
            out["agreement"] = self.analysis.agreement.tolist()
            out["js_divergence_bits"] = self.analysis.js.tolist()
            if self.analysis.mapped:  # --words: the new words and the words both models read them as
                out["words"] = [{"word": w, "class": c, "read_as": r} for w, c, r in self.analysis.mapped]
        return out


def spread(weights: np.ndarray, causal: bool, name: str, head: int | None, d_k: int) -> Spread:
    """The :class:`Spread` of one (N, N) weight matrix."""
    n = weights.shape[-1]
    return Spread(
        name=name,
        head=head,
        d_k=d_k,
        mean_entropy=float(row_entropy(weights).mean()),
        max_entropy=float(max_row_entropy(n, causal).mean()),
    )


def single_head(trace: Trace) -> Trace:
    """The same input X and weight matrices run as ONE head of size d: the single magnifier."""
    from mhacli.attention.attention import multi_head_attention
    from mhacli.attention.trace import Trace

    w_k, w_v = trace.W_k, trace.W_v  # (g·d/h, d)
    h, g = trace.num_heads, trace.kv_heads
    if g != h:  # shared keys and values, written out once per query head: the same layer as h·d/h = d columns
        w_k, w_v = (np.repeat(w.reshape(g, -1, trace.d_model), h // g, axis=0).reshape(trace.d_model, -1)
                    for w in (w_k, w_v))  # (g·d/h, d) -> (g, d/h, d) -> (h, d/h, d) -> (d, d)
    attention = multi_head_attention(trace.X, trace.X, trace.X_v, trace.W_q, w_k, w_v, trace.W_o, 1,
                                     trace.config.causal, rope_theta=trace.rope_theta)
    return Trace(config=replace(trace.config, heads=1, kv_heads=None), tokens=trace.tokens,
                 token_ids=trace.token_ids, X=trace.X, W_q=trace.W_q, W_k=w_k, W_v=w_v, W_o=trace.W_o,
                 embeddings=trace.embeddings, positions=trace.positions, source=trace.source,
                 word_values=trace.word_values, rope_theta=trace.rope_theta,
                 **vars(attention))


def compare(trace: Trace, single: Trace, apart: TrainedApart | None = None, *, parse: Any = None,
            mapped: tuple[tuple[str, str, str], ...] = ()) -> Comparison:
    """Measure ``trace`` (h heads) against ``single`` (one head of size d, same tokens).

    ``single`` is :func:`single_head` of ``trace`` (same X and weights), or, with ``apart``,
    one head trained alone on the same task (its own embedding and weights).
    """
    if single.num_heads != 1:
        raise ValueError(f"the single-head trace has {single.num_heads} heads, expected 1")
    if single.tokens != trace.tokens:
        raise ValueError("the single-head trace was run on different tokens")
    causal = trace.config.causal
    weights = np.asarray(trace.weights)  # (h, N, N)
    measures = analyse(trace, single, parse=parse, mapped=mapped)
    return Comparison(
        tokens=trace.tokens,
        d_model=trace.d_model,
        causal=causal,
        single=spread(np.asarray(single.weights[0]), causal, "1 head", None, single.d_k),
        heads=tuple(spread(weights[i], causal, f"head {i + 1}", i, trace.d_k)
                    for i in range(trace.num_heads)),
        mean_pairwise_js=mean_pairwise_js(weights),
        readback=measures.readback,
        analysis=measures,
        single_analysis=analyse(single),
        apart=apart,
    )
