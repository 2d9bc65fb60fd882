"""Training one multi-head attention layer in numpy: the parameters, Adam, the steps, the results.

The model is the article's layer and nothing else (one linear readout per target, no hidden layer, no
residual path: whatever a position knows about other positions came through attention, so the task measures
the attention alone).  Its forward and backward passes, losses and head penalties are
:mod:`mhacli.grammar.passes`; its configuration and the trained model it makes are :mod:`mhacli.grammar.model`;
this module draws the parameters, runs the steps and measures what was learned.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from mhacli.attention.embed import init_weights, positional_encoding
from mhacli.attention.errors import RunError
from mhacli.grammar.passes import (Array, Params, cross_entropy, forward, key_mask, scored_cross_entropy,
                                 scored_readout)
from mhacli.attention.schedule import single_threaded_blas
from mhacli.grammar.tasks import UNKNOWN, Task, get_task
from mhacli.grammar.card import read_only
from mhacli.grammar.model import TrainConfig, TrainedModel, head_relations, sentence_relations


# The numbers a step computes in: float32 halves the memory each pass streams through and lets numpy's exp use
# the CPU's vector units; the held-out measures, the card and the saved model read the parameters as float64.
STEP_DTYPE = np.float32
# Parameters Adam updates; "positions" joins them only when they are learned.
WEIGHT_NAMES = ("embedding", "W_q", "W_k", "W_v", "W_o", "readout")


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
                object.__setattr__(self, name, read_only(value))

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
# Seeds the order in which a block's length buckets are read (with the step the block starts at): shared by
# every model of a stack, so the k-th step of every model reads the same length quantile of its own sentences
# (mostly the same length, so the models step together: train_stack groups them by length).
BUCKET_SEED = 46


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
    """One seed's training sentences, drawn a block of steps at a time from the generator that drew its held-out set.

    Sentences (a task with padding, and a loss over the asked answers only) are put in length buckets: the
    block's sentences in order of length, cut into batches, so a batch holds sentences of about one length and
    is padded only to its own longest, not to ``config.length``. The batches are read in an order drawn afresh
    for each block (from :data:`BUCKET_SEED` and the block's first step, not the model's seed), so training sees
    no curriculum from short to long and every model of a stack reads the same length quantile at the same step."""

    rng: np.random.Generator
    block: tuple[Array, Array, Array] = (np.empty(0), np.empty(0), np.empty(0))
    lengths: Array = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # (block,) of the sorted block
    order: Array = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # (steps,) the bucket each step reads
    first: int = 0  # the step the block starts at

    def batch(self, task: Task, config: TrainConfig, step: int) -> tuple[Array, Array, Array]:
        """Step ``step``'s (1 …) ids (B, n), targets (T, B, n) and keys (T, B, n); n ≤ N is the batch's longest
        sentence (N for a task without padding)."""
        b = config.batch
        at = step - self.first
        if not self.first or at >= len(self.order):
            size = min(BLOCK_STEPS, config.steps - step + 1)
            ids, targets, keys = task.sample(self.rng, size * b, config.length)  # (S, N), (T, S, N), (T, S, N)
            if task.pad is None or not config.scored_loss:  # no padding, or a loss that reads the padding too
                lengths, order = np.full(len(ids), config.length), np.arange(size)
            else:  # a stable sort: sentences of one length stay in the order drawn
                lengths = (ids != task.pad).sum(axis=1)  # (S,): padding only follows a sentence's end
                by_length = np.argsort(lengths, kind="stable")  # (S,)
                ids, targets, keys = ids[by_length], targets[:, by_length], keys[:, by_length]
                lengths = lengths[by_length]
                order = np.random.default_rng((BUCKET_SEED, step)).permutation(size)  # (size,)
            self.block, self.lengths, self.order, self.first = (ids, targets, keys), lengths, order, step
            at = 0
        k = int(self.order[at])
        n = int(self.lengths[(k + 1) * b - 1])  # the bucket's longest: the block is sorted by length
        ids, targets, keys = self.block
        return ids[k * b:(k + 1) * b, :n], targets[:, k * b:(k + 1) * b, :n], keys[:, k * b:(k + 1) * b, :n]


# The key of the (M, P) array that holds every trained parameter of a stack (see _packed).
TRAINED = "trained"


def _packed(params: Params, names: Sequence[str]) -> Params:
    """``params`` with the ``names`` (M, …) each as views of one (M, P) array, kept under :data:`TRAINED`: Adam
    updates them all in one pass of each of its operations instead of one pass per parameter."""
    m = len(params[names[0]])
    flat = np.concatenate([params[name].reshape(m, -1) for name in names], axis=1)  # (M, P)
    out = {name: value for name, value in params.items() if name not in names and name != TRAINED}
    at = 0
    for name in names:
        shape = params[name].shape
        size = int(np.prod(shape[1:]))
        out[name] = flat[:, at:at + size].reshape(shape)  # a view: its rows are whole runs of flat's rows
        if not np.shares_memory(out[name], flat):  # numpy made a copy: Adam's updates would not reach the step
            raise AssertionError(f"{name} is not a view of the packed parameters")
        at += size
    out[TRAINED] = flat
    return out


def _same_length(lengths: Sequence[int]) -> list[list[int]]:
    """The rows of a stack grouped by their batch's length, in order of first appearance: ``[9, 10, 9]`` →
    ``[[0, 2], [1]]``."""
    groups: dict[int, list[int]] = {}
    for row, n in enumerate(lengths):
        groups.setdefault(n, []).append(row)
    return list(groups.values())


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
    names = trainable(config)
    params = _packed({name: np.stack([p[name] for p in inits]).astype(STEP_DTYPE) for name in inits[0]}, names)
    # The snapshots show the first held-out sequence; a sentence without its padding.
    shown = [int(np.sum(h.ids[0] != task.pad)) if task.pad is not None else config.length for h in helds]
    adam = Adam(config.lr)
    moments = snapshot_steps(config.steps, config.snapshots)
    snaps: list[list[Array]] = [[] for _ in configs]
    snap_acc: list[list[float]] = [[] for _ in configs]
    history_loss = np.empty((m, config.steps))
    history_accuracy = np.empty((m, config.steps))

    def one(row: int) -> Params:
        """The parameters of the stack's row ``row`` (a live model), in float64."""
        return {name: value[row].astype(np.float64) for name, value in params.items() if name != TRAINED}

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
            kept = (np.stack([dropped_heads(dropping[i], configs[i]) for i in live])
                    if config.head_dropout else None)  # (M, B, h)
            adam.lr = learning_rate(config, step)
            # Models whose batches have one length step together; no model is padded past its own batch, so each
            # computes exactly what it computes alone (a stack's rows are independent products, bit for bit).
            loss, acc = np.empty(len(live)), np.empty(len(live))
            grads = np.empty_like(params[TRAINED])  # (M, P): every trained number's gradient, packed as params
            for rows in _same_length([drawn[configs[i].seed][0].shape[-1] for i in live]):
                batches = [drawn[configs[live[row]].seed] for row in rows]
                ids, targets = np.stack([b[0] for b in batches]), np.stack([b[1] for b in batches])  # (M', B, n)…
                asked = task.scored(np.stack([b[2] for b in batches]))  # (M', T, B, n)
                whole = len(rows) == len(live)
                own = params if whole else {name: value[rows] for name, value in params.items() if name != TRAINED}
                loss[rows], grad, acc[rows] = stacked_step(
                    own, stack_batch(ids, targets, asked, config.scored_loss, None if kept is None else kept[rows]),
                    config.heads, config.causal, task.pad, config.word_values,
                    config.head_sparsity, config.head_concentration, config.head_overlap)
                grads[rows] = np.concatenate([grad[name].reshape(len(rows), -1) for name in names], axis=1)
            # One Adam update over every trained number at once: the parameters are views of one (M, P) array.
            adam.step(params, {TRAINED: grads}, (TRAINED,))
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
                    params = _packed(params, names)  # the views again, of the smaller (M, P) array
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
