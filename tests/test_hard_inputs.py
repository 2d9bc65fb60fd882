"""Hard inputs, round two (issue 14): one test per family, several variants each.

Every test runs ``mha`` (or the io functions under it) on an input an
attacker or an unlucky user would give, and checks the one-line answer, the
exit code, and that nothing was left behind or clobbered.  Commands run
in-process through Typer's CliRunner (``mha_in_process``); the installed
``mha`` only where a process shows more: signals, a closed stdout, a device
read that could hang (a timeout ends it), bytes in argv, MPLCONFIGDIR at
start-up.  The installed script's own way out of every family of error is
tests/test_errors.py's ``test_the_installed_script_says_the_same``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

MHA = Path(sys.executable).with_name("mha")
ENV = {**os.environ, "MPLBACKEND": "Agg", "COLUMNS": "100", "PYTHONWARNINGS": "default"}


def mha(*args: str, cwd: Path, env: dict[str, str] | None = None, stdin: object = subprocess.DEVNULL,
        timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MHA), *args], cwd=cwd, env=env or ENV, capture_output=True, text=True,
                          stdin=stdin, timeout=timeout, **kw)  # type: ignore[call-overload]


def mha_in_process(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The same command through Typer's CliRunner: ``MhaGroup.main``, the installed script's one way out
    (error lines, exit codes, cleanup), runs inside it, without the ~0.35 s of a new process.

    Every warning is recorded and fails the test, as the installed script under
    ``PYTHONWARNINGS=default`` would print it on stderr (pytest's own capture would hide it).
    ``env`` is set for the run (each command sizes its consoles from the COLUMNS it runs with).
    """
    import warnings

    from typer.testing import CliRunner

    from mhacli.cli.app import app

    here = Path.cwd()
    os.chdir(cwd)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = CliRunner().invoke(app, list(args), env=env)
    finally:
        os.chdir(here)
    assert caught == [], [f"{w.category.__name__}: {w.message}" for w in caught]
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mha: error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "this is a bug" not in proc.stderr
    return lines[0]


def temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


# ---------------------------------------------------------------------------
# Family 1: signals other than Ctrl-C
# ---------------------------------------------------------------------------

# One signal in the default tier; the same check for the other two in the slow tier (issue 46.5: a real-process
# family beyond one test per behaviour).
@pytest.mark.parametrize(("sig", "code"), [
    (signal.SIGTERM, 143), pytest.param(signal.SIGHUP, 129, marks=pytest.mark.slow),
    pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow)])
def test_a_signal_during_save_npz_leaves_no_temporary_file(tmp_path, sig, code):
    from pause import paused

    argv = [str(MHA), "explain", "the cat sat on the mat", "--no-plots", "--save-npz", "big.npz"]
    with paused(argv, cwd=tmp_path, env=ENV, name="big.npz", stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE) as (proc, writing):
        assert writing.endswith("big.npz") and len(temporaries(tmp_path)) == 1  # np.savez's archive is open
        proc.send_signal(sig)
        _, err = proc.communicate()
    assert proc.returncode == code, err
    assert err.strip().startswith("mha: error: ") and len(err.strip().splitlines()) == 1, err
    assert "nothing half-written" in err and "Traceback" not in err and "Exception ignored" not in err
    assert temporaries(tmp_path) == [] and not (tmp_path / "big.npz").exists()


def test_a_signal_keeps_the_previous_file_whole(tmp_path):
    from pause import paused

    (tmp_path / "big.npz").write_bytes(b"the old file")
    argv = [str(MHA), "explain", "the cat sat on the mat", "--no-plots", "--save-npz", "big.npz"]
    with paused(argv, cwd=tmp_path, env=ENV, name="big.npz", stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE) as (proc, _):
        proc.send_signal(signal.SIGTERM)
        proc.communicate()
    assert proc.returncode == 143
    assert (tmp_path / "big.npz").read_bytes() == b"the old file"
    assert temporaries(tmp_path) == []


def test_the_pause_point_lets_the_write_finish_when_released(tmp_path):
    from pause import paused

    argv = [str(MHA), "explain", "the cat sat", "--no-plots", "--save-npz", "t.npz"]
    with paused(argv, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as (proc, _):
        assert not (tmp_path / "t.npz").exists()
    assert proc.returncode == 0 and np.load(tmp_path / "t.npz")["tokens"].size == 3


def test_cleanup_removes_registered_files_and_folders(tmp_path):
    from mhacli.io import cleanup

    a_file, a_folder = tmp_path / "x.tmp", tmp_path / "scratch"
    a_file.write_text("x")
    a_folder.mkdir()
    (a_folder / "inside").write_text("y")
    cleanup.register(a_file)
    cleanup.register(a_folder, folder=True)
    try:
        assert sorted(cleanup.pending()) == sorted([str(a_file), str(a_folder)])
        cleanup.remove_all()
        assert not a_file.exists() and not a_folder.exists() and cleanup.pending() == []
    finally:
        cleanup.unregister(a_file)
        cleanup.unregister(a_folder)


def test_temporary_folder_goes_however_the_block_ends(tmp_path):
    from mhacli.io import cleanup

    with pytest.raises(cleanup.Terminated):
        with cleanup.temporary_folder() as folder:
            (folder / "f").write_text("x")
            raise cleanup.Terminated(signal.SIGTERM)
    assert not folder.exists() and cleanup.pending() == []


def test_exit_codes_and_messages_name_the_signal():
    from mhacli.io import cleanup

    assert [cleanup.exit_code_for(s) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)] == [130, 129, 143]
    assert cleanup.exit_code_for(signal.SIGUSR1) == 128 + signal.SIGUSR1
    assert "SIGTERM" in cleanup.message_for(signal.SIGTERM)
    assert "SIGHUP" in cleanup.message_for(signal.SIGHUP)


# ---------------------------------------------------------------------------
# Faithful saves (issue 13): every config field, the weight kind, rules, biases, a format version
# ---------------------------------------------------------------------------

def test_a_designed_char_run_shown_back_says_so_and_lists_its_rules(tmp_path):
    made = mha_in_process("explain", "the cat sat on the mat", "--weights", "designed", "--tokenizer", "char",
                          "--causal", "--seed", "7", "--no-plots", "--save-npz", "d.npz", cwd=tmp_path,
                          env={"COLUMNS": "100"})
    assert made.returncode == 0, made.stderr
    shown = mha_in_process("show", "d.npz", "--no-plots", cwd=tmp_path, env={"COLUMNS": "100"})
    assert shown.returncode == 0, shown.stderr
    assert "tokenizer char" in shown.stdout and "weights designed" in shown.stdout
    assert "positions on" in shown.stdout and "seed 7" in shown.stdout and "causal" in shown.stdout
    from mhacli import run
    from mhacli.io.export import load_trace

    trace = load_trace(tmp_path / "d.npz")
    expected = run("the cat sat on the mat", weights="designed", tokenizer="char", causal=True, seed=7)
    assert trace.config == expected.config and trace.rules == expected.rules
    for rule in expected.rules:
        assert rule in shown.stdout
    # The walkthrough itself is the same as the run's (the header says where it was loaded from).
    ran = [line for line in made.stdout.splitlines() if "loaded from" not in line and "d.npz" not in line]
    again = [line for line in shown.stdout.splitlines() if "loaded from" not in line]
    assert ran[:40] == again[:40]


def test_a_010_trace_without_format_version_still_loads(tmp_path):
    from mhacli import run
    from mhacli.io.export import NPZ_KEYS, load_trace, npz_arrays

    old = {k: v for k, v in npz_arrays(run("the cat sat", seed=2)).items() if k in NPZ_KEYS}
    np.savez(tmp_path / "old.npz", **old)
    trace = load_trace(tmp_path / "old.npz")
    assert trace.config.seed == 2 and trace.config.tokenizer == "word" and trace.config.weights == "random"
    assert trace.embeddings is None


def _state_dict_with_biases(d: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {"in_proj_weight": rng.normal(size=(3 * d, d)) / np.sqrt(d), "in_proj_bias": rng.normal(size=3 * d),
            "out_proj.weight": rng.normal(size=(d, d)) / np.sqrt(d), "out_proj.bias": rng.normal(size=d)}


def test_biases_are_saved_and_read_back_when_the_trace_has_them(tmp_path):
    from mhacli import run
    from mhacli.measures.verify import verify
    from mhacli.io.export import ARRAY_FIELDS, load_trace, npz_arrays, save_npz, trace_biases, trace_document

    state = _state_dict_with_biases()
    trace = run("the cat sat on the mat", weights=state, heads=2)
    assert set(trace_biases(trace)) == {"b_q", "b_k", "b_v", "b_o"}
    np.testing.assert_array_equal(npz_arrays(trace)["b_k"], state["in_proj_bias"][8:16])
    assert trace_document(trace)["biases"]["b_o"] == state["out_proj.bias"].tolist()
    save_npz(trace, tmp_path / "b.npz")
    back = load_trace(tmp_path / "b.npz")
    for name in ("b_q", "b_k", "b_v", "b_o", *ARRAY_FIELDS):
        np.testing.assert_array_equal(getattr(back, name), getattr(trace, name), err_msg=name)
    assert back.config == trace.config and back.config.weights == "pytorch"
    # Read back, the biases take part in the check: verify recomputes the same output with them ...
    assert all(c.ok for c in verify(back))
    # ... and a file whose biases were changed no longer verifies (they are not decoration).
    arrays = npz_arrays(trace)
    np.savez(tmp_path / "changed.npz", **{**arrays, "b_v": arrays["b_v"] + 0.5})
    assert not all(c.ok for c in verify(load_trace(tmp_path / "changed.npz")))
    without = run("the cat sat", d_model=8, heads=2)
    assert trace_biases(without) == {} and trace_document(without)["biases"] is None
    np.savez(tmp_path / "short.npz", **{**arrays, "b_q": arrays["b_q"][:3]})
    from mhacli.attention.errors import UsageError

    with pytest.raises(UsageError, match=r"b_q has shape \(3,\), expected \(8,\)"):
        load_trace(tmp_path / "short.npz")


def test_biases_through_the_command_line(tmp_path):
    import json

    np.savez(tmp_path / "own.npz", **_state_dict_with_biases())
    made = mha_in_process("explain", "the cat sat on the mat", "--weights", "own.npz", "--heads", "2",
                          "--no-plots", "--save-npz", "b.npz", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    shown = mha_in_process("show", "b.npz", "--json", "--no-json-arrays", "--no-plots", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["weight_kind"] == "pytorch" and document["arrays"] is None
    assert document["biases"]["b_o"] == pytest.approx(_state_dict_with_biases()["out_proj.bias"].tolist())
    checked = mha_in_process("verify", "b.npz", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _validate(document, schema):
    jsonschema = pytest.importorskip("jsonschema")  # in the test extra; skipped only outside it
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(document)


@pytest.mark.parametrize("args", [
    ("the cat sat on the mat",),
    ("the cat sat on the mat", "--causal", "--weights", "designed", "--tokenizer", "char"),
    ("a", "--heads", "1", "--d-model", "4", "--dtype", "float32", "--no-positions"),
])
def test_real_json_output_follows_the_shipped_schema(tmp_path, args):
    import json

    from mhacli.io.export import trace_schema

    proc = mha_in_process("explain", *args, "--json", "--no-plots", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    schema = trace_schema()
    _validate(document, schema)
    assert document["format_version"] == 2
    assert set(document["config"]) == {"heads", "d_model", "seed", "tokenizer", "positions", "causal", "weights",
                                       "dtype", "d_k"}
    # The schema can fail: a document missing its version, or with a stray array, is refused.
    jsonschema = pytest.importorskip("jsonschema")
    broken = {k: v for k, v in document.items() if k != "format_version"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "arrays": {**document["arrays"], "W_x": [[1.0]]}}, schema)


def test_the_schema_ships_in_the_wheel_listing():
    from importlib import resources

    assert (resources.files("mhacli.io") / "trace.schema.json").is_file()


# ---------------------------------------------------------------------------
# Family 4: unbounded reads
# ---------------------------------------------------------------------------

# /dev/urandom is the slow tier's: an endless device like /dev/zero, the same refusal (issue 46.5); so are verify's
# real processes (its /dev/zero and fifo): show's stay in the default tier, verify's folder runs in-process there.
@pytest.mark.parametrize("command,device", [
    (command, device) if device == "folder" or (command == "show" and device != "/dev/urandom")
    else pytest.param(command, device, marks=pytest.mark.slow)
    for device in ("/dev/zero", "/dev/urandom", "fifo", "folder") for command in ("show", "verify")])
def test_devices_pipes_and_folders_are_refused_before_a_byte_is_read(tmp_path, command, device):
    os.mkfifo(tmp_path / "fifo")  # no writer: an open() that waited would hang the test
    (tmp_path / "folder").mkdir()
    args = (command, device, "--no-plots") if command == "show" else (command, device)
    if device == "folder":  # fails at once even if the check were gone: in-process
        proc = mha_in_process(*args, cwd=tmp_path)
    else:  # an open() or read() that waited or never ended must hit the timeout, not hang the test run
        proc = mha(*args, cwd=tmp_path, timeout=60)
    line = one_error_line(proc)
    assert proc.returncode == 2
    assert "not a regular file" in line or "is a folder" in line


def test_an_archive_promising_more_than_memory_is_refused_from_its_header(tmp_path):
    import io
    import zipfile

    from mhacli import run
    from mhacli.attention.errors import UsageError
    from mhacli.io.export import load_trace, npz_arrays

    arrays = npz_arrays(run("the cat sat"))
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w") as z:
        for name, value in arrays.items():
            buf = io.BytesIO()
            np.save(buf, value)
            data = buf.getvalue()
            if name == "scores":  # a header promising 10^12 floats over a few bytes of data
                header = np.lib.format.header_data_from_array_1_0(np.zeros(1))
                header["shape"] = (10**6, 10**6)
                buf = io.BytesIO()
                np.lib.format.write_array_header_1_0(buf, header)
                data = buf.getvalue() + b"\0" * 16
            z.writestr(name + ".npy", data)
    with pytest.raises(UsageError, match="cut short|not fit"):
        load_trace(tmp_path / "bomb.npz")


# ---------------------------------------------------------------------------
# Family 5: hostile traces
# ---------------------------------------------------------------------------

def _tampered(tmp_path: Path, name: str, **changes: object) -> Path:
    from mhacli import run
    from mhacli.io.export import npz_arrays

    arrays = npz_arrays(run("the cat sat on the mat", causal=True))
    for key, value in changes.items():
        if callable(value):
            arrays[key] = value(arrays[key].copy())
        else:
            arrays[key] = value  # type: ignore[assignment]
    np.savez(tmp_path / name, **arrays)
    return tmp_path / name


def _poison(value: float, at: tuple[int, ...] = (0, 0)):
    def change(a: np.ndarray) -> np.ndarray:
        a[at] = value
        return a
    return change


HOSTILE = {
    "seed infinite": ({"seed": np.array(np.inf)}, "seed must be a whole number, got inf"),
    "num_heads infinite": ({"num_heads": np.array(np.inf)}, "num_heads must be a whole number, got inf"),
    "num_heads NaN": ({"num_heads": np.array(np.nan)}, "num_heads must be a whole number, got nan"),
    "d_model a fraction": ({"d_model": np.array(2.5)}, "d_model must be a whole number, got 2.5"),
    "seed negative": ({"seed": np.array(-1)}, "seed must be a whole number from 0"),
    "seed an array": ({"seed": np.arange(3)}, "seed must be a single whole number"),
    "causal a number": ({"causal": np.array(7)}, "causal must be true or false"),
    "W_q infinite": ({"W_q": _poison(np.inf)}, "W_q holds infinite or NaN values"),
    "X NaN": ({"X": _poison(np.nan)}, "X holds infinite or NaN values"),
    "output infinite": ({"output": _poison(-np.inf)}, "output holds infinite or NaN values"),
    "scores +inf": ({"scores": _poison(np.inf, (0, 0, 0))}, "scores holds infinite or NaN values"),
    "weights NaN": ({"weights": _poison(np.nan, (0, 0, 0))}, "weights holds infinite or NaN values"),
    "weights as text": ({"weights": np.array("0.5")}, "weights has shape ()"),
    "tokens as numbers": ({"tokens": np.arange(6)}, "tokens must be a 1-D array of strings"),
    "unknown tokenizer": ({"tokenizer": np.array("bytes")}, "unknown tokenizer 'bytes'"),
    "rules of the wrong length": ({"rules": np.array(["x"])}, "rules must hold one string per head"),
    "a newer format": ({"format_version": np.array(99)}, "it is format 99, newer than this mhacli reads"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_trace_gets_one_clear_line_and_no_warning(tmp_path, case):
    changes, expected = HOSTILE[case]
    _tampered(tmp_path, "bad.npz", **changes)
    for command in (("show", "bad.npz", "--no-plots"), ("verify", "bad.npz")):
        proc = mha_in_process(*command, cwd=tmp_path)
        line = one_error_line(proc)  # nothing else on stderr: no RuntimeWarning, no source line
        assert proc.returncode == 2, proc.stderr
        assert "is not a valid mha trace" in line and expected in line, line


def test_a_member_that_is_not_npy_data_or_holds_objects(tmp_path):
    import io
    import zipfile

    from mhacli import run
    from mhacli.io.export import npz_arrays

    arrays = npz_arrays(run("the cat sat"))
    cases = {"garbage.npz": ("seed", b"hello, not npy"), "truncated-header.npz": ("W_q", b"\x93NUMPY\x01\x00")}
    for file, (member, data) in cases.items():
        with zipfile.ZipFile(tmp_path / file, "w") as z:
            for name, value in arrays.items():
                buf = io.BytesIO()
                np.save(buf, value)
                z.writestr(name + ".npy", data if name == member else buf.getvalue())
    with zipfile.ZipFile(tmp_path / "objects.npz", "w") as z:
        for name, value in arrays.items():
            buf = io.BytesIO()
            np.save(buf, np.array(list(value), dtype=object) if name == "tokens" else value, allow_pickle=True)
            z.writestr(name + ".npy", buf.getvalue())
    expected = {"garbage.npz": "its member 'seed' is not .npy array data",
                "truncated-header.npz": "its member 'W_q' is not .npy array data",
                "objects.npz": "holds Python objects"}
    for file, words in expected.items():
        proc = mha_in_process("verify", file, cwd=tmp_path)
        assert proc.returncode == 2 and words in one_error_line(proc), proc.stderr


# ---------------------------------------------------------------------------
# Families 2 and 3: outputs that collide with inputs or each other; links and trailing slashes
# ---------------------------------------------------------------------------

def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink() else b"")
            for p in folder.rglob("*")}


@pytest.fixture()
def figs(tmp_path: Path) -> Path:
    from mhacli import run
    from mhacli.io.export import save_npz

    (tmp_path / "figs").mkdir()
    save_npz(run("the cat sat"), tmp_path / "figs" / "heads.png")  # what `mha explain --save-npz` writes
    (tmp_path / "figs" / "magnifiers.png").write_text("the cat sat on the mat")
    (tmp_path / "victim.txt").write_text("precious")
    return tmp_path


@pytest.mark.parametrize(("args", "words"), [
    (["show", "figs/heads.png", "--out", "figs"], "is the input (the trace file)"),
    (["show", "figs/../figs/heads.png", "--out", "./figs/"], "is the input (the trace file)"),
    (["explain", "--file", "figs/magnifiers.png", "--out", "figs"], "is the input (--file)"),
    (["compare", "--file", "figs/magnifiers.png", "--out", "figs", "--format", "png"], None),
    (["explain", "the cat", "--html", "figs/heads.png", "--out", "figs"], "name the same file"),
    (["explain", "the cat", "--html", "figs/head-2.png", "--out", "figs"], "name the same file"),
    (["explain", "the cat", "--save-npz", "x.npz", "--html", "./x.npz", "--no-plots"], "name the same file"),
    (["show", "figs/heads.png", "--html", "figs/heads.png", "--no-plots"], "is also the input"),
])
def test_an_output_never_lands_on_an_input_or_another_output(figs, args, words):
    before = _listing(figs)
    proc = mha_in_process(*args, cwd=figs)
    if words is None:  # compare writes single-vs-multi.png only: no collision, a real run
        assert proc.returncode == 0, proc.stderr
        assert (figs / "figs" / "magnifiers.png").read_text() == "the cat sat on the mat"
        return
    line = one_error_line(proc)
    assert proc.returncode == 2 and words in line, line
    assert _listing(figs) == before


@pytest.mark.parametrize("name", ["head-1.png", "heads.png", "magnifiers.png"])
def test_a_link_planted_in_out_is_never_followed(figs, name):
    link = figs / "figs" / name
    link.unlink(missing_ok=True)
    link.symlink_to(figs / "victim.txt")
    proc = mha_in_process("explain", "the cat", "--out", "figs", cwd=figs)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "symbolic link" in line and name in line
    assert (figs / "victim.txt").read_text() == "precious" and link.is_symlink()


def test_a_link_appearing_during_the_run_is_replaced_not_followed(tmp_path):
    from mhacli.io.files import atomic_write_text, confine

    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "victim.txt").write_text("precious")
    confine(out)
    (out / "heads.png").symlink_to(tmp_path / "victim.txt")
    atomic_write_text(out / "heads.png", "figure")
    assert (tmp_path / "victim.txt").read_text() == "precious"
    assert not (out / "heads.png").is_symlink() and (out / "heads.png").read_text() == "figure"


@pytest.mark.parametrize(("option", "value"), [
    ("--save-npz", "keep.txt/"), ("--html", "newdir/"), ("--save-npz", "existing/"), ("--html", "./"),
    ("--save-npz", "."),
])
def test_a_trailing_slash_names_a_folder_and_is_refused(tmp_path, option, value):
    (tmp_path / "keep.txt").write_text("keep")
    (tmp_path / "existing").mkdir()
    before = _listing(tmp_path)
    proc = mha_in_process("explain", "the cat", "--no-plots", option, value, cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and ("names a folder" in line or "is a folder" in line), line
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("target", ["missing-folder/page.html", "/nonexistent/x/y.html"])
def test_an_html_target_behind_a_dangling_link_is_refused_before_the_run(tmp_path, target):
    (tmp_path / "page.html").symlink_to(target)
    proc = mha_in_process("explain", "the cat", "--no-plots", "--html", "page.html", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "symbolic link" in line and "does not exist" in line


def test_a_dangling_link_into_an_existing_folder_is_written_through(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "page.html").symlink_to(tmp_path / "real" / "page.html")
    proc = mha_in_process("explain", "the cat", "--no-plots", "--html", "page.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "real" / "page.html").read_text().startswith("<!")


# ---------------------------------------------------------------------------
# Families 6 and 7: numbers and names past their limits; streams and environment
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["9" * 5000, "-" + "1" * 4301, "+" + "0" * 30, "1" * 19])
@pytest.mark.parametrize("command", ["explain", "demo"])
def test_a_query_with_thousands_of_digits_is_a_usage_error(tmp_path, query, command):
    extra = ["--no-plots"] if command == "explain" else ["--no-pause"]
    proc = mha_in_process(command, "the cat sat", "--query", query, *extra, cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "is beyond any text" in line and "digits" in line
    assert len(line) < 200


def test_a_trace_whose_name_is_not_utf8_still_gets_a_page(tmp_path):
    from mhacli import run
    from mhacli.io.export import save_npz

    save_npz(run("the cat sat"), tmp_path / "t.npz")  # what `mha explain --save-npz` writes
    odd = os.fsencode(tmp_path) + b"/tr\xe9\xff.npz"
    os.rename(tmp_path / "t.npz", odd)
    proc = subprocess.run([os.fsencode(MHA), b"show", odd, b"--no-plots", b"--html", b"page.html"], cwd=tmp_path,
                          env=ENV, capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "tr\\\\xe9\\\\xff.npz" in page  # the name's bytes spelled out in the page's JSON


# explain, which writes a file, in the default tier; the other commands' closed stdout in the slow tier (issue 46.5)
@pytest.mark.parametrize("args", [["explain", "the cat sat", "--no-plots", "--save-npz", "c.npz"],
                                  *(pytest.param(a, marks=pytest.mark.slow)
                                    for a in (["show", "c.npz", "--no-plots"], ["samples"], ["shapes"]))])
def test_a_closed_stdout_does_not_crash_and_files_are_still_whole(tmp_path, args):
    if args[0] == "show":  # a trace to show, as `mha explain --save-npz` writes it (that run is the first case)
        from mhacli import run
        from mhacli.io.export import save_npz

        save_npz(run("the cat sat"), tmp_path / "c.npz")
    proc = subprocess.run(["sh", "-c", '"$0" "$@" >&-', str(MHA), *args], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Error" not in proc.stderr and "Traceback" not in proc.stderr
    if args[0] == "explain":
        with np.load(tmp_path / "c.npz") as z:
            assert int(z["format_version"]) == 2


@pytest.mark.parametrize("config_dir", ["/dev/null/x", "missing-parent-is-a-file/x", "readonly"])
@pytest.mark.slow
def test_an_unusable_mplconfigdir_lets_matplotlib_print_nothing(tmp_path, config_dir):
    (tmp_path / "missing-parent-is-a-file").write_text("")
    (tmp_path / "readonly").mkdir(mode=0o500)
    # A temporary folder of its own: the other cases run at the same time in another worker and make theirs in
    # the shared one, which made this check fail now and then under pytest -n 2.
    private = tmp_path / "tmp"
    private.mkdir()
    env = {**ENV, "MPLCONFIGDIR": str(tmp_path / config_dir) if not config_dir.startswith("/") else config_dir,
           "TMPDIR": str(private)}
    # one head (3 of the 7 figures fewer) at --dpi 30: what matplotlib prints, not pixels
    proc = mha("explain", "the cat sat", "--heads", "1", "--dpi", "30", "--out", "figs", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and (tmp_path / "figs" / "heads.png").exists()
    assert not list(private.glob("mha-matplotlib-*"))  # the temporary config folder went with the run


@pytest.mark.parametrize(("heads", "dpi", "fits"), [(4, 150, True), (512, 600, False), (256, 600, False)])
def test_the_memory_plan_counts_figures(heads, dpi, fits):
    from mhacli.io.memory import memory_limit_bytes
    from mhacli.render.sizes import check_figures_fit, figure_bytes
    from mhacli.attention.errors import UsageError

    assert figure_bytes(heads, 40, 2 * dpi) > 3.9 * (figure_bytes(heads, 40, dpi) - 256 * 2**20)
    assert figure_bytes(heads, 40, dpi, "svg") == figure_bytes(heads, 40, dpi, "png")  # rasterised at dpi too
    if figure_bytes(heads, 40, dpi) <= memory_limit_bytes():
        check_figures_fit(heads, 40, dpi)
        return
    assert not fits
    with pytest.raises(UsageError) as caught:
        check_figures_fit(heads, 40, dpi)
    assert "--dpi" in caught.value.for_cli() and "--no-plots" in caught.value.for_cli()


def test_a_figure_too_big_for_memory_is_refused_before_the_run(tmp_path):
    proc = mha_in_process("explain", "the cat", "--d-model", "512", "--heads", "512", "--dpi", "600", "--out",
                          "figs", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "the figures of 512 heads at --dpi 600 need" in line
    assert not (tmp_path / "figs").exists()


# ---------------------------------------------------------------------------
# Family 8: escape sequences in what the tool itself prints
# ---------------------------------------------------------------------------

#: Each kind of sequence in a folder's name: a colour (CSI), a window title (OSC ... BEL), a right-to-left
#: override, and the one-byte CSI (U+009B). One name carries all four: the escaping is per character
#: (test_printable_is_the_one_escaping_function below), so one demo and one explain check every kind, each
#: spelled out in every note, where a run per kind drew the same figures four times (13 of the suite's CPU s).
HOSTILE_PARTS = {"\x1b[31mred": "\\x1b[31mred", "\x1b]0;title\x07": "\\x1b]0;title\\x07",
                 "\u202eevil": "\\u202eevil", "\x9b2J": "\\x9b2J"}
HOSTILE_NAME = "fig" + "".join(HOSTILE_PARTS)
SPELLED_NAME = "fig" + "".join(HOSTILE_PARTS.values())


@pytest.mark.slow
def test_an_out_name_with_escape_sequences_is_spelled_out_in_every_note(tmp_path):
    name = HOSTILE_NAME
    out = tmp_path / name
    out.mkdir()
    (out / "head-9.png").write_bytes(b"left from a run with 9 heads")
    # One head (3 of the 7 figures fewer) and every figure at --dpi 30: names and notes, not pixels.
    # In-process, warnings recorded; each command sizes its consoles from the COLUMNS it runs with.
    runs = [
        mha_in_process("demo", "--no-pause", "--heads", "1", "--dpi", "30", "--out", name, cwd=tmp_path,
                       env={"COLUMNS": "100"}),  # its heatmap note
        # The grids are too wide: "the heatmaps are in …" (a grid of 12 tokens needs more than 40 columns);
        # and the note on the leftover head-9.png.
        mha_in_process("explain", " ".join(f"w{i}" for i in range(12)), "--heads", "1", "--dpi", "30", "--out",
                       name, cwd=tmp_path, env={"COLUMNS": "40"}),
    ]
    raw = [ch for ch in name if ch in "\x1b\x07\x9b\u202e"]
    assert sorted(set(raw)) == sorted("\x1b\x07\x9b\u202e")  # every kind is in the name
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
        both = proc.stdout + proc.stderr
        assert not any(ch in both for ch in raw), repr(both[:300])
        assert SPELLED_NAME in both.replace("\n", ""), repr(both[:600])
    # Each note names the folder, spelled out (at 40 columns the name, longer than a line, is folded).
    assert "heatmapsarein" + SPELLED_NAME in "".join(runs[1].stdout.split()), runs[1].stdout  # spaces aside
    leftover = [line for line in runs[1].stderr.splitlines() if "head-9.png" in line and "note" in line]
    assert len(leftover) == 1 and f"note: {SPELLED_NAME} also holds head-9.png" in leftover[0], runs[1].stderr


@pytest.mark.parametrize("text", ["a\x1b[2Jb", "x\u202ey", "p\x00q", "\ud800", "tab\there", "l\u2028m"])
def test_printable_is_the_one_escaping_function(text):
    from mhacli.attention.messages import one_line, printable, shown

    for escaped in (printable(text), one_line(text), shown(text)):
        assert all(ch.isprintable() or ch in " \u200d" for ch in escaped), repr(escaped)
    assert printable("naïve 日本 👍🏽 👨\u200d👩") == "naïve 日本 👍🏽 👨\u200d👩"


def test_preparing_the_process_again_changes_nothing(monkeypatch, tmp_path):
    """The script's entry prepares the process and each run does again: one noise filter on unraisable
    exceptions, the same handlers, the same matplotlib folder."""
    from mhacli.io.environment import prepare_process

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path))
    try:
        prepare_process()
        hook, installed = sys.unraisablehook, {s: signal.getsignal(s) for s in handlers}
        prepare_process()
        assert sys.unraisablehook is hook and hook is not sys.__unraisablehook__
        assert {s: signal.getsignal(s) for s in handlers} == installed
        assert os.environ["MPLCONFIGDIR"] == str(tmp_path)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)


# A signal while the script's modules load, before the command's own exit path (MhaGroup.main) exists: an import
# hook sends it exactly as a module is looked up, from the entry's very first import on.
SIGNAL_AT_IMPORT = """
import os, signal, sys

class SignalAtImport:
    def find_spec(self, name, path=None, target=None):
        if name == "{module}":
            os.kill(os.getpid(), signal.{name})
        return None

sys.meta_path.insert(0, SignalAtImport())
sys.argv = ["mha", "explain", "the cat sat on the mat", "--out", "figs"]
from mhacli.__main__ import main
main()
"""


@pytest.mark.parametrize("module", ["mhacli.io.environment", "mhacli.cli.app"])
@pytest.mark.parametrize(("name", "code", "said"), [("SIGTERM", 143, "terminated (SIGTERM)"),
                                                    ("SIGINT", 130, "interrupted (Ctrl-C)")])
def test_a_signal_while_the_command_loads_is_one_line_and_its_exit_code(tmp_path, module, name, code, said):
    """It was a traceback ending in KeyboardInterrupt or Terminated (a Ctrl-C a few hundredths of a second into a
    real mha explain landed while the entry prepared the process, outside its guard)."""
    from pause import default_signals

    script = SIGNAL_AT_IMPORT.replace("{module}", module).replace("{name}", name)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, preexec_fn=default_signals)
    if name == "SIGTERM" and module == "mhacli.io.environment":
        # Before mha's handlers exist SIGTERM has its default action: the process ends silently (the shell
        # reports 143), with nothing written and no traceback.
        assert proc.returncode == -signal.SIGTERM and proc.stdout == proc.stderr == ""
    else:
        assert proc.returncode == code and proc.stdout == "", proc.stderr
        assert proc.stderr == f"mha: error: {said}; nothing half-written was left behind.\n"
    assert list(tmp_path.iterdir()) == []
