"""The training core: gradients (finite differences, torch), falling loss, determinism, equal parameter counts."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import numpy as np
import pytest

from mhacli.attention.errors import UsageError
from mhacli.grammar.grammar import LONGEST
from mhacli.grammar.tasks import BOUNDARY, TASKS, VOCABULARY, get_task
from mhacli.grammar.passes import forward as train_forward
from mhacli.grammar.passes import loss_and_grads
from mhacli.grammar.model import TrainConfig, head_relations
from mhacli.grammar.train import count_parameters, init_params, snapshot_steps, train

from gradients import central_differences

TINY = dict(d_model=4, length=5, batch=3)


def _setup(task: str, heads: int, causal: bool, positions: str = "learned", word_values: bool = False):
    config = TrainConfig(task=task, heads=heads, causal=causal, positions=positions, word_values=word_values,
                         **TINY)
    rng = np.random.default_rng(7)
    params = init_params(config, get_task(task), rng)
    ids, targets = get_task(task).batch(rng, config.batch, config.length)
    return config, params, ids, targets


@pytest.mark.parametrize("causal, heads, word_values", [(False, 1, False), (False, 2, False), (True, 1, False),
                                                        (True, 2, False), (False, 2, True), (True, 1, True)])
def test_every_gradient_matches_central_finite_differences(causal: bool, heads: int, word_values: bool) -> None:
    """Values from X = E + P, and from the word embeddings E alone (positions then reach only Q and K)."""
    config, params, ids, targets = _setup("relations", heads, causal, word_values=word_values)
    _, grads, _ = loss_and_grads(params, ids, targets, heads, causal, None, word_values)
    eps = 1e-6
    for name, value in params.items():
        assert grads[name].shape == value.shape, name
        numeric = central_differences(
            lambda: loss_and_grads(params, ids, targets, heads, causal, None, word_values)[0], value, eps)
        assert np.abs(numeric).max() > 0 or name == "positions", f"{name}: the loss does not depend on it"
        np.testing.assert_allclose(grads[name], numeric, atol=1e-8, rtol=1e-6, err_msg=name)


@pytest.mark.torch
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_torch_autograd(causal: bool) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: the autograd comparison needs it")
    heads = 2
    config, params, ids, targets = _setup("neighbours", heads, causal)
    loss, grads, _ = loss_and_grads(params, ids, targets, heads, causal)

    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    mha = torch.nn.MultiheadAttention(config.d_model, heads, bias=False, batch_first=True, dtype=torch.float64)
    # PyTorch's in_proj_weight is W_q, W_k, W_v stacked; these are our tensors, so autograd reaches them.
    del mha.in_proj_weight, mha.out_proj.weight
    mha.in_proj_weight = torch.cat([t["W_q"], t["W_k"], t["W_v"]])
    mha.out_proj.weight = t["W_o"]
    x = t["embedding"][torch.as_tensor(ids)] + t["positions"]
    mask = torch.as_tensor(np.triu(np.ones((config.length,) * 2, dtype=bool), 1)) if causal else None
    out, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    n_targets, n_vocab, d = params["readout"].shape
    logits = (out @ t["readout"].reshape(n_targets * n_vocab, d).T).reshape(-1, n_vocab)  # (B·N·T, V)
    labels = torch.as_tensor(np.moveaxis(targets, 0, -1).reshape(-1))
    torch_loss = torch.nn.functional.cross_entropy(logits, labels)
    torch_loss.backward()
    assert math.isclose(loss, torch_loss.item(), rel_tol=1e-12)
    for name in params:
        np.testing.assert_allclose(grads[name], t[name].grad.numpy(), atol=1e-12, rtol=1e-9, err_msg=name)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_the_loss_falls_on_every_task(task: str) -> None:
    length = LONGEST if task == "grammar" else 6  # the grammar's longest sentence
    result = train(TrainConfig(task=task, heads=2, d_model=8, steps=100, batch=16, length=length, lr=0.05,
                               held_out=20))
    early, late = result.history_loss[:10].mean(), result.history_loss[-10:].mean()
    assert late < 0.8 * early, (task, early, late)
    assert result.history_loss.shape == result.history_accuracy.shape == (100,)


def test_same_seed_gives_identical_arrays_and_another_seed_does_not() -> None:
    config = TrainConfig(heads=2, d_model=8, steps=25, batch=4, length=6, held_out=10)
    a, b, c = train(config), train(config), train(TrainConfig(**{**vars(config), "seed": 1}))
    for name in a.model.params:
        assert np.array_equal(a.model.params[name], b.model.params[name]), name
    assert np.array_equal(a.history_loss, b.history_loss) and np.array_equal(a.snapshots, b.snapshots)
    assert not np.array_equal(a.model.params["W_q"], c.model.params["W_q"])


def test_parameter_count_is_the_same_for_every_head_count_and_matches_the_arrays() -> None:
    counts = set()
    for heads in (1, 2, 4, 8):
        for positions in ("learned", "sinusoidal"):
            config = TrainConfig(heads=heads, d_model=8, positions=positions)
            params = init_params(config, get_task(config.task), np.random.default_rng(0))
            trained = [n for n in params if positions == "learned" or n != "positions"]
            assert count_parameters(config) == sum(params[n].size for n in trained)
        counts.add(count_parameters(TrainConfig(heads=heads, d_model=8)))
    assert len(counts) == 1


def test_result_is_frozen_and_shaped() -> None:
    result = train(TrainConfig(heads=2, d_model=8, steps=9, batch=4, length=6, held_out=10, snapshots=3))
    assert result.snapshot_steps == (0, 2, 9)
    assert result.snapshots.shape == (3, 2, 6, 6)
    np.testing.assert_allclose(result.snapshots.sum(axis=-1), 1.0)
    assert len(result.snapshot_tokens) == 6 and set(result.snapshot_tokens) <= set(VOCABULARY) - {BOUNDARY}
    with pytest.raises(ValueError):
        result.history_loss[0] = 0.0
    with pytest.raises(ValueError):
        result.model.params["W_q"][0, 0] = 0.0
    assert 0.0 <= result.accuracy <= 1.0 and len(result.model.relations) == 2


def test_snapshot_steps_run_from_start_to_end() -> None:
    assert snapshot_steps(1000, 5) == (0, 62, 250, 562, 1000)
    assert snapshot_steps(2, 5) == (0, 1, 2)


def test_head_relations_name_the_place_each_head_looks_at() -> None:
    n = 5
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1.0  # the first query has no previous token; it does not count
    first = np.zeros((n, n))
    first[:, 0] = 1.0
    weights = np.stack([prev, np.eye(n, k=1) + np.eye(n, k=-(n - 1)), first])[None]  # (1, 3, N, N)
    labels = head_relations(weights)
    assert [name for name, _ in labels] == ["previous token", "next token", "first token"]
    assert [share for _, share in labels] == [1.0, 1.0, 1.0]


def test_tasks_give_boundaries_at_the_ends() -> None:
    ids = np.array([[0, 1, 2, 3]])
    targets = get_task("relations").batch(np.random.default_rng(0), 1, 4)[1]
    assert targets.shape == (4, 1, 4)
    b = VOCABULARY.index(BOUNDARY)
    ids, targets = get_task("neighbours").batch(np.random.default_rng(3), 2, 4)
    assert (targets[0, :, 0] == b).all() and (targets[1, :, -1] == b).all()
    assert np.array_equal(targets[0, :, 1:], ids[:, :-1]) and np.array_equal(targets[1, :, :-1], ids[:, 1:])


@pytest.mark.parametrize("bad, words", [
    (dict(task="neighbors"), "unknown task 'neighbors'"),
    (dict(steps=0), "steps must be at least 1"),
    (dict(steps=100_001), "steps must be at most 100,000, got 100,001"),
    (dict(batch=4_097), "batch must be at most 4,096"),
    (dict(length=257), "length must be at most 256"),
    (dict(held_out=10**6), "held_out must be at most 100,000"),
    (dict(lr=0.0), "lr must be a finite number above 0"),
    (dict(lr=float("nan")), "lr must be a finite number above 0"),
    (dict(lr=float("inf")), "lr must be a finite number above 0"),
    (dict(heads=3), "d_model=16 is not divisible by heads=3"),
    (dict(positions="rotary"), "positions must be one of learned, sinusoidal"),
])
def test_bad_configs_are_usage_errors_in_python_words(bad: dict, words: str) -> None:
    with pytest.raises(UsageError) as info:
        TrainConfig(**bad)
    assert words in str(info.value)


@pytest.mark.torch_aware
def test_bench_train_reports_both_sides_and_their_ratio() -> None:
    from mhacli.bench.train import bench_train

    config = TrainConfig(heads=2, d_model=8, batch=4, length=6)
    report = bench_train(repeats=2, steps=2, config=config)
    assert len(report["numpy_times"]) == 2 and report["numpy_seconds_per_step"] > 0
    try:
        import torch  # noqa: F401
    except ImportError:
        assert report["ratio"] is None and report["torch_seconds_per_step"] is None
    else:
        fastest = report["torch"][report["fastest_torch"]]
        assert report["torch_seconds_per_step"] == min(side["median"] for side in report["torch"].values())
        assert report["ratio"] == statistics.median(n / t for n, t in zip(report["numpy_times"], fastest["seconds"]))
        assert len(report["torch"]) == 4  # nn.MultiheadAttention and by hand, float32 and float64


@pytest.mark.torch
@pytest.mark.parametrize("heads", [1, 4])
def test_the_bench_times_the_same_loss_and_gradients_in_pytorch_as_mha_train_computes(heads) -> None:
    """mha bench --train's PyTorch side is the grammar model mha train trains, its two penalties included:
    same loss and same gradients as numpy's step on one batch (a bench that timed less would flatter one side)."""
    torch = pytest.importorskip("torch")
    from mhacli.bench.train import _torch_model, numpy_loss

    config = TrainConfig.for_task("grammar", heads=heads, d_model=8, batch=6)
    assert config.head_concentration and config.head_overlap  # the grammar's defaults are what is timed
    task = get_task("grammar")
    rng = np.random.default_rng(5)
    params = init_params(config, task, rng)
    ids, targets, keys = task.sample(rng, config.batch, config.length)
    scored = task.scored(keys)
    loss, grads, _ = numpy_loss(config, params, ids, targets, scored, task.pad)
    _, model, _ = _torch_model(config, {k: v.copy() for k, v in params.items()})
    theirs = model.loss(torch.as_tensor(ids), torch.as_tensor(targets), torch.as_tensor(scored))
    theirs.backward()
    assert math.isclose(theirs.detach().item(), loss, rel_tol=1e-12)
    in_proj = model.attention.in_proj_weight.grad.numpy()
    for name, got in (("embedding", model.embedding.grad.numpy()), ("readout", model.readout.grad.numpy()),
                      ("W_o", model.attention.out_proj.weight.grad.numpy()),
                      ("W_q", in_proj[:8]), ("W_k", in_proj[8:16]), ("W_v", in_proj[16:])):
        np.testing.assert_allclose(got, grads[name], rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.torch
@pytest.mark.parametrize("hand, dtype, tolerance", [(True, "float64", 1e-12), (False, "float32", 1e-4),
                                                    (True, "float32", 1e-4)])
def test_every_pytorch_side_of_the_bench_computes_the_same_loss(hand: bool, dtype: str, tolerance: float) -> None:
    """The hand-written layer and the float32 sides time the same model: the loss of numpy's step on one batch."""
    torch = pytest.importorskip("torch")
    from mhacli.bench.train import _torch_model, numpy_loss

    config = TrainConfig.for_task("grammar", heads=4, d_model=8, batch=6)
    task = get_task("grammar")
    rng = np.random.default_rng(5)
    params = init_params(config, task, rng)
    ids, targets, keys = task.sample(rng, config.batch, config.length)
    loss = numpy_loss(config, params, ids, targets, task.scored(keys), task.pad)[0]
    _, model, _ = _torch_model(config, {k: v.copy() for k, v in params.items()}, hand, dtype)
    theirs = model.loss(torch.as_tensor(ids), torch.as_tensor(targets), torch.as_tensor(task.scored(keys)))
    assert math.isclose(theirs.detach().item(), loss, rel_tol=tolerance)


def test_gradients_with_the_grammar_s_padding_mask_match_finite_differences() -> None:
    task = get_task("grammar")
    config = TrainConfig(task="grammar", heads=2, d_model=4, length=LONGEST, batch=2, positions="learned",
                         word_values=True)
    rng = np.random.default_rng(3)
    params = init_params(config, task, rng)
    ids, targets = task.batch(rng, config.batch, config.length)
    assert np.any(ids == task.pad)  # the batch has padding, so the mask is exercised
    loss = lambda: loss_and_grads(params, ids, targets, 2, False, task.pad, True)[0]  # noqa: E731
    _, grads, _ = loss_and_grads(params, ids, targets, 2, False, task.pad, True)
    eps = 1e-6
    for name in ("W_q", "W_k", "W_v", "W_o", "embedding"):
        value = params[name]
        numeric = central_differences(loss, value, eps)
        np.testing.assert_allclose(grads[name], numeric, atol=1e-8, rtol=1e-6, err_msg=name)
    weights = train_forward(params, ids, 2, False, task.pad)["weights"]  # (B, h, N, N)
    padded = ids == task.pad
    assert np.all(weights[:, :, :, padded[0]][0] == 0)  # no query looks at the padding


def test_a_head_below_half_of_its_queries_learned_no_clear_relation() -> None:
    from mhacli.grammar.grammar import NO_RELATION

    b, n = 20, 8
    weights = np.full((b, 2, n, n), 1.0 / n)
    for q in range(1, n):  # head 1 looks one place back on every query that has one
        weights[:, 0, q, :] = 0.0
        weights[:, 0, q, q - 1] = 1.0
    for q in range(n):  # head 2 looks at itself on 2 of 8 queries, elsewhere at random keys
        weights[:, 1, q, :] = 0.0
        weights[:, 1, q, q if q < 2 else (q * 5 + 3) % n] = 1.0
    (first, share1), (second, share2) = head_relations(weights)
    assert (first, share1) == ("previous token", 1.0)
    assert second == NO_RELATION and share2 < 0.5


def test_values_from_the_word_embeddings_alone_ignore_the_positions() -> None:
    """word_values: positions reach Q and K only, so moving every position changes no value."""
    config = TrainConfig(task="neighbours", heads=2, d_model=8, length=6, word_values=True)
    params = init_params(config, get_task("neighbours"), np.random.default_rng(0))
    ids = np.random.default_rng(1).integers(0, 10, (3, 6))  # (B, N)
    moved = {**params, "positions": params["positions"] + 1.0}
    before, after = train_forward(params, ids, 2, False, None, True), train_forward(moved, ids, 2, False, None, True)
    np.testing.assert_array_equal(before["v"], after["v"])
    assert not np.allclose(before["q"], after["q"])
    mixed = train_forward(params, ids, 2, False, None, False)  # the default: V = X W_vᵀ, positions included
    assert not np.allclose(mixed["v"], before["v"])


def test_a_model_with_word_values_is_traced_and_verified_as_it_computes() -> None:
    """The walkthrough's step table says V^i = E W_v^i for such a model, and its arrays pass the slow loop."""
    from traced import run
    from mhacli.measures.verify import verify
    from mhacli.models.trained import trained_run

    result = train(TrainConfig(task="neighbours", heads=2, d_model=8, steps=5, word_values=True, held_out=10))
    trace = trained_run("a b c d e f", result.model)
    assert trace.word_values
    np.testing.assert_array_equal(trace.X_v, trace.embeddings)
    assert [s.formula for s in trace.steps if s.key == "value"] == ["V^i = E W_v^i"]
    ids = result.model.ids(list("abcdef"))
    np.testing.assert_allclose(trace.weights, result.model.attention(ids[None])[0], atol=1e-12)
    assert all(check.ok for check in verify(trace)), verify(trace)
    assert trace.split_equals_direct() < 1e-12
    plain = run("a b c d e f", heads=2, d_model=8)  # the random model: values from X, as before
    assert not plain.word_values and [s.formula for s in plain.steps if s.key == "value"] == ["V^i = X W_v^i"]


def test_a_saved_trace_of_such_a_model_verifies_after_loading(tmp_path) -> None:
    from mhacli.measures.verify import verify
    from mhacli.io.export import load_trace, save_npz
    from mhacli.models.trained import trained_run

    result = train(TrainConfig(task="neighbours", heads=2, d_model=8, steps=5, word_values=True, held_out=10))
    path = save_npz(trained_run("a b c d e f", result.model), tmp_path / "t.npz")
    loaded = load_trace(path)
    assert loaded.word_values and all(check.ok for check in verify(loaded))


def _grammar_batch(heads: int = 2):
    task = get_task("grammar")
    config = TrainConfig(task="grammar", heads=heads, d_model=4, length=LONGEST, batch=2, positions="learned",
                         word_values=True)
    rng = np.random.default_rng(5)
    params = init_params(config, task, rng)
    ids, targets, keys = task.sample(rng, config.batch, config.length)
    return task, params, ids, targets, task.scored(keys)


@pytest.mark.parametrize("scored_loss, sparsity, dropped, concentration", [
    (True, 0.0, False, 0.0), (False, 0.05, False, 0.0), (True, 0.05, False, 0.0), (False, 0.0, True, 0.0),
    (False, 0.0, False, 0.3), (True, 0.0, False, 0.3)])
@pytest.mark.slow
def test_the_training_levers_match_finite_differences(scored_loss: bool, sparsity: float, dropped: bool,
                                                       concentration: float) -> None:
    """The loss over the asked answers only, the group-lasso penalty on R_t W_o^i, a dropped head's zero
    output and the concentration penalty ‖n‖₁/‖n‖₂ have exact gradients."""
    task, params, ids, targets, scored = _grammar_batch()
    asked = scored if scored_loss else None
    kept = np.array([[1.0, 0.0], [1.0, 1.0]]) if dropped else None  # head 2 off in the first sentence
    loss = lambda: loss_and_grads(params, ids, targets, 2, False, task.pad, True, asked, sparsity,  # noqa: E731
                                  kept, concentration)[0]
    _, grads, _ = loss_and_grads(params, ids, targets, 2, False, task.pad, True, asked, sparsity, kept,
                                 concentration)
    eps = 1e-6
    for name in ("W_q", "W_v", "W_o", "embedding", "readout"):
        value = params[name]
        numeric = central_differences(loss, value, eps)
        assert np.abs(numeric).max() > 0, name
        np.testing.assert_allclose(grads[name], numeric, atol=1e-8, rtol=1e-6, err_msg=name)


def test_the_scored_loss_is_the_mean_over_the_asked_answers_and_ignores_the_rest() -> None:
    """Its value is the plain mean of −log softmax at the asked answers; answers nowhere asked do not move it."""
    task, params, ids, targets, scored = _grammar_batch()
    loss, _, correct = loss_and_grads(params, ids, targets, 2, False, task.pad, True, scored)
    logits = train_forward(params, ids, 2, False, task.pad, True)["logits"]  # (B, N, T, V)
    slow, n = 0.0, 0
    for t, b, q in zip(*np.nonzero(scored)):
        row = logits[b, q, t]
        slow += math.log(np.exp(row - row.max()).sum()) + row.max() - row[targets[t, b, q]]
        n += 1
        assert correct[b, q, t] == (row.argmax() == targets[t, b, q])
    assert n > 0 and math.isclose(loss, slow / n, rel_tol=1e-12)
    moved = np.where(scored, targets, (targets + 1) % len(task.vocabulary))  # change every unasked answer
    assert loss_and_grads(params, ids, moved, 2, False, task.pad, True, scored)[0] == loss


def test_the_head_sparsity_penalty_is_the_sum_of_each_readout_s_norm_on_each_head() -> None:
    from mhacli.grammar.passes import head_sparsity

    _, params, _, _, _ = _grammar_batch(heads=2)
    w_r, w_o = params["readout"], params["W_o"]
    penalty, _, _ = head_sparsity(w_r, w_o, 2, 0.3)
    slow = sum(np.linalg.norm(w_r[t] @ w_o[:, 2 * i:2 * i + 2]) for t in range(w_r.shape[0]) for i in range(2))
    assert math.isclose(penalty, 0.3 * slow, rel_tol=1e-12)
    w_o_zero = np.array(w_o)
    w_o_zero[:, 2:] = 0.0  # head 2 read by no readout: its blocks cost nothing, and their gradient is finite
    p, d_w_r, d_w_o = head_sparsity(w_r, w_o_zero, 2, 0.3)
    assert math.isclose(p, 0.3 * sum(np.linalg.norm(w_r[t] @ w_o[:, :2]) for t in range(w_r.shape[0])))
    assert np.isfinite(d_w_r).all() and np.isfinite(d_w_o).all()


def test_the_overlap_penalty_is_the_sum_over_pairs_of_heads_and_its_gradient_matches_finite_differences() -> None:
    """λ mean_q Σ_{i≠j} ⟨A_i[q], A_j[q]⟩, read pair by pair; zero for one head; through the softmax to W_q."""
    from mhacli.grammar.passes import head_overlap

    weights = np.random.default_rng(3).dirichlet(np.ones(5), size=(2, 3, 5))  # (B, h, N, N), rows sum to 1
    slow = sum(float(weights[b, i, q] @ weights[b, j, q]) for b in range(2) for q in range(5)
               for i in range(3) for j in range(3) if i != j) / (2 * 5)
    penalty, d_weights = head_overlap(weights, 0.4)
    assert math.isclose(penalty, 0.4 * slow, rel_tol=1e-12)
    numeric = central_differences(lambda: head_overlap(weights, 0.4)[0], weights)
    np.testing.assert_allclose(d_weights, numeric, atol=1e-8)
    alone, d_alone = head_overlap(weights[:, :1], 0.4)  # one head has no other head to share a key with
    assert alone == 0.0 and not d_alone.any()
    # Only the rows of a sentence's words are queries: padding rows weigh nothing, and the mean is over the others.
    queries = np.array([[True, True, True, False, False], [True, True, True, True, False]])  # (B, N)
    counted = sum(float(weights[b, i, q] @ weights[b, j, q]) for b in range(2) for q in range(5) if queries[b, q]
                  for i in range(3) for j in range(3) if i != j) / queries.sum()
    masked, d_masked = head_overlap(weights, 0.4, queries)
    assert math.isclose(masked, 0.4 * counted, rel_tol=1e-12)
    np.testing.assert_allclose(d_masked, central_differences(lambda: head_overlap(weights, 0.4, queries)[0], weights),
                               atol=1e-8)
    assert not d_masked[~np.broadcast_to(queries[:, None, :, None], d_masked.shape)].any()
    task, params, ids, targets, scored = _grammar_batch(heads=2)

    def loss() -> float:
        return loss_and_grads(params, ids, targets, 2, False, task.pad, True, scored, overlap=0.3)[0]

    grads = loss_and_grads(params, ids, targets, 2, False, task.pad, True, scored, overlap=0.3)[1]
    without = loss_and_grads(params, ids, targets, 2, False, task.pad, True, scored)[1]
    assert not np.allclose(grads["W_q"], without["W_q"])  # the penalty reaches the queries through the softmax
    np.testing.assert_allclose(grads["W_q"], central_differences(loss, params["W_q"]), atol=1e-7)


@pytest.mark.torch
@pytest.mark.parametrize("penalty", ["sparsity", "concentration", "overlap"])
def test_the_scored_loss_and_penalty_match_torch_autograd(penalty: str) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: the autograd comparison needs it")
    task, params, ids, targets, scored = _grammar_batch(heads=2)
    sparsity, concentration, overlap = {"sparsity": (0.05, 0.0, 0.0), "concentration": (0.0, 0.05, 0.0),
                                        "overlap": (0.0, 0.0, 0.05)}[penalty]
    loss, grads, _ = loss_and_grads(params, ids, targets, 2, False, task.pad, True, scored, sparsity, None,
                                    concentration, overlap)
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    x = t["embedding"][torch.as_tensor(ids)] + t["positions"]
    xv = t["embedding"][torch.as_tensor(ids)]
    b, n, d = x.shape

    def heads_of(y, w):
        return (y @ w.T).reshape(b, n, 2, d // 2).transpose(1, 2)

    q, k, v = heads_of(x, t["W_q"]), heads_of(x, t["W_k"]), heads_of(xv, t["W_v"])
    s = q @ k.transpose(-1, -2) / math.sqrt(d // 2)
    s = s.masked_fill(torch.as_tensor(ids == task.pad)[:, None, None, :], float("-inf"))
    a = torch.softmax(s, -1)  # (B, h, N, N)
    o = (a @ v).transpose(1, 2).reshape(b, n, d) @ t["W_o"].T
    mask = torch.as_tensor(scored)
    logits = torch.cat([o[mask[r]] @ t["readout"][r].T for r in range(scored.shape[0])])
    labels = torch.cat([torch.as_tensor(targets[r][scored[r]]) for r in range(scored.shape[0])])
    norms = torch.stack([torch.stack([torch.linalg.norm(t["readout"][r] @ t["W_o"][:, 2 * i:2 * i + 2])
                                      for i in range(2)]) for r in range(scored.shape[0])])  # (T, h)
    if penalty == "overlap":  # Σ_{i≠j} ⟨A_i[q], A_j[q]⟩ over the query rows of the sentences' words, their mean
        real = torch.as_tensor(ids != task.pad, dtype=torch.float64)  # (B, N): padding is no query
        term = 2 * ((a[:, 0] * a[:, 1]).sum(-1) * real).sum() / real.sum()
    elif penalty == "sparsity":
        term = norms.sum()
    else:
        term = (norms.sum(1) / torch.linalg.norm(norms, dim=1)).sum()
    torch_loss = torch.nn.functional.cross_entropy(logits, labels) + 0.05 * term
    torch_loss.backward()
    assert math.isclose(loss, torch_loss.item(), rel_tol=1e-12)
    for name in ("embedding", "W_q", "W_k", "W_v", "W_o", "readout"):
        np.testing.assert_allclose(grads[name], t[name].grad.numpy(), atol=1e-12, rtol=1e-9, err_msg=name)


def test_head_dropout_switches_one_head_off_in_the_share_asked_and_is_the_knockout_s_zero() -> None:
    from mhacli.grammar.knockout import logits_without
    from mhacli.grammar.train import dropped_heads

    config = TrainConfig.for_task("grammar", batch=4000, head_dropout=0.25)
    kept = dropped_heads(np.random.default_rng(0), config)  # (B, h)
    off = (kept == 0).sum(axis=1)  # (B,)
    assert set(np.unique(off)) == {0, 1} and abs(off.mean() - 0.25) < 0.03
    assert np.allclose(np.bincount(kept.argmin(axis=1)[off == 1], minlength=4) / (off == 1).sum(), 0.25, atol=0.04)
    assert (dropped_heads(np.random.default_rng(0), replace(config, head_dropout=0.0)) == 1).all()
    task, params, ids, _, _ = _grammar_batch()
    cache = train_forward(params, ids, 2, False, task.pad, True)
    off_1 = train_forward(params, ids, 2, False, task.pad, True, kept=np.array([[0.0, 1.0], [0.0, 1.0]]))
    np.testing.assert_allclose(off_1["logits"], logits_without(params, cache["heads"], 0), rtol=0, atol=1e-12)


def test_the_concentration_penalty_is_one_per_readout_that_reads_one_head_and_root_h_for_even_reading() -> None:
    from mhacli.grammar.passes import head_concentration

    _, params, _, _, _ = _grammar_batch(heads=2)
    w_r, w_o = params["readout"], params["W_o"]
    n = np.array([[np.linalg.norm(w_r[t] @ w_o[:, 2 * i:2 * i + 2]) for i in range(2)] for t in range(4)])
    penalty, _, _ = head_concentration(w_r, w_o, 2, 0.5)
    assert math.isclose(penalty, 0.5 * float((n.sum(1) / np.sqrt((n * n).sum(1))).sum()), rel_tol=1e-12)
    one = np.array(w_o)
    one[:, 2:] = 0.0  # every readout reads head 1 only
    assert math.isclose(head_concentration(w_r, one, 2, 0.5)[0], 0.5 * 4, rel_tol=1e-12)
    assert math.isclose(head_concentration(3.0 * w_r, w_o, 2, 0.5)[0], penalty, rel_tol=1e-12)  # any size
    alone, d_w_r, d_w_o = head_concentration(w_r, w_o, 1, 0.5)  # one head reads one head: nothing to push
    assert alone == 0.5 * 4 and not d_w_r.any() and not d_w_o.any()


@pytest.mark.parametrize("name", ["head_sparsity", "head_concentration", "head_overlap"])
@pytest.mark.parametrize("bad", [2.0, -0.1, float("nan"), True, "0.05"])
def test_a_penalty_s_strength_outside_0_to_1_is_refused_in_its_own_name(name: str, bad: object) -> None:
    with pytest.raises(UsageError) as caught:
        TrainConfig.for_task("grammar", **{name: bad})
    said = caught.value.worded(lambda n: n, "=")
    assert said.startswith(f"{name} must be a number from 0 to 1") and repr(bad) in said
    assert getattr(TrainConfig.for_task("grammar", **{name: 0.0}), name) == 0.0


def _grouped_batch(heads: int, kv_heads: int):
    task = get_task("grammar")
    config = TrainConfig(task="grammar", heads=heads, kv_heads=kv_heads, d_model=8, length=LONGEST, batch=2,
                         positions="learned", word_values=True)
    rng = np.random.default_rng(11)
    params = init_params(config, task, rng)
    ids, targets, keys = task.sample(rng, config.batch, config.length)
    return task, config, params, ids, targets, task.scored(keys)


@pytest.mark.parametrize("heads, kv_heads", [(4, 1), (4, 2), (2, 1)])
def test_shared_keys_and_values_have_gradients_that_match_finite_differences(heads: int, kv_heads: int) -> None:
    """Query head i reads key/value group i // (h/g): each group's W_k and W_v rows collect the gradients of every
    query head that reads them (with the overlap penalty, whose gradient passes through the shared keys too)."""
    task, config, params, ids, targets, scored = _grouped_batch(heads, kv_heads)
    d_kv = kv_heads * config.d_k
    assert params["W_k"].shape == params["W_v"].shape == (d_kv, config.d_model)
    loss = lambda: loss_and_grads(params, ids, targets, heads, False, task.pad, True, scored,  # noqa: E731
                                  overlap=0.1, concentration=0.05)[0]
    _, grads, _ = loss_and_grads(params, ids, targets, heads, False, task.pad, True, scored, overlap=0.1,
                                 concentration=0.05)
    for name in ("W_q", "W_k", "W_v", "W_o", "embedding", "positions"):
        value = params[name]
        assert grads[name].shape == value.shape, name
        numeric = central_differences(loss, value, 1e-6)
        assert np.abs(numeric).max() > 0, name
        np.testing.assert_allclose(grads[name], numeric, atol=1e-8, rtol=1e-6, err_msg=name)


def test_shared_keys_are_each_group_s_own_keys_and_the_full_layer_s_first_rows() -> None:
    """The forward pass: query heads of one group see the same keys and values, and g = h draws what the
    article's layer draws (so g changes how the first rows are shared, not where training starts)."""
    task, config, params, ids, _, _ = _grouped_batch(4, 2)
    cache = train_forward(params, ids, 4, False, task.pad, True)
    for head in range(4):
        np.testing.assert_array_equal(cache["k"][:, head], cache["k"][:, 2 * (head // 2)])
        np.testing.assert_array_equal(cache["v"][:, head], cache["v"][:, 2 * (head // 2)])
    full = init_params(replace(config, kv_heads=None), task, np.random.default_rng(11))
    for name in ("W_k", "W_v"):
        np.testing.assert_array_equal(params[name], full[name][:2 * config.d_k])
    assert count_parameters(config) == count_parameters(replace(config, kv_heads=None)) - 2 * 8 * 4
    assert count_parameters(replace(config, kv_heads=4)) == count_parameters(replace(config, kv_heads=None))


def test_kv_heads_must_divide_the_heads() -> None:
    with pytest.raises(UsageError, match="must divide"):
        TrainConfig.for_task("grammar", heads=4, kv_heads=3)


@pytest.mark.torch
def test_shared_keys_and_values_match_torch_autograd() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: the autograd comparison needs it")
    heads, g = 4, 2
    task, config, params, ids, targets, scored = _grouped_batch(heads, g)
    loss, grads, _ = loss_and_grads(params, ids, targets, heads, False, task.pad, True, scored)
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    ids_t = torch.as_tensor(ids)
    words = t["embedding"][ids_t]
    x = words + t["positions"][: ids.shape[1]]
    b, n, d, d_k = ids.shape[0], ids.shape[1], config.d_model, config.d_k
    q = (x @ t["W_q"].T).reshape(b, n, heads, d_k).transpose(1, 2)
    k = (x @ t["W_k"].T).reshape(b, n, g, d_k).transpose(1, 2)
    v = (words @ t["W_v"].T).reshape(b, n, g, d_k).transpose(1, 2)
    mask = ~torch.as_tensor(ids == task.pad)[:, None, None, :]  # True: may look
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    o = out.transpose(1, 2).reshape(b, n, d) @ t["W_o"].T  # (B, N, d)
    total, count = 0.0, 0
    for r in range(targets.shape[0]):
        rows = torch.as_tensor(np.flatnonzero(scored[r]))
        logits = o.reshape(b * n, d)[rows] @ t["readout"][r].T
        total = total + torch.nn.functional.cross_entropy(logits, torch.as_tensor(targets[r].reshape(-1)[
            np.flatnonzero(scored[r])]), reduction="sum")
        count += len(rows)
    torch_loss = total / count
    torch_loss.backward()
    assert math.isclose(loss, torch_loss.item(), rel_tol=1e-12)
    for name in ("W_q", "W_k", "W_v", "W_o", "embedding", "readout"):
        np.testing.assert_allclose(grads[name], t[name].grad.numpy(), atol=1e-12, rtol=1e-9, err_msg=name)
