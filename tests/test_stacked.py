"""Models trained as one stack: the stacked step is the per-model step, and a stack trains what each model alone
trains (mhacli.grammar.stacked, mhacli.grammar.train.train_stack)."""

from __future__ import annotations

import numpy as np
import pytest

from mhacli.grammar.passes import loss_and_grads
from mhacli.grammar.stacked import stack_batch, step
from mhacli.grammar.model import TrainConfig
from mhacli.grammar.train import dropped_heads, init_params, stacks, train, train_many

# The stacked step and passes.loss_and_grads add the same numbers in other orders: they agree to rounding.
STEP_TOLERANCE = 1e-12


@pytest.mark.parametrize("task, options", [
    ("grammar", {}),  # the grammar's defaults: scored loss, values from E, concentration and overlap penalties
    ("grammar", {"heads": 1}),
    ("grammar", {"kv_heads": 1}),  # shared keys and values: one group for the four query heads
    ("grammar", {"kv_heads": 2, "head_dropout": 0.3}),
    ("grammar", {"scored_loss": False, "causal": True, "word_values": False, "head_dropout": 0.3}),
    ("relations", {}),
    ("neighbours", {"causal": True, "positions": "learned", "head_dropout": 0.5, "head_sparsity": 0.01}),
])
def test_the_stacked_step_is_every_model_s_own_step(task: str, options: dict) -> None:
    configs = [TrainConfig.for_task(task, seed=seed, batch=8, **options) for seed in (0, 1)]
    c = configs[0]
    t = c.the_task()
    drawn = []
    for config in configs:
        rng = np.random.default_rng(config.seed)
        params = init_params(config, t, rng)
        ids, targets, keys = t.sample(rng, config.batch, config.length)
        kept = dropped_heads(rng, config) if config.head_dropout else None
        drawn.append((params, ids, targets, t.scored(keys), kept))
    stacked = {name: np.stack([d[0][name] for d in drawn]) for name in drawn[0][0]}
    kept = np.stack([d[4] for d in drawn]) if c.head_dropout else None
    batch = stack_batch(np.stack([d[1] for d in drawn]), np.stack([d[2] for d in drawn]),
                        np.stack([d[3] for d in drawn]), c.scored_loss, kept)
    loss, grads, accuracy = step(stacked, batch, c.heads, c.causal, t.pad, c.word_values, c.head_sparsity,
                                 c.head_concentration, c.head_overlap)
    for i, (params, ids, targets, scored, kept_i) in enumerate(drawn):
        want_loss, want, correct = loss_and_grads(params, ids, targets, c.heads, c.causal, t.pad, c.word_values,
                                                  scored if c.scored_loss else None, c.head_sparsity, kept_i,
                                                  c.head_concentration, c.head_overlap)
        assert loss[i] == pytest.approx(want_loss, rel=STEP_TOLERANCE)
        assert accuracy[i] == np.moveaxis(correct, -1, 0)[scored].mean()
        for name, g in want.items():
            if name == "positions" and c.positions != "learned":
                continue  # not trained: sinusoids
            np.testing.assert_allclose(grads[name][i], g, rtol=0, atol=STEP_TOLERANCE * np.abs(g).max(), err_msg=name)


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """A stacked model's array is the lone model's, bit for bit: models whose batches differ in length step apart
    (train._same_length), so no model is padded past its own batch."""
    assert np.array_equal(got, want), what


def test_two_small_models_trained_as_a_stack_are_the_models_trained_alone() -> None:
    """Same seed (one set of sentences), another seed (its own), two head counts: each model's parameters,
    history, snapshots, held-out numbers and head names are the model's trained alone, to the last bit."""
    small = dict(steps=30, batch=8, held_out=20)
    configs = [TrainConfig.for_task("grammar", seed=0, heads=1, **small),
               TrainConfig.for_task("grammar", seed=3, heads=1, **small),
               TrainConfig.for_task("grammar", seed=0, heads=4, **small)]
    assert stacks(configs) == [[0, 1], [2]]
    for together, alone in zip(train_many(configs), (train(c) for c in configs)):
        assert together.config == alone.config
        for name, value in alone.model.params.items():
            _close(together.model.params[name], value, name)
        _close(together.history_loss, alone.history_loss, "history")
        assert together.relation_accuracy == alone.relation_accuracy
        assert together.model.relations == alone.model.relations
        _close(together.snapshots, alone.snapshots, "snapshots")


@pytest.mark.parametrize("options", [{}, {"causal": True, "head_dropout": 0.3, "word_values": False}])
def test_padding_changes_no_number_of_the_step(options: dict) -> None:
    """A batch padded past its longest sentence (as a stack pads a model to its neighbour's width) gives the
    same loss, gradients and accuracy as the batch cut at its longest, to rounding (float64)."""
    config = TrainConfig.for_task("grammar", batch=8, **options)
    task = config.the_task()
    rng = np.random.default_rng(4)
    params = {k: v[None] for k, v in init_params(config, task, rng).items()}  # float64, a stack of one
    ids, targets, keys = task.sample(rng, config.batch, config.length)
    kept = dropped_heads(rng, config)[None] if config.head_dropout else None
    n = int((ids != task.pad).sum(axis=1).max())
    assert n < config.length  # there is padding to cut

    def run(width: int) -> tuple:
        batch = stack_batch(ids[None, :, :width], targets[None, :, :, :width], task.scored(keys[None, :, :, :width]),
                            config.scored_loss, kept)
        return step(params, batch, config.heads, config.causal, task.pad, config.word_values, config.head_sparsity,
                    config.head_concentration, config.head_overlap)

    (loss, grads, accuracy), (cut_loss, cut_grads, cut_accuracy) = run(config.length), run(n)
    assert loss[0] == pytest.approx(cut_loss[0], rel=STEP_TOLERANCE)
    assert accuracy[0] == cut_accuracy[0]
    for name, g in grads.items():
        np.testing.assert_allclose(g, cut_grads[name], rtol=0, atol=STEP_TOLERANCE * np.abs(g).max(), err_msg=name)


def test_the_stacked_step_takes_each_row_s_max_where_one_max_per_head_would_underflow() -> None:
    """Scores so large that a row's own scores lie far below its sentence's largest: the step still agrees with
    passes.loss_and_grads (whose softmax takes each row's max)."""
    config = TrainConfig.for_task("grammar", batch=4)
    task = config.the_task()
    rng = np.random.default_rng(2)
    params = init_params(config, task, rng)
    params["W_q"] = params["W_q"] * 40.0
    params["W_k"] = params["W_k"] * 40.0
    ids, targets, keys = task.sample(rng, config.batch, config.length)
    scored = task.scored(keys)
    batch = stack_batch(ids[None], targets[None], scored[None], config.scored_loss)
    loss, grads, _ = step({k: v[None] for k, v in params.items()}, batch, config.heads, config.causal, task.pad,
                          config.word_values, 0.0, config.head_concentration, config.head_overlap)
    want_loss, want, _ = loss_and_grads(params, ids, targets, config.heads, config.causal, task.pad,
                                        config.word_values, scored, 0.0, None, config.head_concentration,
                                        config.head_overlap)
    assert np.isfinite(loss).all()
    assert loss[0] == pytest.approx(want_loss, rel=STEP_TOLERANCE)
    for name, g in want.items():
        if name != "positions":
            np.testing.assert_allclose(grads[name][0], g, rtol=0, atol=STEP_TOLERANCE * np.abs(g).max(), err_msg=name)


def test_a_stack_refuses_configs_that_differ_in_more_than_their_seed() -> None:
    from mhacli.grammar.train import train_stack

    with pytest.raises(ValueError, match="seed alone"):
        train_stack([TrainConfig(heads=1, steps=2), TrainConfig(heads=2, steps=2)])


def test_sentences_drawn_in_blocks_are_read_in_length_buckets_in_an_order_every_seed_shares() -> None:
    """A run whose steps are not a whole number of blocks: a full block, then one of the steps left. Each block's
    sentences are read once each, a batch holds neighbours in order of length, padded to its own longest only,
    and the batches come in an order that is no curriculum and the same for every seed (so a stack pads little)."""
    from mhacli.grammar.train import BLOCK_STEPS, _Stream

    config = TrainConfig.for_task("grammar", steps=BLOCK_STEPS + 3, batch=4)
    task = config.the_task()
    stream, other = _Stream(np.random.default_rng(5)), _Stream(np.random.default_rng(6))
    got, widths, orders = [], [], []
    for at in range(1, config.steps + 1):
        ids, targets, keys = stream.batch(task, config, at)
        other.batch(task, config, at)
        if at in (1, BLOCK_STEPS + 1):
            assert np.array_equal(stream.order, other.order)  # the same bucket at every step, whatever the seed
            orders.append(stream.order.copy())
        assert ids.shape[0] == config.batch and targets.shape[1:] == keys.shape[1:] == ids.shape
        assert (ids[:, -1] != task.pad).any()  # padded to the batch's longest sentence, no further
        assert (keys < ids.shape[1]).all()
        got.append(ids)
        widths.append(ids.shape[1])
    assert [len(o) for o in orders] == [BLOCK_STEPS, 3]
    rng = np.random.default_rng(5)
    for (start, size), drawn in zip(((0, BLOCK_STEPS), (BLOCK_STEPS, 3)),
                                    (task.sample(rng, size * config.batch, config.length)[0]
                                     for size in (BLOCK_STEPS, 3))):
        read = got[start:start + size]
        rows = sorted(tuple(int(i) for i in row if i != task.pad) for ids in read for row in ids)
        assert rows == sorted(tuple(int(i) for i in row if i != task.pad) for row in drawn)  # each sentence once
        spans = sorted(((ids != task.pad).sum(axis=1).min(), (ids != task.pad).sum(axis=1).max()) for ids in read)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # buckets: neighbours in order of length
    assert widths[:BLOCK_STEPS] != sorted(widths[:BLOCK_STEPS])  # no curriculum from short to long
    assert max(widths) <= config.length and min(widths) < config.length
    # A loss over every answer reads the padding's too (its answer is the boundary): such a run keeps it all.
    every = TrainConfig.for_task("grammar", steps=3, batch=4, scored_loss=False)
    stream = _Stream(np.random.default_rng(5))
    assert all(stream.batch(task, every, at)[0].shape == (4, every.length) for at in (1, 2, 3))


def test_mha_train_s_seed_sweep_reports_each_model_as_trained_alone() -> None:
    """The command trains each head count's seeds as one stack; every run it reports is the run trained alone."""
    import json

    from typer.testing import CliRunner

    from mhacli.cli.app import app

    result = CliRunner().invoke(app, ["train", "--task", "neighbours", "--seeds", "0-1", "--compare", "1,2",
                                      "--steps", "20", "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [(r["seed"], r["heads"]) for r in runs] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    from mhacli.grammar.score import measured

    for run in runs:  # each as the command reports a run it trained alone: measured by the one held-out score
        alone = measured(train(TrainConfig.for_task("neighbours", heads=run["heads"], seed=run["seed"], steps=20)))
        assert run["relation_accuracy"] == dict(zip(alone.model.targets, alone.relation_accuracy))
        assert run["loss"] == alone.loss


def test_models_that_stop_on_a_plateau_in_a_stack_stop_where_they_stop_alone() -> None:
    """A held-out plateau stops each model at its own step; the others train on as one smaller stack, each still
    the model trained alone (its stop, held-out numbers, parameters, history and snapshots, bit for bit)."""
    small = dict(steps=60, batch=8, held_out=20, patience=1, check_every=10)
    configs = [TrainConfig.for_task("grammar", seed=seed, heads=1, **small) for seed in (0, 3, 5)]
    together = train_many(configs)
    assert any(r.stopped is not None for r in together)  # the rule fired: a run stopped before the cap
    for stacked, alone in zip(together, (train(c) for c in configs)):
        assert stacked.stopped == alone.stopped
        ran = stacked.stopped or stacked.config.steps
        assert len(stacked.history_loss) == ran and stacked.snapshot_steps[-1] == ran
        assert len(stacked.snapshots) == len(stacked.snapshot_steps) == len(stacked.snapshot_accuracy)
        for name, value in alone.model.params.items():
            _close(stacked.model.params[name], value, name)
        _close(stacked.history_loss, alone.history_loss, "history")
        _close(stacked.snapshots, alone.snapshots, "snapshots")
        assert stacked.relation_accuracy == alone.relation_accuracy
