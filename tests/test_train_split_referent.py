"""The experiment ``TrainConfig.split_referent``: one readout per kind of referent, in training and scoring only."""

from __future__ import annotations

import numpy as np
import pytest

from mhacli.grammar.card import SUB_RELATIONS
from mhacli.grammar.heldout import held_out
from mhacli.attention.errors import UsageError
from mhacli.grammar.grammar import LONGEST, RELATIONS
from mhacli.grammar.knockout import knockout, query_targets, row_accuracy
from mhacli.grammar.tasks import SPLIT_TARGETS, get_task
from mhacli.grammar.passes import loss_and_grads
from mhacli.grammar.model import TrainConfig
from mhacli.grammar.train import count_parameters, init_params, train
from gradients import central_differences


def test_the_split_task_asks_each_kind_of_referent_at_its_own_words_and_nothing_else() -> None:
    """Same draws as the grammar; each kind's keys sit only at its words, and together they are the referent's."""
    plain, split = get_task("grammar"), get_task("grammar").by_referent_kind()
    ids, targets, keys = plain.sample(np.random.default_rng(4), 300, LONGEST)  # (B, N), (4, B, N), (4, B, N)
    ids_s, targets_s, keys_s = split.sample(np.random.default_rng(4), 300, LONGEST)  # (6, B, N) each
    np.testing.assert_array_equal(ids, ids_s)
    assert split.targets == SPLIT_TARGETS and keys_s.shape[0] == 6
    np.testing.assert_array_equal(keys_s[:3], keys[:3])  # subject, object, recipient unchanged
    np.testing.assert_array_equal(targets_s[:3], targets[:3])
    vocabulary = plain.vocabulary
    referent = keys[RELATIONS.index("referent")]  # (B, N)
    for t, kind in enumerate(SPLIT_TARGETS[3:], start=3):
        at_kind = np.isin(ids, [vocabulary.index(w) for w in SUB_RELATIONS[kind]])  # (B, N)
        assert (keys_s[t] >= 0).any(), kind  # every kind is asked in 300 sentences
        np.testing.assert_array_equal(keys_s[t], np.where(at_kind, referent, -1))
    np.testing.assert_array_equal(split.relation_keys(keys_s), keys)  # put back together: the referent's keys
    assert ((keys_s[3:] >= 0).sum(axis=0) <= 1).all()  # one kind per query


def test_only_the_grammar_can_split_its_referent_and_the_flag_is_a_boolean() -> None:
    with pytest.raises(UsageError, match="only the grammar's referent"):
        TrainConfig(task="neighbours", split_referent=True)
    with pytest.raises(UsageError, match="split_referent must be true or false"):
        TrainConfig.for_task("grammar", split_referent=1)  # type: ignore[arg-type]
    assert TrainConfig().split_referent is False and TrainConfig.for_task("grammar").split_referent is False


@pytest.mark.slow
def test_the_split_readouts_are_counted_and_their_loss_has_exact_gradients() -> None:
    """Six readouts instead of four; the grammar's own levers (asked answers, concentration) on them match finite
    differences."""
    plain = TrainConfig.for_task("grammar")
    split = TrainConfig.for_task("grammar", split_referent=True)
    v, d = len(get_task("grammar").vocabulary), plain.d_model
    assert count_parameters(split) - count_parameters(plain) == 2 * v * d
    config = TrainConfig(task="grammar", heads=2, d_model=4, length=LONGEST, batch=4, positions="learned",
                         word_values=True, split_referent=True)
    task = config.the_task()
    rng = np.random.default_rng(15)
    params = init_params(config, task, rng)
    assert params["readout"].shape == (6, v, 4)
    ids, targets, keys = task.sample(rng, config.batch, config.length)
    asked = task.scored(keys)
    assert asked[3:].any(axis=(1, 2)).all()  # every kind of referent is asked in the batch

    def loss() -> float:
        return loss_and_grads(params, ids, targets, 2, False, task.pad, True, asked, 0.0, None, 0.3)[0]

    _, grads, _ = loss_and_grads(params, ids, targets, 2, False, task.pad, True, asked, 0.0, None, 0.3)
    eps = 1e-6
    for name in ("W_q", "W_v", "W_o", "readout"):
        value = params[name]
        numeric = central_differences(loss, value, eps)
        assert np.abs(numeric).max() > 0, name
        np.testing.assert_allclose(grads[name], numeric, atol=1e-8, rtol=1e-6, err_msg=name)


@pytest.fixture(scope="module")
def split_model():
    config = TrainConfig.for_task("grammar", heads=2, d_model=8, steps=400, held_out=20, split_referent=True)
    return train(config).model


@pytest.mark.slow
def test_scoring_reads_each_kind_of_referent_from_its_own_readout(split_model) -> None:
    """Logits right only on the feeling readout: the feeling row scores 100 %, he/she and place 0 %, and the
    referent exactly the feeling queries' share of its own."""
    model = split_model
    assert model.targets == SPLIT_TARGETS
    ids, keys, rows = held_out(model, 200, 3)  # (S, N), (R, S, N)
    truth = np.take_along_axis(ids, keys[rows.index("referent")].clip(0), axis=-1)  # (S, N)
    v = len(model.vocabulary)
    logits = np.zeros((*ids.shape, len(model.targets), v))  # (S, N, T, V)
    logits[..., :, :] = np.eye(v)[(truth + 1) % v][:, :, None, :]  # every readout names a wrong word …
    logits[..., model.targets.index("feeling"), :] = np.eye(v)[truth]  # … except the feeling readout
    acc = dict(zip(rows, row_accuracy(logits, ids, keys, query_targets(model.targets, rows, model.vocabulary, ids))))
    assert acc["feeling"] == 1.0 and acc["he/she"] == 0.0 and acc["place"] == 0.0
    asked = {r: int((keys[rows.index(r)] >= 0).sum()) for r in ("referent", "feeling")}
    assert 0 < asked["feeling"] < asked["referent"]
    assert acc["referent"] == asked["feeling"] / asked["referent"]


def test_the_knockout_of_a_split_model_matches_a_query_by_query_count(split_model) -> None:
    """Each row's accuracy with every head, counted one query at a time from the readout of the query's kind."""
    model = split_model
    knock = knockout(model, sentences=60, seed=5)
    ids, keys, rows = held_out(model, 60, 5)
    logits = model.forward(ids)["logits"]  # (S, N, T, V)
    kind_of = {model.vocabulary.index(w): kind for kind, words in SUB_RELATIONS.items() for w in words}
    for r, row in enumerate(rows):
        right = asked = 0
        for b, q in zip(*np.nonzero(keys[r] >= 0)):
            reader = kind_of[int(ids[b, q])] if row == "referent" else row
            right += int(logits[b, q, model.targets.index(reader)].argmax() == ids[b, keys[r, b, q]])
            asked += 1
        assert asked > 0, row
        assert knock.full[r] == right / asked, row
