"""Training one multi-head attention layer in numpy: the configuration, the parameters, Adam, the results.

The model is the article's layer and nothing else (one linear readout per target, no hidden layer, no
residual path: whatever a position knows about other positions came through attention, so the task measures
the attention alone).  Its forward and backward passes, losses and head penalties are
:mod:`mhacli.grammar.passes`; this module draws the parameters, runs the steps and measures what was learned.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from mhacli.attention import evidence
from mhacli.attention.config import Config
from mhacli.attention.embed import init_weights, positional_encoding
from mhacli.attention.errors import RunError, UsageError
from mhacli.attention.messages import literal
from mhacli.grammar.passes import (Array, Params, cross_entropy, forward, key_mask, scored_cross_entropy,
                                 scored_readout)
from mhacli.attention.schedule import single_threaded_blas
from mhacli.grammar.grammar import LONGEST, NO_RELATION, RELATION_NAMES
from mhacli.grammar.tasks import BOUNDARY, RELATION_KEYS, TASKS, UNKNOWN, Task, get_task
from mhacli.grammar.words import CLASSES, WordMap, stand_ins, word_map
from mhacli.grammar.words import parse as words_parse
from mhacli.attention.trace import Inputs

if TYPE_CHECKING:
    from mhacli.grammar.card import Card


POSITION_KINDS = ("learned", "sinusoidal")
SCHEDULES = ("constant", "cosine")
# The numbers a step computes in: float32 halves the memory each pass streams through and lets numpy's exp use
# the CPU's vector units; the held-out measures, the card and the saved model read the parameters as float64.
STEP_DTYPE = np.float32
# Parameters Adam updates; "positions" joins them only when they are learned.
WEIGHT_NAMES = ("embedding", "W_q", "W_k", "W_v", "W_o", "readout")


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


# ----------------------------------------------------------------------------- parameters


def init_params(config: TrainConfig, task: Task, rng: np.random.Generator) -> Params:
    """Fresh parameters; their shapes (so their draws) do not depend on the number of heads."""
    d, n, n_vocab, n_targets = config.d_model, config.length, len(task.vocabulary), len(task.targets)
    embedding = rng.standard_normal((n_vocab, d))  # (V, d)
    if UNKNOWN in task.vocabulary:  # never an input in training: a zero row brings only the position
        embedding[task.vocabulary.index(UNKNOWN)] = 0.0
    if config.positions == "learned":
        positions = rng.standard_normal((n, d))  # (N, d)
    else:
        positions = positional_encoding(n, d)  # (N, d)
    w_q, w_k, w_v, w_o = init_weights(d, rng)  # each (d, d), PyTorch layout
    kv_rows = config.groups * (d // config.heads)  # g·d/h: shared keys and values keep the first g heads' rows
    w_k, w_v = w_k[:kv_rows], w_v[:kv_rows]  # (g·d/h, d): the same draw whatever g, so every g starts alike
    readout = rng.standard_normal((n_targets, n_vocab, d)) / math.sqrt(d)  # (T, V, d)
    params = {"embedding": embedding, "positions": positions, "W_q": w_q, "W_k": w_k, "W_v": w_v, "W_o": w_o,
              "readout": readout}
    # Rounded once to the numbers a step computes in: these are exactly the parameters training starts from.
    return {name: value.astype(STEP_DTYPE).astype(np.float64) for name, value in params.items()}


def trainable(config: TrainConfig) -> tuple[str, ...]:
    """Names of the parameters training changes."""
    return WEIGHT_NAMES + (("positions",) if config.positions == "learned" else ())


def count_parameters(config: TrainConfig) -> int:
    """Number of trained numbers: V·d + (N·d) + 4·d² + T·V·d, the same for every head count; with g shared
    key/value heads 2·d² + 2·d·g·d/h instead of 4·d²."""
    task = config.the_task()
    d, n_vocab = config.d_model, len(task.vocabulary)
    positions = config.length * d if config.positions == "learned" else 0
    attention = 2 * d * d + 2 * d * config.groups * config.d_k
    return n_vocab * d + positions + attention + len(task.targets) * n_vocab * d


# ----------------------------------------------------------------------------- Adam


@dataclass
class Adam:
    """Adam (Kingma & Ba): a per-number step size from running means of the gradient and its square."""

    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    t: int = 0
    m: Params = field(default_factory=dict)
    v: Params = field(default_factory=dict)

    def step(self, params: Params, grads: Params, names: Sequence[str]) -> None:
        """Update ``params[name]`` in place for every name."""
        self.t += 1
        # The bias corrections undo the zero start of m and v, folded into one step size.
        step = self.lr * math.sqrt(1 - self.beta2 ** self.t) / (1 - self.beta1 ** self.t)
        for name in names:
            g = grads[name]
            m = self.m.setdefault(name, np.zeros_like(g))
            v = self.v.setdefault(name, np.zeros_like(g))
            # The same operations in the same order as m += (1 − β1) g, v += (1 − β2) g g and
            # p −= step m / (√v + ε), written into two scratch arrays instead of five new ones a parameter a step.
            scratch = np.multiply(g, 1 - self.beta1)
            m *= self.beta1
            m += scratch
            np.multiply(g, 1 - self.beta2, out=scratch)
            scratch *= g
            v *= self.beta2
            v += scratch
            root = np.sqrt(v)
            root += self.eps
            np.multiply(m, step, out=scratch)
            scratch /= root
            params[name] -= scratch


# ----------------------------------------------------------------------------- results


def _frozen(a: Array) -> Array:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


# A head is named for a relation only when its most-weighted key is the relation's key, clear of chance, on at
# least this share of the queries that have the relation (the one evidence rule: mhacli.attention.evidence).
NAMED_SHARE = evidence.NAME_SHARE


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

    ``weights`` is (B, h, N, N); a query counts only where that place exists. Below :data:`NAMED_SHARE` of the
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
    A head below :data:`NAMED_SHARE` on every relation is ``no clear relation`` with its best share.
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
        object.__setattr__(self, "params", {k: _frozen(v) for k, v in self.params.items()})
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

    def inputs(self, tokens: Sequence[str]) -> tuple[Array, ...]:
        """E[tokens], P and W_q, W_k, W_v, W_o for a trace of ``tokens`` (see ``trace.run_tokens``)."""
        ids = self.ids(tokens)
        p = self.params
        return (p["embedding"][ids], self.positions_for(len(ids)), p["W_q"], p["W_k"], p["W_v"], p["W_o"])

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
        e, p, w_q, w_k, w_v, w_o = self.inputs(tokens)
        named = not self.sentences or self.sentence(tokens)[0] is not None  # else its names say nothing here
        return Inputs(e, p, w_q, w_k, w_v, w_o, rules=tuple(self.labels) if named else None, ids=self.ids(tokens),
                      folds_case=self.sentences, word_values=self.config.word_values)

    def sentence(self, tokens: Sequence[str]) -> tuple[Any, tuple[tuple[str, str, str], ...]]:
        """What the grammar reads in ``tokens``, for the run's measures and words (not its attention): the parse
        (None unless a grammar model parses them) and each --words word as (word, class, the word it is read as)."""
        parse = words_parse(tokens, self.words) if self.sentences else None
        return parse, tuple((w, str(self.words.class_of(w)), r) for w, r in stand_ins(tokens, self.words).items())

    def forward(self, ids: Array) -> dict[str, Array]:
        """The model's own forward on id sequences (its heads, mask, padding and values), every intermediate."""
        c = self.config
        return forward(dict(self.params), ids, c.heads, c.causal, get_task(c.task).pad, c.word_values)

    def attention(self, ids: Array) -> Array:
        """Each head's weights on id sequences: (B, N) -> (B, h, N, N)."""
        return self.forward(ids)["weights"]


@dataclass(frozen=True)
class TrainResult:
    """What a training run measured, and the trained model."""

    config: TrainConfig
    loss: float  # held-out cross-entropy at the end
    accuracy: float  # held-out accuracy at the end: share of right answers over the scored positions and targets
    relation_accuracy: tuple[float, ...]  # held-out accuracy of each target relation (model.targets' order)
    history_loss: Array  # (steps,) training-batch loss at each step
    history_accuracy: Array  # (steps,) training-batch accuracy at each step
    parameters: int
    seconds: float  # wall time of the training loop (of the stack it trained in: mhacli.grammar.train.stacks)
    snapshot_steps: tuple[int, ...]  # steps after which the snapshots were taken (0 = before training)
    snapshot_accuracy: tuple[float, ...]  # held-out accuracy at each snapshot
    snapshots: Array  # (moments, h, N, N): each head's weights on one held-out sequence
    snapshot_tokens: tuple[str, ...]  # that sequence
    model: TrainedModel
    stopped: int | None = None  # the step a held-out plateau stopped it at (config.patience); None: every step

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, np.ndarray) and value.flags.writeable:
                object.__setattr__(self, name, _frozen(value))

    @property
    def heads(self) -> int:
        return self.config.heads


@dataclass(frozen=True)
class HeldOut:
    """The fixed sequences accuracy is measured on: ids, targets, true keys and which answers count."""

    ids: Array  # (H, N)
    targets: Array  # (T, H, N)
    keys: Array  # (T, H, N)
    scored: Array  # (T, H, N)


def _evaluate(params: Params, held: HeldOut,
              config: TrainConfig) -> tuple[float, float, tuple[float, ...], Array]:
    """On the held-out set: the loss, the accuracy over every scored answer, each relation's, and the weights.

    The loss is the one training lowers: over the asked answers only when it trains on those (the readouts'
    words where nothing is asked were never trained, so a loss there would measure nothing learned)."""
    cache = forward(params, held.ids, config.heads, config.causal, get_task(config.task).pad, config.word_values,
                    logits=not config.scored_loss)
    if config.scored_loss:  # only the asked answers are read out: accuracy counts nothing else
        asked = scored_readout(cache["out"], params["readout"], held.scored)  # T × (M_t, V)
        loss, _, correct = scored_cross_entropy(asked, held.targets, held.scored)
    else:
        loss, _, correct = cross_entropy(cache["logits"], held.targets)
    per = np.moveaxis(correct, -1, 0)  # (B, N, T) -> (T, B, N)
    accuracy = tuple(float(per[t][held.scored[t]].mean()) for t in range(per.shape[0]))
    return loss, _accuracy(correct, held.scored), accuracy, cache["weights"]


def _accuracy(correct: Array, scored: Array) -> float:
    """Share of right answers among the scored ones: ``correct`` (B, N, T), ``scored`` (T, B, N)."""
    return float(np.moveaxis(correct, -1, 0)[scored].mean())


def snapshot_steps(steps: int, moments: int) -> tuple[int, ...]:
    """``moments`` steps from 0 (untrained) to ``steps``, denser early, where the heads change most."""
    raw = steps * (np.linspace(0.0, 1.0, moments) ** 2)
    return tuple(sorted({int(round(s)) for s in raw} | {0, steps}))


def dropped_heads(rng: np.random.Generator, config: TrainConfig) -> Array:
    """(B, h) 1 = the head speaks: in a share ``head_dropout`` of the sequences one head drawn at random is 0."""
    kept = np.ones((config.batch, config.heads))  # (B, h)
    hit = rng.random(config.batch) < config.head_dropout  # (B,)
    kept[np.nonzero(hit)[0], rng.integers(0, config.heads, size=int(hit.sum()))] = 0.0
    return kept


def learning_rate(config: TrainConfig, step: int) -> float:
    """The step size at ``step`` (1 … steps): lr throughout, or lr·½(1 + cos(π·(step − 1)/steps)) down to near 0."""
    if config.schedule == "cosine":
        return config.lr * 0.5 * (1.0 + math.cos(math.pi * (step - 1) / config.steps))
    return config.lr


def diverged(config: TrainConfig, step: int) -> RunError:
    """The one line for a run whose loss or parameters stopped being finite: nothing is saved or reported."""
    return RunError(f"training diverged at step {step:,} of {config.steps:,}: the loss or the parameters are no "
                    "longer finite numbers; use a smaller {lr:name} (0.001 to 0.05 works). Nothing was written.",
                    lr=config.lr)


# Sentences are drawn for this many steps at once (one call per block, not per step): the same sentences
# whether a model trains alone or in a stack, since each model's seed draws its own blocks.
BLOCK_STEPS = 100


def stacks(configs: Sequence[TrainConfig]) -> list[list[int]]:
    """Which configs train together: those that differ in their seed alone (so in no shape), in first-seen order."""
    groups: dict[TrainConfig, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(replace(c, seed=0), []).append(i)
    return list(groups.values())


def train_many(configs: Sequence[TrainConfig]) -> list[TrainResult]:
    """Every config trained, those of one :func:`stacks` group as one stack; results in the configs' order."""
    results: dict[int, TrainResult] = {}
    for group in stacks(configs):
        results.update(zip(group, train_stack([configs[i] for i in group])))
    return [results[i] for i in range(len(configs))]


def train(config: TrainConfig, on_step: Callable[[int, float, float], None] | None = None) -> TrainResult:
    """Train the layer on ``config.task``; ``on_step(step, loss, accuracy)`` is called after every step."""
    report = None if on_step is None else (lambda step, loss, acc: on_step(step, float(loss[0]), float(acc[0])))
    return train_stack([config], report)[0]


@dataclass
class _Stream:
    """One seed's training sentences, drawn a block of steps at a time from the generator that drew its held-out set."""

    rng: np.random.Generator
    block: tuple[Array, Array, Array] = (np.empty(0), np.empty(0), np.empty(0))
    first: int = 0  # the step the block starts at

    def batch(self, task: Task, config: TrainConfig, step: int) -> tuple[Array, Array, Array]:
        """Step ``step``'s (1 …) ids (B, N), targets (T, B, N) and keys (T, B, N)."""
        b = config.batch
        at = step - self.first
        if not self.first or at >= len(self.block[0]) // b:
            size = min(BLOCK_STEPS, config.steps - step + 1)
            self.block, self.first, at = task.sample(self.rng, size * b, config.length), step, 0
        ids, targets, keys = self.block
        return ids[at * b:(at + 1) * b], targets[:, at * b:(at + 1) * b], keys[:, at * b:(at + 1) * b]


def train_stack(configs: Sequence[TrainConfig],
                on_step: Callable[[int, Array, Array], None] | None = None) -> list[TrainResult]:
    """Train configs that differ only in their seed as one stack; ``on_step(step, losses, accuracies)`` (M,) each.

    Deterministic: each model's ``default_rng(seed)`` draws its parameters (the same for every head count), then
    its held-out set, then its sentences, so each model's numbers are those it gets trained alone."""
    from mhacli.grammar.stacked import stack_batch
    from mhacli.grammar.stacked import step as stacked_step

    config = configs[0]
    if any(replace(c, seed=0) != replace(config, seed=0) for c in configs):
        raise ValueError("a stack trains configs that differ in their seed alone")
    task = config.the_task()
    streams: dict[int, _Stream] = {}
    inits: list[Params] = []
    helds: list[HeldOut] = []
    for c in configs:  # one stream per seed: head counts of one seed read the same sentences
        rng = np.random.default_rng(c.seed)
        inits.append(init_params(c, task, rng))
        ids, targets, keys = task.sample(rng, c.held_out, c.length)  # (H, N), (T, H, N), (T, H, N)
        helds.append(HeldOut(ids, targets, keys, task.scored(keys)))
        streams.setdefault(c.seed, _Stream(rng))
    # Head dropout draws from a generator of its own (spawned from the seed, one per model), so every head count
    # of a seed reads the same sentences, alone or stacked. SeedSequence.spawn, not Generator.spawn (numpy 1.25+):
    # the same generator on the numpy 1.23 pyproject allows.
    dropping = [np.random.default_rng(np.random.SeedSequence(c.seed).spawn(1)[0]) for c in configs]
    m = len(configs)
    params = {name: np.stack([p[name] for p in inits]).astype(STEP_DTYPE) for name in inits[0]}  # (M, …) each
    # The snapshots show the first held-out sequence; a sentence without its padding.
    shown = [int(np.sum(h.ids[0] != task.pad)) if task.pad is not None else config.length for h in helds]
    names = trainable(config)
    adam = Adam(config.lr)
    moments = snapshot_steps(config.steps, config.snapshots)
    snaps: list[list[Array]] = [[] for _ in configs]
    snap_acc: list[list[float]] = [[] for _ in configs]
    history_loss = np.empty((m, config.steps))
    history_accuracy = np.empty((m, config.steps))

    def one(row: int) -> Params:
        """The parameters of the stack's row ``row`` (a live model), in float64."""
        return {name: value[row].astype(np.float64) for name, value in params.items()}

    def _snapshot_one(row: int, i: int) -> None:
        _, overall, _, weights = _evaluate(one(row), helds[i], config)
        snaps[i].append(weights[0, :, :shown[i], :shown[i]].copy())  # (h, N, N) on the first held-out sequence
        snap_acc[i].append(overall)

    def snapshot() -> None:
        for row, i in enumerate(live):
            _snapshot_one(row, i)

    start = time.perf_counter()
    live = list(range(m))  # the models still training: params, Adam's moments and the batch hold these rows
    final: dict[int, Params] = {}  # a model stopped on a plateau: its parameters where it stopped
    stopped: dict[int, int] = {}
    best = [-1.0] * m
    flat = [0] * m  # checks in a row without a new best held-out accuracy

    def plateaued(step: int) -> list[int]:
        """The live models whose held-out accuracy has not risen for ``patience`` checks (row numbers)."""
        out = []
        for row, i in enumerate(live):
            _, _, per, _ = _evaluate(one(row), helds[i], config)
            accuracy = sum(per) / len(per)  # the mean over relations: a rare relation counts as much
            if accuracy > best[i]:
                best[i], flat[i] = accuracy, 0
            else:
                flat[i] += 1
            if flat[i] >= config.patience:
                out.append(row)
        return out

    # The matrices are small (a batch of 64 × 17 tokens, d = 32): a second BLAS thread only waits for the first.
    # A diverging run overflows on its way to NaN: it is refused below (diverged), not printed as numpy's warnings.
    with single_threaded_blas(), np.errstate(all="ignore"):
        snapshot()
        for step in range(1, config.steps + 1):
            drawn = {seed: s.batch(task, config, step) for seed, s in streams.items()
                     if any(configs[i].seed == seed for i in live)}
            ids = np.stack([drawn[configs[i].seed][0] for i in live])  # (M, B, N)
            targets = np.stack([drawn[configs[i].seed][1] for i in live])  # (M, T, B, N)
            asked = task.scored(np.stack([drawn[configs[i].seed][2] for i in live]))  # (M, T, B, N)
            kept = (np.stack([dropped_heads(dropping[i], configs[i]) for i in live])
                    if config.head_dropout else None)  # (M, B, h)
            adam.lr = learning_rate(config, step)
            loss, grads, acc = stacked_step(params, stack_batch(ids, targets, asked, config.scored_loss, kept),
                                            config.heads, config.causal, task.pad, config.word_values,
                                            config.head_sparsity, config.head_concentration, config.head_overlap)
            adam.step(params, grads, names)
            history_loss[live, step - 1] = loss
            history_accuracy[live, step - 1] = acc
            if not np.isfinite(loss).all():
                raise diverged(configs[live[int(np.argmin(np.isfinite(loss)))]], step)
            if step in moments:
                snapshot()
            if on_step is not None:
                on_step(step, loss, acc)
            if config.patience and step % config.check_every == 0 and step < config.steps:
                done = plateaued(step)
                if done:
                    for row in done:
                        final[live[row]], stopped[live[row]] = one(row), step
                        if step not in moments:  # the figure's last column: where it stopped
                            _snapshot_one(row, live[row])
                    keep = [row for row in range(len(live)) if row not in done]
                    live = [live[row] for row in keep]
                    if not live:
                        break
                    for store in (params, adam.m, adam.v):
                        for name in list(store):
                            store[name] = store[name][keep]
        seconds = time.perf_counter() - start
        for row, i in enumerate(live):
            final[i] = one(row)
        ends = [_evaluate(final[i], helds[i], config) for i in range(m)]
    results = []
    for i, c in enumerate(configs):
        ran = stopped.get(i, config.steps)
        steps_shown = tuple(mo for mo in moments if mo <= ran) + (() if ran in moments else (ran,))
        results.append(_result(c, final[i], helds[i], ends[i], history_loss[i, :ran], history_accuracy[i, :ran],
                               seconds, steps_shown, snaps[i], snap_acc[i], shown[i], stopped.get(i)))
    return results


def _result(config: TrainConfig, params: Params, held: HeldOut, end: tuple[float, float, tuple[float, ...], Array],
            history_loss: Array, history_accuracy: Array, seconds: float, moments: tuple[int, ...],
            snaps: list[Array], snap_acc: list[float], shown: int, stopped: int | None = None) -> TrainResult:
    """One model's result: refused when not finite, its heads named against the held-out set."""
    task = config.the_task()
    loss, accuracy, per, weights = end
    if not (math.isfinite(loss) and all(np.isfinite(p).all() for p in params.values())):
        raise diverged(config, stopped or config.steps)  # a model that is not finite is never saved nor reported
    blocked = key_mask(held.ids, config.causal, task.pad)  # what each held-out query could see: chance
    if task.sentences:
        from mhacli.grammar.grammar import HEAD_RELATIONS, head_keys

        relations = sentence_relations(weights, head_keys(held.ids, task.relation_keys(held.keys)), HEAD_RELATIONS,
                                       blocked)
    else:
        relations = head_relations(weights, blocked)
    model = TrainedModel(config=config, params=params, vocabulary=task.vocabulary, targets=task.targets,
                         relations=relations)
    return TrainResult(
        config=config, loss=loss, accuracy=accuracy, relation_accuracy=per,
        history_loss=history_loss, history_accuracy=history_accuracy, parameters=count_parameters(config),
        seconds=seconds, snapshot_steps=moments, snapshot_accuracy=tuple(snap_acc), snapshots=np.stack(snaps),
        snapshot_tokens=tuple(task.vocabulary[i] for i in held.ids[0][:shown]), model=model, stopped=stopped,
    )
