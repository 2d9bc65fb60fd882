"""A trained layer as a model: the configuration it was trained with, and what it does with tokens.

:class:`TrainConfig` is one training's settings, checked once; :class:`TrainedModel` is its result as a model: its
parameters (read-only), the task's vocabulary, how it reads tokens (stand-ins, --words, positions), its own forward,
and each head's relation (from the report card for a grammar model). :mod:`mhacli.grammar.train` makes one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from mhacli.attention import evidence
from mhacli.attention.config import Config
from mhacli.attention.embed import positional_encoding
from mhacli.attention.errors import UsageError
from mhacli.attention.messages import literal
from mhacli.attention.trace import Inputs
from mhacli.grammar.card import Card, read_only
from mhacli.grammar.grammar import LONGEST, NO_RELATION, RELATION_NAMES
from mhacli.grammar.passes import Array, forward
from mhacli.grammar.tasks import BOUNDARY, RELATION_KEYS, TASKS, UNKNOWN, Task, get_task
from mhacli.grammar.words import CLASSES, WordMap, stand_ins, word_map
from mhacli.grammar.words import parse as words_parse

POSITION_KINDS = ("learned", "sinusoidal")
SCHEDULES = ("constant", "cosine")


# ----------------------------------------------------------------------------- configuration


# Upper bounds a teaching run never needs to pass: without them `--steps 10000000` trains for hours and
# `--batch 10000000` asks for more memory than the machine has, instead of one clear line.
TRAIN_LIMITS = {"steps": 100_000, "batch": 4_096, "length": 256, "held_out": 100_000, "snapshots": 50}
LR_MAX = 1.0  # Adam moves each parameter by about lr a step: above 1 the layer only diverges
TRAIN_LIMIT_REASONS = {
    "steps": "the tasks are learned in 1,500; 100,000 take minutes",
    "batch": "64 sequences a step are enough; a bigger batch only costs memory",
    "length": "the tasks' sequences are 12 tokens",
    "held_out": "500 sequences measure the accuracy to within a few percent",
    "snapshots": "one figure column each",
}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides a training run's numbers."""

    task: str = "neighbours"
    heads: int = 4
    d_model: int = 16
    steps: int = 1500
    batch: int = 64
    length: int = 12
    lr: float = 0.02
    seed: int = 0
    positions: str = "sinusoidal"
    causal: bool = False
    # Values from the word embeddings alone (V = E W_vᵀ; positions only in Q and K, as rotary and relative
    # schemes keep them): a head then brings back *which words* it looked at, not where they were.
    word_values: bool = False
    schedule: str = "constant"  # the learning rate over training: constant, or cosine (from lr down to 0)
    # The loss over the asked answers only (the grammar's relations where they exist), not also the boundary
    # everywhere else: a readout then never learns to say "no relation here" from the other heads.
    scored_loss: bool = False
    # λ of the group-lasso penalty λ Σ_t Σ_i ||R_t W_o^i||_F (head_sparsity): each readout reads few heads.
    head_sparsity: float = 0.0
    # The share of training sequences in which one head, drawn at random, is switched off (its output zeroed
    # before W_o, as the knockout does): a readout then cannot lean on every head at once.
    head_dropout: float = 0.0
    # λ of λ Σ_t ‖n_t‖₁/‖n_t‖₂, n_ti = ||R_t W_o^i||_F (head_concentration): few heads per readout, any size.
    head_concentration: float = 0.0
    # λ of λ × mean_q Σ_{i≠j} ⟨A_i[q], A_j[q]⟩ (passes.head_overlap): two heads looking at one key pay for it.
    head_overlap: float = 0.0
    # An experiment, off by default: the grammar's referent read out by one readout per kind of referent
    # (he/she, feeling adjective, place adjective) in training and scoring, so each can learn to read one head.
    split_referent: bool = False
    held_out: int = 500  # fresh sequences for the held-out accuracy
    snapshots: int = 5  # moments of training kept for the heads figure (start … end)
    # g key/value heads the h query heads share (grouped-query attention; 1: multi-query); None: g = h, the
    # article's layer. W_k and W_v are then (g·d/h, d): the first g·d/h rows of the full layer's draw.
    kv_heads: int | None = None
    # Stop on a held-out plateau: every `check_every` steps the held-out accuracy (mean over the relations, on
    # the run's own held-out set) is measured, and a model whose best has not risen for `patience` checks in a
    # row stops there (steps stays the cap). 0: every step is trained, as before the option.
    patience: int = 0
    check_every: int = 100

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def for_task(cls, task: str = "neighbours", **options: Any) -> "TrainConfig":
        """The config with ``options``, and the task's own defaults for what they leave out (None = left out)."""
        given = {k: v for k, v in options.items() if v is not None}
        defaults = dict(get_task(task).defaults) if task in TASKS else {}
        return cls(task=task, **{**defaults, **given})

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    @property
    def groups(self) -> int:
        """Key/value heads g: h unless the query heads share keys and values."""
        return self.heads if self.kv_heads is None else self.kv_heads

    def record(self) -> dict[str, Any]:
        """The config as a saved model records it: kv_heads only when the heads share (g < h), the plateau rule
        only when it is on, so a model trained without them records what it did before the options existed."""
        fields = dict(vars(self))
        if fields["kv_heads"] is None:
            del fields["kv_heads"]
        if not fields["patience"]:
            del fields["patience"], fields["check_every"]
        return fields

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the parameter for any bad value."""
        get_task(self.task)
        for name in ("steps", "batch", "length", "held_out", "snapshots"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"{{{name}:name}} must be a whole number, got {value!r}.", **{name: value})
            least = 2 if name in ("length", "snapshots") else 1
            if value < least:
                raise UsageError(f"{{{name}:name}} must be at least {least}, got {value}.", **{name: value})
            most = TRAIN_LIMITS[name]
            if value > most:
                raise UsageError(f"{{{name}:name}} must be at most {most:,}, got {value:,} "
                                 f"({TRAIN_LIMIT_REASONS[name]}).", **{name: value})
        for name, least, most in (("patience", 0, 1_000), ("check_every", 1, TRAIN_LIMITS["steps"])):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise UsageError(f"{{{name}:name}} must be a whole number from {least} to {most:,}, got {value!r}.",
                                 **{name: value})
        lr = self.lr
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or not 0 < lr <= LR_MAX:
            raise UsageError(f"{{lr:name}} must be a finite number above 0 and at most {LR_MAX:g} "
                             f"(0.001 to 0.05 works), got {lr!r}.", lr=lr)
        task = get_task(self.task)
        if task.sentences and self.length < LONGEST:
            raise UsageError(f"{{length:name}} must be at least {LONGEST} for the {task.name} task (its longest "
                             f"sentence), got {self.length}.", length=self.length)
        if not isinstance(self.word_values, bool):
            raise UsageError(f"{{word_values:name}} must be true or false, got {self.word_values!r}.",
                             word_values=self.word_values)
        if not isinstance(self.split_referent, bool):
            raise UsageError(f"{{split_referent:name}} must be true or false, got {self.split_referent!r}.",
                             split_referent=self.split_referent)
        if self.split_referent:
            task.by_referent_kind()  # only the grammar has a referent to split: any other task is refused here
        if not isinstance(self.scored_loss, bool):
            raise UsageError(f"{{scored_loss:name}} must be true or false, got {self.scored_loss!r}.",
                             scored_loss=self.scored_loss)
        for name, works in (("head_sparsity", "0.001 to 0.01"), ("head_concentration", "0.001 to 0.01"),
                            ("head_overlap", "0.05")):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or not 0 <= value <= 1):
                raise UsageError(f"{{{name}:name}} must be a number from 0 to 1 ({works} works), got "
                                 f"{value!r}.", **{name: value})
        dropout = self.head_dropout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise UsageError(f"{{head_dropout:name}} must be a share from 0 to 1, got {dropout!r}.",
                             head_dropout=dropout)
        if self.schedule not in SCHEDULES:
            raise UsageError(f"{{schedule:name}} must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}.",
                             schedule=self.schedule)
        if self.positions not in POSITION_KINDS:
            raise UsageError(f"{{positions:name}} must be one of {', '.join(POSITION_KINDS)}, got "
                             f"{self.positions!r}.", positions=self.positions)
        # heads, d_model and seed: the run configuration's checks and wording (divisors listed).
        self.run_config()

    def run_config(self) -> Config:
        """The attention layer's :class:`Config` (heads, width, seed), validated by Config's one validation."""
        return Config(heads=self.heads, d_model=self.d_model, seed=self.seed, kv_heads=self.kv_heads)

    def the_task(self) -> Task:
        """The task this config trains: its own, or the grammar with the referent split by kind."""
        task = get_task(self.task)
        return task.by_referent_kind() if self.split_referent else task

    def check_fits(self, limit: int) -> None:
        """Refuse, before any array, a layer whose weights alone would not fit in ``limit`` bytes."""
        self.run_config().check_fits(1, limit=limit)


def _picked_argmax(weights: Array, blocked: Array | None = None) -> Array:
    """(B, h, N): each query's most-weighted key where its weight clears chance (:mod:`evidence`), else −1.

    ``blocked``: the run's key mask (:func:`key_mask`, True = may not look), which sets how many keys each
    query sees and so what chance is; None: every key."""
    looked = weights.argmax(axis=-1)
    top = np.take_along_axis(weights, looked[..., None], axis=-1)[..., 0]
    n = weights.shape[-1]
    seen = np.full(top.shape, n) if blocked is None else np.broadcast_to((~blocked).sum(axis=-1), top.shape)
    return np.where(evidence.picks(top, seen), looked, -1)


def head_relations(weights: Array, blocked: Array | None = None) -> tuple[tuple[str, float], ...]:
    """Each head's relation: the named place its per-query argmax hits most often, and how often.

    ``weights`` is (B, h, N, N); a query counts only where that place exists. Below `evidence.NAME_SHARE` of the
    queries the head learned no clear relation (its best share is kept).
    """
    n = weights.shape[-1]
    looked = _picked_argmax(weights, blocked)  # (B, h, N): the key each query looks at most, if clear of chance
    labels = []
    for i in range(weights.shape[1]):
        best = ("", -1.0)
        for name, key_of in RELATION_KEYS.items():
            keys = np.array([key_of(q) for q in range(n)])  # (N,)
            valid = (keys >= 0) & (keys < n)  # (N,)
            share = float(np.mean(looked[:, i, valid] == keys[valid]))
            if share > best[1]:
                best = (name, share)
        labels.append(best if evidence.named(best[1]) else (NO_RELATION, best[1]))
    return tuple(labels)


def sentence_relations(weights: Array, keys: Array, names: Sequence[str],
                       blocked: Array | None = None) -> tuple[tuple[str, float], ...]:
    """Each head's relation measured against the parse: the relation whose true key its argmax hits most.

    ``weights`` is (B, h, N, N); ``keys`` (R, B, N) the true key of each named relation's queries (-1: none).
    A head below `evidence.NAME_SHARE` on every relation is ``no clear relation`` with its best share.
    """
    looked = _picked_argmax(weights, blocked)  # (B, h, N)
    labels = []
    for i in range(weights.shape[1]):
        shares = [float(np.mean(looked[:, i][keys[r] >= 0] == keys[r][keys[r] >= 0])) for r in range(len(names))]
        best = int(np.argmax(shares))
        labels.append((names[best] if evidence.named(shares[best]) else NO_RELATION, shares[best]))
    return tuple(labels)


@dataclass(frozen=True)
class TrainedModel:
    """A trained layer: its parameters (read-only), the task's vocabulary, and each head's relation.

    A grammar model carries its report card (:mod:`mhacli.grammar.card`): then each head's relation and label
    come from the card, measured on fresh sentences, and from nothing else.
    """

    config: TrainConfig
    params: dict[str, Array]
    vocabulary: tuple[str, ...]
    targets: tuple[str, ...]
    relations: tuple[tuple[str, float], ...]  # per head: (relation name, share of queries following it)
    card: Card | None = None  # a grammar model's report card: its heads' names follow it
    words: WordMap = WordMap()  # new words, each read as a word of its grammar class (TrainedModel.with_words)
    # its held-out measures as JSON, for exactly these parameters (mhacli.grammar.score.record): measured once,
    # when trained, and saved with it, so a run of the model does not draw and run 2,000 sentences again
    recorded: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", {k: read_only(v) for k, v in self.params.items()})
        if self.card is not None:  # one naming rule for every surface: the card's
            object.__setattr__(self, "relations", tuple(self.card.relation(i) for i in range(self.card.heads)))

    @property
    def labels(self) -> tuple[str, ...]:
        """Each head's learned relation as a label: ``previous token (98% of queries)``; from the card when the
        model has one: ``subject (92% trained) — verb → its subject on 1,108 of 1,204 held-out queries …``."""
        if self.card is not None:
            return self.card.labels
        return tuple(f"{name} (under half of any relation's queries: at most {math.floor(100 * share)}%)"
                     if name == NO_RELATION else f"{RELATION_NAMES.get(name, name)} ({share:.0%} of queries)"
                     for name, share in self.relations)

    @property
    def sentences(self) -> bool:
        """True for a model of the grammar: it reads words (capitals folded), an unknown word as one token."""
        return UNKNOWN in self.vocabulary

    def unknown(self, tokens: Sequence[str]) -> tuple[str, ...]:
        """The distinct tokens a grammar model never saw (each read as the one unknown token)."""
        known = set(self.vocabulary) - {UNKNOWN, BOUNDARY}
        return tuple(t for t in dict.fromkeys(tokens) if t.lower() not in known and self.words.class_of(t) is None)

    def stand_ins(self, tokens: Sequence[str]) -> dict[str, str]:
        """Each token outside the trained vocabulary, and the trained word that stands in for it.

        The heads learned relations of position, not meaning, so an unknown word is read as one of the model's
        words, picked by a stable hash (SHA-256, the same on every machine).
        """
        import hashlib

        if self.sentences:  # a word model names what it does not know instead (see :meth:`unknown`)
            return {}
        known = set(self.vocabulary)
        words = [w for w in self.vocabulary if w != BOUNDARY] or list(self.vocabulary)
        out: dict[str, str] = {}
        for t in dict.fromkeys(tokens):
            if t not in known:
                digest = hashlib.sha256(f"mhacli-stand-in\x00{t}".encode("utf-8")).digest()
                out[t] = words[int.from_bytes(digest[:8], "little") % len(words)]
        return out

    def ids(self, tokens: Sequence[str]) -> Array:
        """Token ids in the trained vocabulary (a stand-in for words it never saw; see :meth:`stand_ins`)."""
        index = {t: i for i, t in enumerate(self.vocabulary)}
        if self.sentences:
            unknown = index[UNKNOWN]
            index |= {w: index[s] for w, s in stand_ins(tokens, self.words).items()}  # mapped: its stand-in's row
            return np.array([index.get(t.lower(), unknown) if t.lower() != BOUNDARY else unknown
                             for t in tokens], dtype=np.int64)
        stand = self.stand_ins(tokens)
        return np.array([index[stand.get(t, t)] for t in tokens], dtype=np.int64)

    def positions_for(self, n: int) -> Array:
        """P for n tokens: the sinusoids extend to any length; learned positions exist only as far as trained."""
        table = self.params["positions"]
        if n <= table.shape[0]:
            return table[:n]  # (N, d)
        if self.config.positions == "sinusoidal":
            return positional_encoding(n, self.config.d_model)  # (N, d), the same formula the model trained with
        raise UsageError(f"the trained model learned positions for {table.shape[0]} tokens, the text has {n}; "
                         "give a shorter text (or train with sinusoidal positions).")

    def with_words(self, words: object) -> TrainedModel:
        """This model reading ``words`` (:func:`~mhacli.grammar.words.word_map`) each as its stand-in
        (:func:`~mhacli.grammar.words.stand_ins`); refused for a model that is not of the grammar."""
        mapped = words if isinstance(words, WordMap) else word_map(words)
        if not mapped:
            return self
        if not self.sentences:
            raise UsageError(f"{{words:name}} maps new words to classes of the grammar, so it needs a grammar "
                             f"model ({{weights}}, or one trained with {{task}}); this model learned "
                             f"{literal(self.config.task)}.", words="", weights="grammar", task="grammar")
        known = set(self.vocabulary)
        missing = [w for ws in (CLASSES[c] for _, c in mapped.pairs) for w in ws if w not in known]
        if missing:
            raise UsageError(f"this model has no embedding for {literal(missing[0])}, so {{words:name}} cannot "
                             "read a word of its class.", words="")
        return replace(self, words=mapped)

    def run_inputs(self, tokens: Sequence[str]) -> Inputs:
        """What a run of this model over ``tokens`` reads (:func:`mhacli.attention.trace.run_tokens`): its own
        embedding rows, positions and weights; a grammar model's heads are named only on a sentence it parses."""
        ids, p = self.ids(tokens), self.params
        named = not self.sentences or self.sentence(tokens)[0] is not None  # else its names say nothing here
        return Inputs(p["embedding"][ids], self.positions_for(len(ids)), p["W_q"], p["W_k"], p["W_v"], p["W_o"],
                      rules=tuple(self.labels) if named else None, ids=ids, folds_case=self.sentences,
                      word_values=self.config.word_values)

    def sentence(self, tokens: Sequence[str]) -> tuple[Any, tuple[tuple[str, str, str], ...]]:
        """What the grammar reads in ``tokens``, for the run's measures and words (not its attention): the parse
        (None unless a grammar model parses them) and each --words word as (word, class, the word it is read as)."""
        parse = words_parse(tokens, self.words) if self.sentences else None
        return parse, tuple((w, str(self.words.class_of(w)), r) for w, r in stand_ins(tokens, self.words).items())

    def forward(self, ids: Array, logits: bool = True) -> dict[str, Array]:
        """The model's own forward on id sequences (its heads, mask, padding and values), every intermediate;
        ``logits=False`` stops at the layer's output O (no readout of every word at every position)."""
        c = self.config
        return forward(dict(self.params), ids, c.heads, c.causal, get_task(c.task).pad, c.word_values, logits=logits)

    def attention(self, ids: Array) -> Array:
        """Each head's weights on id sequences: (B, N) -> (B, h, N, N)."""
        return self.forward(ids, logits=False)["weights"]
