"""Hard inputs, round four (issue 31): families 2 to 10, each with cases of its own.

Each test gives the installed ``mha`` (or the function under it) an input of the
family that was seen to fail, and checks the one-line answer, the exit code, and
that nothing was written, clobbered or reported other than as it ran.  Families
that are a space of inputs (names, integers, widths, dtypes) are property tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hard_inputs import one_error_line

from mhacli.core.errors import UsageError

MHA = Path(sys.executable).with_name("mha")
ENV = {**os.environ, "MPLBACKEND": "Agg", "COLUMNS": "100", "PYTHONWARNINGS": "default"}
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def mha(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 240,
        **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MHA), *args], cwd=cwd, env=env or ENV, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, **kw)  # type: ignore[call-overload]


def cli(*args: str) -> tuple[int, str, str]:
    """One in-process run through Typer's runner: exit code, stdout, stderr."""
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# ---------------------------------------------------------------------------
# Family 2: options a trained model decides
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("weights", ["grammar", "trained"])
@pytest.mark.parametrize(("option", "words"), [
    (["--no-positions"], "positions it was trained with"),
    (["--seed", "7"], "not from a seed"),
    (["--heads", "2"], "the trained model has --heads"),
    (["--causal"], "the trained model has --no-causal"),
])
def test_an_option_a_trained_model_decides_is_refused_with_the_reason(weights, option, words):
    code, out, err = cli("explain", "the dog chases a cat", "--weights", weights, *option, "--json")
    assert code == 2 and out == "", err
    assert err.startswith("mha: error: ") and words in err and len(err.strip().splitlines()) == 1, err
    assert option[0] in err  # the option typed is the one named


@pytest.mark.parametrize("command", ["compare", "demo"])
def test_no_positions_with_a_trained_model_is_refused_by_every_command(command, tmp_path):
    code, _, err = cli(command, "the dog chases a cat", "--weights", "grammar", "--no-positions",
                       "--out", str(tmp_path / "figs"))
    assert code == 2 and "--no-positions cannot take them out" in err, err
    assert not (tmp_path / "figs").exists()


def test_what_a_trained_model_decides_is_what_the_json_reports():
    from mhacli import run
    from mhacli.io.shipped import shipped_model_path
    from mhacli.io.trained import load_trained

    model, _ = load_trained(shipped_model_path(name="grammar"))
    result = run("the dog chases a cat", weights="grammar")
    assert result.config.positions is True and result.config.seed == model.config.seed
    assert (result.config.heads, result.config.d_model, result.config.causal) == (
        model.config.heads, model.config.d_model, model.config.causal)
    # The positions the banner calls on are the model's own, added to its embedding.
    assert np.allclose(result.trace.positions, model.positions_for(5))
    with pytest.raises(UsageError, match="positions=False cannot take them out"):
        run("the dog chases a cat", weights="grammar", positions=False)
    # The same values given explicitly are what ran, so they are taken.
    same = run("the dog chases a cat", weights="grammar", seed=model.config.seed, positions=True)
    assert np.array_equal(same.trace.weights, result.trace.weights)


# ---------------------------------------------------------------------------
# Family 3: one rule for names, one for integers
# ---------------------------------------------------------------------------

def _respelled(name: str, data: st.DataObject) -> str:
    """``name`` with spaces around it and some letters' case flipped."""
    flips = data.draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    body = "".join(c.swapcase() if f else c for c, f in zip(name, flips))
    return data.draw(st.sampled_from(["", " ", "  ", "\t"])) + body + data.draw(st.sampled_from(["", " ", "\t"]))


@FAST
@given(data=st.data())
def test_a_name_is_read_with_spaces_and_case_not_counting(data):
    from mhacli.core.checks import chosen, named_options, task_name
    from mhacli.core.config import DTYPES, TOKENIZERS, WEIGHT_KINDS
    from mhacli.core.tasks import TASKS

    for choices in (WEIGHT_KINDS, TOKENIZERS, DTYPES, tuple(TASKS)):
        name = data.draw(st.sampled_from(choices))
        assert chosen(_respelled(name, data), choices) == name
    task = data.draw(st.sampled_from(tuple(TASKS)))
    assert task_name(_respelled(task, data)) == task
    options = {"weights": _respelled("grammar", data), "tokenizer": _respelled("char", data)}
    assert named_options(options) == {"weights": "grammar", "tokenizer": "char"}
    # Not a name: handed back exactly as typed, for the caller to refuse quoting it.
    other = data.draw(st.text(min_size=1, max_size=12).filter(
        lambda t: t.strip().casefold() not in {c.casefold() for c in WEIGHT_KINDS}))
    assert chosen(other, WEIGHT_KINDS) == other


@pytest.mark.parametrize(("args", "quoted"), [
    (["explain", "the cat", "--weights", " gramar"], "' gramar'"),
    (["explain", "the cat", "--tokenizer", " chars "], "' chars '"),
    (["train", "--task", " gramar", "--steps", "1"], "' gramar'"),
    (["explain", "--sample", " kat"], "' kat'"),
])
def test_a_name_that_names_nothing_is_quoted_exactly_as_typed(args, quoted):
    code, _, err = cli(*args)
    assert code == 2 and quoted in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [
    ["explain", "the dog chases a cat", "--weights", " Grammar", "--json"],
    ["explain", "the cat", "--tokenizer", " CHAR", "--dtype", "Float32 ", "--json"],
    ["explain", "--sample", " Cat", "--json"],
])
def test_a_respelled_name_runs_and_reports_the_name_itself(args):
    code, out, err = cli(*args)
    assert code == 0, err
    config = json.loads(out)["config"]
    assert config["tokenizer"] in ("word", "char") and config["dtype"] in ("float64", "float32")
    if "--dtype" in args:
        assert (config["tokenizer"], config["dtype"]) == ("char", "float32")
    if " Grammar" in args:
        assert config["weights"] == "trained"


def test_a_respelled_task_trains_that_task(tmp_path):
    code, out, err = cli("train", "--task", " Relations ", "--steps", "2", "--no-plots", "--json")
    assert code == 0, err
    assert json.loads(out)["task"] == "relations"


@FAST
@given(parts=st.lists(st.integers(min_value=-3, max_value=2**70), min_size=1, max_size=4))
def test_head_counts_are_refused_each_by_its_own_message(parts):
    from mhacli.core.numbers import BOUND, head_counts

    text = ",".join(str(p) for p in parts)
    if any(p > BOUND for p in parts):
        with pytest.raises(UsageError, match="head counts up to"):
            head_counts(text)
    elif any(p < 0 for p in parts):  # '-1' is a number, but not a count: the digits rule says what is wanted
        with pytest.raises(UsageError, match="separated by commas|at least 1"):
            head_counts(text)
    elif any(p == 0 for p in parts):
        with pytest.raises(UsageError, match="at least 1"):
            head_counts(text)
    else:
        assert head_counts(text) == list(dict.fromkeys(parts))


@pytest.mark.parametrize(("value", "words"), [
    ("0", "at least 1"), ("1,0", "at least 1"), ("99999999999999999999", "up to 9,223,372,036,854,775,807"),
    ("x", "digits 0-9"),
])
def test_compare_says_what_is_wrong_with_a_head_count(value, words):
    code, _, err = cli("train", "--compare", value, "--steps", "1")
    assert code == 2 and words in err and "divisible by 0" not in err, err


def test_a_layer_number_too_large_is_not_called_not_digits(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.random((2, 2, 3, 3))  # (layers, h, N, N)
    np.savez(tmp_path / "att.npz", weights=w / w.sum(-1, keepdims=True), tokens=np.array(["a", "b", "c"]),
             layer_names=np.array(["Enc.0", "Enc.1"]))
    code, _, err = cli("show", str(tmp_path / "att.npz"), "--layer", "9" * 20, "--json")
    assert code == 2 and "digits 0-9" not in err and "is not a layer" in err, err
    code, out, err = cli("show", str(tmp_path / "att.npz"), "--layer", " enc.1 ", "--json")
    assert code == 0 and json.loads(out)["layer"] == 2, err


def _two_layers(path: Path, d: int = 8) -> None:
    rng = np.random.default_rng(1)
    state = {}
    for k in range(2):
        state[f"layers.{k}.self_attn.in_proj_weight"] = rng.standard_normal((3 * d, d))  # (3d, d)
        state[f"layers.{k}.self_attn.out_proj.weight"] = rng.standard_normal((d, d))  # (d, d)
    np.savez(path, **state)


@pytest.mark.parametrize(("layer", "ran"), [(" LAYERS.1.SELF_ATTN", "layer 2 of 2"),
                                            ("layers.0.self_attn", "layer 1 of 2"), ("2", "layer 2 of 2"),
                                            (np.int64(1), "layer 1 of 2")])
def test_explain_layer_takes_names_as_mha_show_does(tmp_path, layer, ran):
    from mhacli import run

    _two_layers(tmp_path / "two.npz")
    result = run("a b c", weights=str(tmp_path / "two.npz"), heads=2, layer=layer)
    assert any(ran in note for note in result.notes), result.notes


# ---------------------------------------------------------------------------
# Family 4: mha train's outputs decided before the first step
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["m.pt", "m.safetensors", "m", "model.pth"])
def test_a_save_name_weights_could_not_read_back_is_refused_before_training(tmp_path, name):
    code, out, err = cli("train", "--steps", "2", "--no-plots", "--save", str(tmp_path / name))
    assert code == 2 and "--weights could not read it back" in err and ".npz" in err, err
    assert list(tmp_path.iterdir()) == [] and "steps" not in out  # refused before the first step


def _chattr(path: Path, flag: str) -> bool:
    try:
        return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0
    except OSError:
        return False


def test_an_immutable_model_file_is_refused_before_the_first_step(tmp_path):
    target = tmp_path / "m.npz"
    target.write_bytes(b"earlier model")
    if not _chattr(target, "+i"):
        pytest.skip("chattr +i needs root on a file system with attributes")
    try:
        for args in (["train", "--steps", "2", "--no-plots", "--save", str(target)],
                     ["explain", "the cat", "--save-npz", str(target), "--out", str(tmp_path / "figs")]):
            code, out, err = cli(*args)
            assert code == 2 and "immutable" in err, err
            assert "held-out" not in out and not (tmp_path / "figs").exists()
        assert target.read_bytes() == b"earlier model"
    finally:
        _chattr(target, "-i")


def test_an_interrupted_train_says_it_replaced_the_earlier_model(tmp_path):
    from pause import paused

    (tmp_path / "m.npz").write_bytes(b"earlier model")
    argv = [str(MHA), "train", "--steps", "3", "--save", "m.npz", "--out", "figs"]
    # Paused inside the first figure's write: the model file was replaced just before.
    with paused(argv, cwd=tmp_path, env=ENV, name="training.png", stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE) as (proc, _):
        assert (tmp_path / "m.npz").read_bytes() != b"earlier model"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate()
    assert proc.returncode == 130, err
    assert len(err.strip().splitlines()) == 1 and "nothing half-written" in err, err
    assert "already replaced 'm.npz'" in err and "the earlier file is gone" in err, err


def test_an_interrupted_run_that_replaced_nothing_says_nothing_more(tmp_path):
    from pause import paused

    argv = [str(MHA), "train", "--steps", "3", "--save", "m.npz", "--out", "figs"]
    with paused(argv, cwd=tmp_path, env=ENV, name="training.png", stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE) as (proc, _):
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate()
    assert proc.returncode == 130 and "already replaced" not in err, err


# ---------------------------------------------------------------------------
# Family 7: every --json document follows its schema, on generated inputs
# ---------------------------------------------------------------------------

def _validate(kind: str, out: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from mhacli.io.schemas import schema

    jsonschema.validate(json.loads(out), schema(kind))


_TOKEN = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6).filter(
    lambda t: t.strip() != "")


@st.composite
def attention_files(draw: st.DrawFn) -> dict[str, np.ndarray]:
    """An attention file of 1-2 layers and 1-3 heads over 2-6 tokens: random, one-hot (a fixed token or a
    relation), uniform or causal heads; names for heads and layers or not."""
    layers, heads, n = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(2, 6))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    w = rng.random((layers, heads, n, n))  # (layers, h, N, N)
    for k in range(heads):
        kind = draw(st.sampled_from(["random", "fixed", "previous", "uniform"]))
        if kind == "fixed":
            w[:, k] = 0.0
            w[:, k, :, draw(st.integers(0, n - 1))] = 1.0  # every query on one key
        elif kind == "previous":
            w[:, k] = np.eye(n, k=-1)
            w[:, k, 0, 0] = 1.0
        elif kind == "uniform":
            w[:, k] = 1.0
    if draw(st.booleans()):
        w = w * np.tril(np.ones((n, n)))  # causal: later keys hidden
        empty = w.sum(-1) == 0  # (layers, h, N): a row whose one key was hidden looks at itself
        w[empty] = np.eye(n)[np.nonzero(empty)[2]]
    arrays: dict[str, np.ndarray] = {"weights": w / w.sum(-1, keepdims=True),
                                     "tokens": np.array(draw(st.lists(_TOKEN, min_size=n, max_size=n)))}
    if draw(st.booleans()):
        arrays["head_names"] = np.array(draw(st.lists(_TOKEN, min_size=heads, max_size=heads)))
    if draw(st.booleans()):
        arrays["layer_names"] = np.array([f"layer.{k}" for k in range(layers)])
    return arrays


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arrays=attention_files(), max_tokens=st.sampled_from([None, 3]))
def test_mha_show_json_of_any_attention_file_follows_the_view_schema(tmp_path, arrays, max_tokens):
    np.savez(tmp_path / "att.npz", **arrays)
    extra = ["--max-tokens", str(max_tokens)] if max_tokens else []
    code, out, err = cli("show", str(tmp_path / "att.npz"), "--json", "--no-plots", *extra)
    assert code == 0, err
    _validate("view", out)
    if "head_names" in arrays:
        assert json.loads(out)["head_names"] == [str(t) for t in arrays["head_names"]]


@settings(max_examples=20, deadline=None)
@given(words=st.lists(st.sampled_from(["the", "dog", "cat", "chases", "a", "sees", "mat", "big"]), min_size=1,
                      max_size=7),
       weights=st.sampled_from(["random", "designed", "trained", "grammar"]), heads=st.sampled_from([None, 1, 2]),
       causal=st.booleans())
def test_mha_explain_json_of_any_run_follows_the_trace_schema(words, weights, heads, causal):
    args = ["explain", " ".join(words), "--json", "--no-plots", "--weights", weights]
    if weights in ("random", "designed"):
        args += ["--causal"] if causal else []
        args += ["--heads", str(heads)] if heads else []
    code, out, err = cli(*args)
    if code == 2:  # designed heads need enough tokens: a refusal is one line, never a document
        assert out == "" and err.startswith("mha: error: "), err
        return
    assert code == 0, err
    _validate("trace", out)


_WORDS = st.lists(st.sampled_from(["the", "dog", "cat", "chases", "a", "sees", "mat", "big", "é", "猫"]),
                  min_size=2, max_size=6).map(" ".join)


@settings(max_examples=12, deadline=None)
@given(text=_WORDS, weights=st.sampled_from(["random", "trained", "grammar"]), causal=st.booleans())
def test_mha_compare_json_follows_its_schema(text, weights, causal):
    args = ["compare", text, "--json", "--no-plots", "--weights", weights]
    code, out, err = cli(*args, *(["--causal"] if causal and weights == "random" else []))
    assert code == 0, err
    _validate("compare", out)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 64), h=st.sampled_from([1, 2, 4, 8]), per=st.integers(1, 8), causal=st.booleans())
def test_mha_shapes_json_follows_its_schema(n, h, per, causal):
    code, out, err = cli("shapes", "--tokens", str(n), "--heads", str(h), "--d-model", str(h * per), "--json",
                         *(["--causal"] if causal else []))
    assert code == 0, err
    _validate("shapes", out)


@settings(max_examples=12, deadline=None)
@given(text=_WORDS, seed=st.integers(0, 2**31), questions=st.integers(1, 8), answers=st.booleans())
def test_mha_quiz_json_follows_its_schema(text, seed, questions, answers):
    code, out, err = cli("quiz", text, "--seed", str(seed), "--questions", str(questions), "--json",
                         *(["--answers"] if answers else []))
    assert code == 0, err
    _validate("quiz", out)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_WORDS, weights=st.sampled_from(["random", "designed", "grammar"]))
def test_a_saved_run_shown_and_verified_follows_the_trace_and_verify_schemas(tmp_path, text, weights):
    saved = tmp_path / "t.npz"
    code, _, err = cli("explain", text, "--weights", weights, "--save-npz", str(saved), "--no-plots", "--quiet")
    if code == 2:  # designed heads on too few tokens: refused, nothing saved
        assert not saved.exists(), err
        return
    assert code == 0, err
    for kind, args in (("trace", ["show", str(saved), "--json", "--no-plots"]), ("verify", ["verify", str(saved),
                                                                                              "--json"])):
        code, out, err = cli(*args)
        assert code == 0, err
        _validate(kind, out)
