"""Hard inputs, round four (issue 31): families 2 to 10, each with cases of its own.

Each test gives ``mha`` (or the function under it) an input of the family that
was seen to fail, and checks the one-line answer, the exit code, and that
nothing was written, clobbered or reported other than as it ran.  Families that
are a space of inputs (names, integers, widths, dtypes) are property tests.
Commands run in-process through Typer's CliRunner (``cli``; ``mha_in_process``
where a warning must fail the test, as the installed script would print it); the
installed ``mha`` only where a process shows more: signals, COLUMNS read as the
consoles are made at import, the locale and the output encoding.
"""

from __future__ import annotations

import dataclasses
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
from test_hard_inputs import mha_in_process, one_error_line

from mhacli.attention.errors import UsageError

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
    from mhacli.models.shipped import shipped_model_path
    from mhacli.models.trained import load_trained

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
    from mhacli.attention.checks import chosen, named_options
    from mhacli.grammar.tasks import task_name
    from mhacli.attention.config import DTYPES, TOKENIZERS, WEIGHT_KINDS
    from mhacli.grammar.tasks import TASKS

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
def test_a_respelled_name_runs_and_reports_the_name_itself(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # its figures go to ./mha-output: a folder of the test's own, not the work tree
    code, out, err = cli(*args, "--dpi", "30")  # the names, not the pixels
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
    from mhacli.attention.numbers import BOUND, head_counts

    text = ",".join(str(p) for p in parts)
    if any(p > BOUND for p in parts):
        with pytest.raises(UsageError, match=r"each a whole number up to 2\*\*63-1"):
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
    ("0", "at least 1"), ("1,0", "at least 1"), ("99999999999999999999", "each a whole number up to 2**63-1"),
    ("x", "digits 0-9"),
])
def test_compare_says_what_is_wrong_with_a_head_count(value, words):
    code, _, err = cli("train", "--compare", value, "--steps", "1")
    assert code == 2 and words in err and "divisible by 0" not in err, err


def test_a_layer_number_too_large_is_not_called_not_digits(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    w = rng.random((2, 2, 3, 3))  # (layers, h, N, N)
    np.savez(tmp_path / "att.npz", weights=w / w.sum(-1, keepdims=True), tokens=np.array(["a", "b", "c"]),
             layer_names=np.array(["Enc.0", "Enc.1"]))
    code, _, err = cli("show", str(tmp_path / "att.npz"), "--layer", "9" * 20, "--json")
    assert code == 2 and "digits 0-9" not in err and "is not a layer" in err, err
    monkeypatch.chdir(tmp_path)  # its figures go to ./mha-output: the test's own folder, not the work tree
    code, out, err = cli("show", str(tmp_path / "att.npz"), "--layer", " enc.1 ", "--json", "--dpi", "30")
    assert code == 0 and json.loads(out)["layer"] == 1, err


def _two_layers(path: Path, d: int = 8) -> None:
    rng = np.random.default_rng(1)
    state = {}
    for k in range(2):
        state[f"layers.{k}.self_attn.in_proj_weight"] = rng.standard_normal((3 * d, d))  # (3d, d)
        state[f"layers.{k}.self_attn.out_proj.weight"] = rng.standard_normal((d, d))  # (d, d)
    np.savez(path, **state)


@pytest.mark.parametrize(("layer", "ran"), [(" LAYERS.1.SELF_ATTN", "layer 1 of 0–1"),
                                            ("layers.0.self_attn", "layer 0 of 0–1"), ("1", "layer 1 of 0–1"),
                                            (np.int64(0), "layer 0 of 0–1")])
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


# The slow tier's: a second interrupted `mha train` at the same pause point; the one above, which replaced a file
# and says so, keeps Ctrl-C during training in the default tier (issue 46.5).
@pytest.mark.slow
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
    # jsonschema.validate(document, schema(kind)), the schema checked against its metaschema once per process
    # rather than at each of the ~100 examples below (it cost more than the run it checked: tests/schema_check.py)
    from schema_check import validate

    validate(json.loads(out), kind)


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


# ---------------------------------------------------------------------------
# Family 5: weights files and tensors of every kind
# ---------------------------------------------------------------------------

D = 8


def _layer(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"in_proj_weight": rng.standard_normal((3 * D, D)), "out_proj.weight": rng.standard_normal((D, D))}


# (name, how to make one tensor of the kind from a float32 tensor, words the refusal says)
ODD_TENSORS = [
    ("float8_e4m3fn", lambda t, torch: t.to(torch.float8_e4m3fn), "float8_e4m3fn tensor"),
    ("float8_e5m2", lambda t, torch: t.to(torch.float8_e5m2), "float8_e5m2 tensor"),
    ("sparse", lambda t, torch: t.to_sparse(), "sparse tensor"),
    ("quantized", lambda t, torch: torch.quantize_per_tensor(t, 0.1, 0, torch.qint8), "quantized tensor (qint8"),
    ("meta", lambda t, torch: torch.empty(t.shape, device="meta"), "meta tensor"),
    ("complex", lambda t, torch: t.to(torch.complex64), "complex64 tensor"),
]


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")  # making the file, not reading it
@pytest.mark.parametrize(("kind", "make", "words"), ODD_TENSORS, ids=[k for k, _, _ in ODD_TENSORS])
def test_a_pt_file_of_an_odd_tensor_kind_is_one_line_naming_it(tmp_path, kind, make, words):
    torch = pytest.importorskip("torch", reason="building .pt files of these tensor kinds needs PyTorch")
    state = {k: make(torch.from_numpy(v).float(), torch) for k, v in _layer(np.random.default_rng(0)).items()}
    torch.save(state, tmp_path / "odd.pt")
    proc = mha("explain", "a b c", "--weights", "odd.pt", "--heads", "2", "--out", "figs", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and words in line and "'odd.pt'" in line, line
    assert not (tmp_path / "figs").exists()
    # The same tensors passed in Python: the same refusal, never torch's own NotImplementedError.
    from mhacli import run

    with pytest.raises(UsageError, match=words.split(" (")[0]):
        run("a b c", weights=state, heads=2)


@pytest.mark.torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_float_tensors_are_read_as_float32(dtype):
    torch = pytest.importorskip("torch", reason="half-float tensors are PyTorch's")
    from mhacli import run

    layer = _layer(np.random.default_rng(2))
    state = {k: torch.from_numpy(v).to(getattr(torch, dtype)) for k, v in layer.items()}
    result = run("a b c", weights=state, heads=2)
    assert np.allclose(result.trace.W_o, state["out_proj.weight"].float().numpy())


@pytest.mark.parametrize(("dtype", "words"), [("F8_E4M3", "numpy has no such type"),
                                              ("F8_E5M2", "numpy has no such type"),
                                              ("C64", "attention weights are real numbers")])
def test_a_safetensors_file_numpy_cannot_hold_names_its_dtype(tmp_path, dtype, words):
    pytest.importorskip("safetensors", reason="reading .safetensors needs the safetensors package")
    path = tmp_path / "odd.safetensors"
    _safetensors_of(path, _layer(np.random.default_rng(0)), dtype)
    proc = mha_in_process("explain", "a b c", "--weights", path.name, "--heads", "2", "--out", "figs", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and dtype in line and words in line, line


def _safetensors_of(path: Path, arrays: dict[str, np.ndarray], dtype: str) -> None:
    """A .safetensors file written by hand (its format is a JSON header and raw bytes): no torch needed."""
    import struct

    size = {"F8_E4M3": 1, "F8_E5M2": 1, "C64": 8}[dtype]
    header, offset, blobs = {}, 0, []
    for name, a in arrays.items():
        blob = (np.abs(a) % 1 * 100).astype(np.uint8).repeat(size).tobytes()  # any bytes of the right length
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _edited_model(tmp_path: Path, **members: object) -> Path:
    from mhacli.models.shipped import shipped_model_path

    with np.load(shipped_model_path(name="trained")) as shipped:
        arrays = {k: shipped[k] for k in shipped.files}
    arrays.update({k: np.array(v) for k, v in members.items()})
    path = tmp_path / "edited.npz"
    np.savez(path, **arrays)
    return path


def _config(**changes: object) -> str:
    from mhacli.models.shipped import shipped_model_path

    with np.load(shipped_model_path(name="trained")) as shipped:
        return json.dumps({**json.loads(str(shipped["config"])), **changes})


@pytest.mark.parametrize(("members", "words"), [
    ({"config": "[" * 100_000 + "]" * 100_000}, "'config' JSON is nested too deeply"),
    ({"metrics": "[" * 100_000 + "]" * 100_000}, "'metrics' JSON is nested too deeply"),
    ({"config": "[1, 2]"}, "'config' is not a JSON object"),
    ({"config": _config(heads=3)}, "(d_model=16 is not divisible by heads=3)"),
    ({"config": _config(heads=2**62)}, "heads=4611686018427387904 is more than d_model=16"),
    ({"config": _config(steps=-5)}, "(steps must be at least 1, got -5)"),
    ({"config": _config(optimizer="sgd")}, "records 'optimizer', which mha train does not record"),
    ({"positions": np.full((12, 16), 1e300)}, "'positions' holds values up to 1e+300"),
    ({"format_version": np.array(99)}, "format_version is 99, this mha reads 1"),  # not "array(99)"
    ({"format_version": np.array([1, 1])}, "format_version is 'an array of shape (2,)', this mha reads 1"),
])
def test_an_edited_trained_model_is_refused_naming_the_file_not_options_never_typed(tmp_path, members, words):
    path = _edited_model(tmp_path, **members)
    proc = mha_in_process("explain", "a b c", "--weights", path.name, "--out", "figs", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "'edited.npz' is not a trained mha model" in line and words in line, line
    assert "--heads" not in line and "--steps" not in line and "--d-model" not in line


@pytest.mark.parametrize(("array", "said"), [
    (np.array("0.2.0"), "its member 'mhacli_version' holds text (<U5), not real numbers."),  # not "numbers or text"
    (np.zeros((2, 2), complex), "its member 'mhacli_version' holds complex numbers (<c16), not real numbers."),
])
def test_a_member_of_the_wrong_kind_is_named_by_what_it_holds(tmp_path, array, said):
    """A trained model's file without its 'kind' is read as weights, whose members hold real numbers only: the
    message said a text member was "not numbers or text"."""
    np.savez(tmp_path / "w.npz", **_layer(np.random.default_rng(0)), mhacli_version=array)
    code, out, err = cli("explain", "a b c", "--weights", str(tmp_path / "w.npz"), "--no-plots")
    assert code == 2 and out == "" and said in err, err


def test_each_file_mha_writes_is_named_for_what_it_is_where_another_kind_is_asked(tmp_path, monkeypatch):
    """A trained model given to show or verify was "not written by mha"; a saved run or an attention file given
    to --weights was refused for a text member. Each now says what the file is and which command reads it."""
    monkeypatch.chdir(tmp_path)
    assert cli("train", "--steps", "2", "--save", "model.npz", "--no-plots")[0] == 0
    assert cli("explain", "the cat", "--save-npz", "run.npz", "--no-plots")[0] == 0
    np.savez(tmp_path / "attention.npz", weights=np.full((2, 3, 3), 1 / 3), tokens=np.array(["a", "b", "c"]))
    for argv, said in [
        (["show", "model.npz"], "'model.npz' is not a valid mha trace: it is a model 'mha train --save' wrote, not a "
                                "saved run: 'mha explain TEXT --weights FILE --save-npz run.npz' saves a run of it."),
        (["verify", "model.npz"], "it is a model 'mha train --save' wrote, not a saved run"),
        (["explain", "a b", "--weights", "run.npz", "--no-plots"],
         "'run.npz' is not a readable .npz of weights: it is a saved run ('mha explain --save-npz'), which 'mha "
         "show' reads; a weights file holds a layer's state dict (in_proj_weight, out_proj.weight, …)."),
        (["explain", "a b", "--weights", "attention.npz", "--no-plots"], "it is an attention file, which 'mha show'"),
    ]:
        code, out, err = cli(*argv)
        assert code == 2 and out == "" and said in err and "not written by mha" not in err, (argv, err)


def test_shapes_refuses_markdown_and_json_together():
    code, out, err = cli("shapes", "--markdown", "--json")
    assert (code, out) == (2, "") and "--markdown and --json each choose what is printed; give one of them." in err


@pytest.mark.parametrize("recorded", [3, 2**62, 16])
def test_a_recorded_head_count_that_cannot_split_d_names_the_file(tmp_path, recorded):
    np.savez(tmp_path / "w.npz", **_layer(np.random.default_rng(0)), num_heads=np.array(recorded))
    proc = mha_in_process("explain", "a b c", "--weights", "w.npz", "--out", "figs", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "the weights in 'w.npz' record" in line and "cannot split" in line, line
    assert "--heads" not in line


def test_a_recorded_head_count_that_splits_d_is_taken():
    from mhacli.attention.checks import recorded_heads

    assert [recorded_heads(h, 8, "w") for h in (1, 2, 4, 8)] == [1, 2, 4, 8]


# ---------------------------------------------------------------------------
# Family 6: an attention file that disagrees with itself
# ---------------------------------------------------------------------------

def _rows(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    w = rng.random(shape)
    return w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize(("first", "second"), [("weights", "attentions"), ("weights", "attention"),
                                               ("attentions", "attention")])
def test_two_accepted_attention_names_holding_different_arrays_are_refused(tmp_path, first, second):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "two.npz", **{first: _rows(rng, (2, 3, 3)), second: _rows(rng, (2, 3, 3))},
             tokens=np.array(["a", "b", "c"]))
    proc = mha_in_process("show", "two.npz", "--out", "figs", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and f"different attention under '{first}' and '{second}'" in line, line
    assert not (tmp_path / "figs").exists()


def test_the_same_array_under_two_names_is_drawn(tmp_path):
    from mhacli.models.attention_file import load_attention

    w = _rows(np.random.default_rng(0), (2, 3, 3))
    np.savez(tmp_path / "same.npz", weights=w, attentions=w, tokens=np.array(["a", "b", "c"]))
    assert np.array_equal(load_attention(tmp_path / "same.npz").weights, w)


# ---------------------------------------------------------------------------
# Family 8: the terminal's size and the output encoding
# ---------------------------------------------------------------------------

@FAST
@given(raw=st.one_of(st.integers(-5, 2**70).map(str), st.just("9" * 5000), st.text(max_size=6)))
def test_columns_is_clamped_into_the_sane_range_or_dropped(raw):
    from mhacli.cli.output import HEIGHTS, WIDTHS, sane_size

    env = {"COLUMNS": raw, "LINES": raw}
    sane_size(env)
    for name, (low, high) in (("COLUMNS", WIDTHS), ("LINES", HEIGHTS)):
        if name in env:
            assert low <= int(env[name]) <= high
            digits = raw.strip()
            assert digits.isascii() and digits.isdigit() and digits.strip("0") != ""  # only a count is kept
            count = int(digits) if len(digits) <= 30 else high + 1  # 5,000 digits: past int()'s own limit
            assert int(env[name]) == min(max(count, low), high)


@pytest.mark.parametrize("columns", ["0", "1", "4294967296", "9" * 30, "abc"])
@pytest.mark.slow
def test_a_width_of_any_columns_gives_whole_lines_and_exit_0(tmp_path, columns):
    proc = mha("explain", "the cat sat", "--no-plots", cwd=tmp_path, env={**ENV, "COLUMNS": columns})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and "Multi-head attention" in proc.stdout
    assert max(len(line) for line in lines) <= 1000


# latin-1 and ascii are the slow tier's: one-byte encodings of stdout, the same recovery as the C locale's, which
# stays in the default tier (issue 46.5); test_terminal.py keeps a real process printing text under ascii.
@pytest.mark.parametrize("env", [pytest.param({"PYTHONIOENCODING": "ascii"}, marks=pytest.mark.slow),
                                 pytest.param({"PYTHONIOENCODING": "latin-1"}, marks=pytest.mark.slow),
                                 {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}],
                         ids=["ascii", "latin-1", "C locale"])
def test_json_is_json_and_argv_text_is_recovered_whatever_the_locale(tmp_path, env):
    text = "café 猫 sat 😀"
    full = {k: v for k, v in ENV.items() if k not in ("LC_ALL", "LANG", "LC_CTYPE")}
    proc = subprocess.run([str(MHA), "explain", os.fsencode(text), "--json", "--no-plots"], cwd=tmp_path,
                          env={**full, **env}, capture_output=True, stdin=subprocess.DEVNULL, timeout=240)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)  # bytes: UTF-8 or ASCII with \\u escapes, JSON either way
    assert document["tokens"] == ["café", "猫", "sat", "😀"]


def test_argv_text_recovers_utf8_bytes_and_keeps_what_is_not_utf8():
    from mhacli.io.inputs import argv_text

    assert argv_text("caf\udcc3\udca9") == "café"
    assert argv_text("caf\udce9") == "caf\udce9"  # latin-1 bytes: not UTF-8, left as they were
    assert argv_text("plain") == "plain"


# ---------------------------------------------------------------------------
# Family 9: the Python API's arguments
# ---------------------------------------------------------------------------

@pytest.mark.parametrize(("call", "words"), [
    (lambda m: m.run(123), "the text must be a string, got int 123"),
    (lambda m: m.run(b"the cat"), "decode it first"),
    (lambda m: m.run(["the", "cat"]), "pass tokens=[...]"),
    (lambda m: m.run(tokens="the cat"), "tokens must be a list of strings, one per position, not one string"),
    (lambda m: m.run(), "run() needs a text or tokens"),  # not "the text holds only spaces": none was given
    (lambda m: m.run(None, heads=2), "run() needs a text or tokens"),
    (lambda m: m.run("a b", tokens=["a"]), "run() takes a text or tokens, not both"),  # the text was dropped
    # A tokenizer's ids (inputs["input_ids"][0]) labelled every row and column with numbers, silently.
    (lambda m: m.from_attention(np.full((2, 3, 3), 1 / 3), [101, 2023, 102]),
     "tokens are whole numbers (101, 2023, 102): a tokenizer's ids, not its tokens; pass their text, e.g. "
     "tokenizer.convert_ids_to_tokens(ids)."),
    (lambda m: m.from_attention(np.full((2, 6, 6), 1 / 6), np.arange(6)), "whole numbers (0, 1, 2, 3, …)"),
    (lambda m: m.run(tokens=np.array([7, 8])), "tokens are whole numbers (7, 8): a tokenizer's ids"),
    (lambda m: m.run("the lion", weights="grammar", words={"lion": 3}),
     "words maps words to classes as text, e.g. {'park': 'place'}; got {'lion': 3}."),  # not "got 'lion'"
    (lambda m: m.from_attention(np.full((4, 3, 3), 1 / 3), ["a", "b", "c"], names="head"),
     "names must be a list of strings, one per head, not one string"),
    (lambda m: m.from_attention(np.full((1, 2, 3, 3), 1 / 3), ["a", "b", "c"], layer_names="L"),
     "layer_names must be a list of strings, one per layer"),
])
def test_an_api_argument_of_the_wrong_kind_is_a_usage_error(call, words):
    import mhacli

    with pytest.raises(UsageError) as caught:
        call(mhacli)
    assert words in str(caught.value)


@pytest.mark.parametrize(("argv", "said"), [
    (["explain", "the cat", "--out", ""], "--out is empty (''); give a folder's name ('.' for the current folder)."),
    (["explain", "the cat", "-o", ""], "--out is empty"),
    (["demo", "--no-pause", "--out", ""], "--out is empty"),
    (["compare", "the cat", "--out", ""], "--out is empty"),
    (["train", "--steps", "2", "--out", ""], "--out is empty"),
    (["bench", "--plot", "--out", ""], "--out is empty"),
    (["explain", "the cat", "--save-npz", "", "--no-plots"], "--save-npz is empty (''); give a file's name."),
    (["explain", "the cat", "--html", "", "--no-plots"], "--html is empty"),
    (["train", "--steps", "2", "--save", "", "--no-plots"], "--save is empty"),
    (["explain", "--file", "", "--no-plots"], "--file is empty"),
    (["explain", "the cat", "--weights", "", "--no-plots"], "--weights is empty (''); give one of random, designed"),
])
def test_an_empty_name_is_refused_not_read_as_the_current_folder(tmp_path, monkeypatch, argv, said):
    """'' (an unset variable in `--out "$DIR"`) is Path('.'): the figures went into the current folder unasked,
    and the other options named '.' in their errors though the user typed nothing."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("mha: error: "), err
    assert said in lines[0] and "'.' is" not in lines[0], err
    assert list(tmp_path.iterdir()) == []


def _two_heads():
    import mhacli

    return mhacli.run("the cat sat", heads=2)


def _view():
    import mhacli

    return mhacli.from_attention(np.full((2, 3, 3), 1 / 3), ["a", "b", "c"])


@pytest.mark.parametrize(("call", "said"), [
    (lambda m: m.head_figure(_two_heads(), 2), "head counts from 0 (head_figure(run, 0) is head-1.png): give 0 to 1 "
                                               "for 2 heads, got 2."),
    (lambda m: m.head_figure(_two_heads(), -1), "give 0 to 1 for 2 heads, got -1."),
    (lambda m: m.head_figure(_two_heads(), "1"), "head must be a whole number, got '1'."),
    (lambda m: m.head_figure(_two_heads(), True), "head must be a whole number, got True."),
    (lambda m: m.heads_figure(None), "expected a run (mhacli.run), a trace (mhacli.load_trace) or an attention "
                                     "view (mhacli.from_attention), got NoneType None."),
    (lambda m: m.magnifiers_figure({"a": 1}), "got dict {'a': 1}."),  # braces as typed, not doubled
    (lambda m: m.html_page("the cat"), "got str 'the cat'."),
    (lambda m: m.run({"a": 1}), "the text must be a string, got dict {'a': 1}."),
    (lambda m: m.split_figure(_view()), "an attention view holds only the weights after softmax"),
    (lambda m: m.split_figure([1]), "got list [1]."),
    (lambda m: m.knockout(_two_heads()), "a report card and a knockout take a trained model: model, _ = "
                                         "mhacli.models.trained.load_trained('model.npz') "
                                         "(written by mha train --save), "
                                         "got Run."),
    (lambda m: m.report_card("model.npz"), "take a trained model"),
    (lambda m: m.save_figures(_two_heads(), ""), "out_dir is empty (''); give a folder's name"),
    (lambda m: m.save_figures(_two_heads(), "notes.txt"), "out_dir 'notes.txt' is a file, not a folder"),
    (lambda m: m.save_figures(_two_heads(), "figs", dpi=5), "dpi must be a whole number from 30 to 600, got 5."),
    (lambda m: m.load_trace(""), "the trace file's name is empty ('')"),
    (lambda m: m.html_page(_two_heads(), max_tokens=0), "max_tokens must be at least 1, got 0."),  # was ValueError
    (lambda m: m.html_page(_two_heads(), max_tokens="x"), "max_tokens must be a whole number, got 'x'."),
    (lambda m: m.head_figure(_two_heads(), 0, max_tokens=1.5), "max_tokens must be a whole number, got 1.5."),
    (lambda m: m.heads_figure(_two_heads(), query=99), "query 99 is outside the sentence; give a position from 0 "
                                                       "to 2 or one of its tokens."),  # was drawn, silently
    (lambda m: m.magnifiers_figure(_two_heads(), query=-1), "query -1 is outside the sentence"),  # was row -1
    (lambda m: m.magnifiers_figure(_two_heads(), query="zzz"), "query 'zzz' is not a token of the text"),
    (lambda m: m.save_figures(_two_heads(), "figs", query="{z}"), "query '{z}' is not a token"),
    (lambda m: m.magnifiers_figure(_two_heads(), single="x"), "single must be a one-head run (mhacli.run(text, "
                                                             "heads=1), or a run's .single), got str 'x'."),
    (lambda m: m.compare_figure(_two_heads(), _two_heads()), "single must be a one-head run"),
])
def test_the_api_s_drawing_and_model_functions_refuse_what_they_cannot_use(tmp_path, monkeypatch, call, said):
    """Each was a bare IndexError, AttributeError or FileExistsError from deep inside, or an error with the command
    line's words (--dpi) or doubled braces; now one UsageError in the API's words, and nothing written."""
    import mhacli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError) as caught:
        call(mhacli)
    said_here = str(caught.value)
    assert said in said_here and "{{" not in said_here, said_here
    assert not any(f"--{name}" in said_here for name in ("dpi", "out", "file", "weights")), said_here  # API words
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_save_figures_keeps_its_folder_or_removes_it_when_nothing_was_drawn(tmp_path, monkeypatch):
    """The API has no command's exit to clean up after it: a folder it made stays with the figures and is no longer
    the process's to remove; one made for figures never drawn (an error, Ctrl-C in a notebook) goes again."""
    import importlib

    import mhacli
    from mhacli.io import cleanup

    save_module = importlib.import_module("mhacli.render.figures.save")  # the package exports a function 'save'
    result = _two_heads()
    written = mhacli.save_figures(result, tmp_path / "a" / "figs", dpi=30)
    assert len(written) == 5 and cleanup.pending() == []

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(save_module, "atomic_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mhacli.save_figures(result, tmp_path / "b" / "figs", dpi=30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"] and cleanup.pending() == []


def test_compare_figure_makes_the_run_s_own_one_head_when_none_is_given():
    import mhacli

    from mhacli.pipeline import prepare

    def texts(fig) -> list[str]:
        return sorted(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))

    both = prepare("the cat sat on the mat").run(compare=True)
    assert texts(mhacli.compare_figure(both.trace)) == texts(mhacli.compare_figure(both, both.single, both.comparison))


@pytest.mark.torch
def test_a_tensor_of_ids_is_refused_as_tokens():
    torch = pytest.importorskip("torch", reason="a tensor of ids needs PyTorch")
    import mhacli

    with pytest.raises(UsageError, match=r"^tokens are whole numbers \(101, 2023, 102\)"):
        mhacli.from_attention(np.full((2, 3, 3), 1 / 3), torch.tensor([101, 2023, 102]))


def test_tokens_that_read_as_numbers_but_are_text_are_kept():
    import mhacli

    assert mhacli.from_attention(np.full((2, 3, 3), 1 / 3), ["1", "2", 3]).tokens == ("1", "2", "3")


def test_the_public_split_figure_takes_a_run_or_its_trace():
    import mhacli

    result = _two_heads()
    assert mhacli.split_figure(result).texts and mhacli.split_figure(result.trace).texts


def test_the_api_refuses_empty_weights_in_its_own_words():
    import mhacli

    with pytest.raises(UsageError, match=r"^weights is empty \(''\); give one of random"):
        mhacli.run("the cat", weights="")


@pytest.mark.parametrize("name", ["query", "bogus", "head"])
def test_an_unknown_keyword_names_run_and_its_options_not_config(name):
    import mhacli
    from mhacli.attention.config import Config

    with pytest.raises(TypeError) as caught:
        mhacli.run("the cat", heads=2, **{name: 1})
    said = str(caught.value)
    assert said.startswith(f"run() got an unexpected keyword argument '{name}'") and "Config.__init__" not in said
    assert all(f.name in said for f in dataclasses.fields(Config))


def test_numpy_scalars_are_taken_where_a_python_number_is(tmp_path):
    import mhacli
    from mhacli.notebook import save_figures

    result = mhacli.run("the cat sat", heads=np.int64(2), seed=np.int32(3), causal=np.True_)
    assert (result.config.heads, result.config.seed, result.config.causal) == (2, 3, True)
    saved = save_figures(result, tmp_path / "figs", dpi=np.int64(30))
    assert saved and (tmp_path / "figs" / "heads.png").exists()
    with pytest.raises(UsageError, match="whole number from 30 to 600"):
        save_figures(result, tmp_path / "figs", dpi=30.5)


@pytest.mark.parametrize("big", [1e300, 1e30, 2e6])
def test_huge_finite_weights_are_refused_as_a_files_are(big):
    import mhacli
    from mhacli.models.state_dict import AttentionWeights

    rng = np.random.default_rng(0)
    w = AttentionWeights(*(rng.standard_normal((D, D)) * big for _ in range(4)), heads=2)
    with pytest.raises(UsageError, match="mhacli takes weights within"):
        mhacli.run("a b c", weights=w)
    with pytest.raises(UsageError, match="mhacli takes weights within"):
        mhacli.run("a b c", weights={"in_proj_weight": rng.standard_normal((3 * D, D)) * big,
                                     "out_proj.weight": rng.standard_normal((D, D))}, heads=2)


# ---------------------------------------------------------------------------
# Family 10: saved runs keep what they knew
# ---------------------------------------------------------------------------

def test_a_saved_grammar_run_is_shown_with_the_names_it_was_saved_with(tmp_path):
    sentence = "the dog saw the cat"
    code, explained, err = cli("explain", sentence, "--weights", "grammar", "--json", "--no-plots",
                               "--save-npz", str(tmp_path / "g.npz"))
    assert code == 0, err
    code, shown, err = cli("show", str(tmp_path / "g.npz"), "--json", "--no-plots")
    assert code == 0, err
    before, after = json.loads(explained), json.loads(shown)
    assert after["rules"] == before["rules"] and any("verb →" in r for r in after["rules"])
    # The file carries the model's card (with its baselines) and each head's name from it, as --json does
    with np.load(tmp_path / "g.npz") as saved:
        assert [str(r) for r in saved["relations"]] == before["relations"]
        assert json.loads(str(saved["card"])) == before["card"] and "always" in before["card"]
    # The same document: the names, the parse's reading and every measure. mha show re-renders the run's arrays;
    # the card stays in the file for a reader of it (np.load), as the model's, not the run's.
    card_keys = {"card", "relations"}
    assert {k: v for k, v in after.items() if k not in card_keys} == \
        {k: v for k, v in before.items() if k not in card_keys}
    assert before["card"] is not None and after.get("card") is None
    code, text, err = cli("show", str(tmp_path / "g.npz"), "--no-plots")
    titles = [rule.partition(" — ")[0] for rule in before["rules"]]  # the report card's few words per head
    flat = " ".join(text.split())  # a title may wrap at the terminal's width
    assert code == 0 and all(title in flat for title in titles), (titles, err)


def test_a_saved_grammar_run_whose_tokens_were_edited_says_why(tmp_path):
    code, _, err = cli("explain", "the dog saw the cat", "--weights", "grammar", "--no-plots", "--quiet",
                       "--save-npz", str(tmp_path / "g.npz"))
    assert code == 0, err
    with np.load(tmp_path / "g.npz") as saved:
        arrays = {k: saved[k] for k in saved.files}
    arrays["tokens"] = np.array(["dog", "the", "saw", "the", "cat"])
    np.savez(tmp_path / "edited.npz", **arrays)
    code, _, err = cli("show", str(tmp_path / "edited.npz"), "--no-plots")
    assert code == 2 and "not one the grammar parses" in err, err
