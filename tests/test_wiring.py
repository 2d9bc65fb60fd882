"""Issue 14's io-level guards, wired into every command: each behaviour through Typer's CliRunner
(the app's own error handling runs inside it) and, where signals or streams matter, the installed
``mha`` in a real process.

- every output is planned once, before any work (the core's run is never reached on a refusal);
- ``--query`` is checked before the text is run or the trace is read;
- one exit path: exceptions and signals leave no temporary file or folder, and the exit code says how;
- every string the tool prints is escaped (notes, file lists, JSON);
- the figures' memory (pixels x dpi²) is planned before --out is made, and its advice is honest;
- exports keep the weight source as an enum and can leave the arrays out.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mhacli.cli.app import app

MHA = Path(sys.executable).with_name("mha")
CAT = "the cat sat on the mat"
TRAIN_FAST = ["--steps", "20", "--batch", "8"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update({"MPLBACKEND": "Agg", "MPLCONFIGDIR": str(tmp_path / ".mpl"), "COLUMNS": "100", **extra})
    return env


def _one_error(result, code: int = 2) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == code, result.output
    assert len(lines) == 1 and lines[0].startswith("mha: error: "), result.stderr
    return lines[0]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


@pytest.fixture()
def no_run(monkeypatch):
    """Fail loudly if a command reaches the core: a refusal must come before any work."""
    import mhacli.attention.trace
    import mhacli.grammar.train
    import mhacli.models.trained  # noqa: F401 - imported before the patch: it binds run_tokens when first imported

    def never(*args, **kwargs):
        raise AssertionError("the run started before the refusal")

    monkeypatch.setattr(mhacli.attention.trace, "run_tokens", never)
    monkeypatch.setattr(mhacli.grammar.train, "train", never)
    monkeypatch.setattr(mhacli.grammar.train, "train_stack", never)


# ---------------------------------------------------------------------------
# Every output planned once, before any work
# ---------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "words"), [
    (["explain", CAT, "--html", "figs/heads.png", "--out", "figs"], "name the same file"),
    (["explain", CAT, "--save-npz", "figs/split.png", "--out", "figs"], "name the same file"),
    (["explain", CAT, "--save-npz", "x.npz", "--html", "x.npz", "--no-plots"], "name the same file"),
    (["explain", CAT, "--save-npz", "keep/", "--no-plots"], "ends with '/', which names a folder"),
    (["explain", CAT, "--html", "page.html/", "--no-plots"], "ends with '/', which names a folder"),
    (["explain", "--file", "figs/heads.png", "--out", "figs"], "which is the input (--file)"),
    (["compare", "--file", "figs/single-vs-multi.png", "--out", "figs"], "which is the input (--file)"),
    (["demo", "--file", "figs/magnifiers.png", "--out", "figs", "--no-pause"], "which is the input (--file)"),
    (["train", *TRAIN_FAST, "--save", "figs/training.png", "--out", "figs"], "name the same file"),
    (["explain", CAT, "--weights", "own.npz", "-H", "2", "--save-npz", "own.npz"], "is also the input (--weights)"),
    (["train", *TRAIN_FAST, "--save", "model.npz/"], "ends with '/', which names a folder"),
])
def test_a_colliding_output_is_refused_before_any_work(runner, tmp_path, monkeypatch, no_run, args, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figs").mkdir()
    for name in ("heads.png", "single-vs-multi.png", "magnifiers.png"):
        (tmp_path / "figs" / name).write_text(CAT)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "own.npz", **{"in_proj_weight": rng.normal(size=(24, 8)),
                                      "out_proj.weight": rng.normal(size=(8, 8))})
    before = _files(tmp_path)
    result = runner.invoke(app, args)
    assert words in _one_error(result)
    assert result.stdout == "" and _files(tmp_path) == before


@pytest.mark.parametrize(("args", "name"), [
    (["explain", CAT, "--out", "figs"], "split.png"),
    (["compare", CAT, "--out", "figs"], "single-vs-multi.png"),
    (["train", *TRAIN_FAST, "--out", "figs"], "training-heads.png"),
    (["bench", "--max-tokens", "16", "--repeats", "1", "--plot", "--out", "figs"], "bench.png"),
])
def test_a_link_planted_in_out_is_refused_in_every_command(runner, tmp_path, monkeypatch, no_run, args, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figs").mkdir()
    (tmp_path / "victim.txt").write_text("precious")
    (tmp_path / "figs" / name).symlink_to(tmp_path / "victim.txt")
    result = runner.invoke(app, args)
    line = _one_error(result)
    assert "symbolic link" in line and name in line
    assert (tmp_path / "victim.txt").read_text() == "precious"


@pytest.mark.slow
def test_the_planned_figure_names_are_exactly_the_files_written(runner, tmp_path, monkeypatch, explain_drawn,
                                                               compare_drawn):
    from mhacli.io.outputs import figure_names

    monkeypatch.chdir(tmp_path)
    # png: the session's explain and compare runs (conftest), 4 heads; svg here, with 2
    assert explain_drawn.argv == ("explain", CAT) and compare_drawn.argv == ("compare", CAT)
    assert _files(explain_drawn.out) == set(figure_names(4, "png"))
    assert _files(compare_drawn.out) == set(figure_names(4, compare=True))
    result = runner.invoke(app, ["explain", CAT, "--heads", "2", "--out", "svg", "--format", "svg", "--quiet",
                                 "--dpi", "30"])  # names, not pixels: the smallest --dpi
    assert result.exit_code == 0, result.output
    assert _files(tmp_path / "svg") == set(figure_names(2, "svg"))


def test_a_file_inside_an_out_folder_yet_to_be_made_is_fine(runner, tmp_path, monkeypatch, quiet_drawn):
    # conftest: the session's one `explain CAT --save-npz new/run.npz --quiet --out new --dpi 30`, run in an
    # empty folder of its own (test_cli_conventions' --quiet reads it too)
    assert quiet_drawn.argv == ("explain", CAT, "--save-npz", "new/run.npz", "--quiet") and quiet_drawn.shown == "new"
    assert quiet_drawn.exit_code == 0, quiet_drawn.output
    assert (quiet_drawn.out / "run.npz").is_file() and (quiet_drawn.out / "heads.png").is_file()
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["explain", CAT, "--no-plots", "--save-npz", "absent/run.npz"])
    assert "folder 'absent' does not exist" in _one_error(result)  # without figures, nothing makes the folder


def test_show_refuses_its_page_over_the_trace_before_reading_it(runner, tmp_path, monkeypatch):
    import mhacli.io.export

    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "t.npz", nothing=np.zeros(1))

    def never(path):
        raise AssertionError("the trace was read before --html was checked")

    monkeypatch.setattr(mhacli.io.export, "load_trace", never)
    result = runner.invoke(app, ["show", "t.npz", "--html", "./t.npz"])
    assert "is also the input (the trace file)" in _one_error(result)


def test_the_installed_script_refuses_before_printing_anything(tmp_path):
    p = subprocess.run([str(MHA), "explain", CAT, "--save-npz", "a.npz", "--html", "a.npz"], cwd=tmp_path,
                       env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("mha: error: --save-npz and --html name the same file 'a.npz'")
    assert len(p.stderr.splitlines()) == 1 and not (tmp_path / "mha-output").exists()


# ---------------------------------------------------------------------------
# --query checked early
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["explain", CAT, "--no-plots"], ["demo", CAT, "--no-pause"],
                                  ["show", "missing.npz", "--no-plots"]])
def test_a_query_of_thousands_of_digits_is_refused_before_the_run(runner, tmp_path, monkeypatch, no_run, args):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [*args, "--query", "7" * 5000])
    line = _one_error(result)
    assert "--query 777777777777…(5,000 digits) is beyond any text" in line and len(line) < 200


def test_a_query_of_a_few_digits_still_names_the_sentence(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["explain", CAT, "--no-plots", "--query", "123456789012345678"])
    assert "outside the sentence; give a position from 0 to 5" in _one_error(result)


# ---------------------------------------------------------------------------
# One exit path: exceptions and signals, temporary files and folders, exit codes
# ---------------------------------------------------------------------------

def test_an_exception_mid_write_leaves_no_temporary_file_or_folder(runner, tmp_path, monkeypatch):
    from mhacli.io import cleanup

    monkeypatch.chdir(tmp_path)
    scratch = tmp_path / "scratch"

    def half_then_fail(handle, **arrays):
        scratch.mkdir()
        cleanup.register(scratch, folder=True)  # as a helper that keeps a folder would
        handle.write(b"PK half an archive")
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(np, "savez", half_then_fail)
    result = runner.invoke(app, ["explain", CAT, "--no-plots", "--save-npz", "t.npz"])
    assert "unexpected ZeroDivisionError: boom" in _one_error(result, code=1)
    assert _temporaries(tmp_path) == [] and not (tmp_path / "t.npz").exists() and not scratch.exists()
    assert cleanup.pending() == []


@pytest.mark.parametrize(("signum", "code", "words"), [
    (signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGHUP, 129, "the terminal went away (SIGHUP)")])
def test_a_signal_unwinding_the_run_names_itself(runner, tmp_path, monkeypatch, signum, code, words):
    import mhacli.attention.trace
    from mhacli.io import cleanup

    monkeypatch.chdir(tmp_path)

    def ended(*args, **kwargs):
        raise cleanup.Terminated(signum)

    monkeypatch.setattr(mhacli.attention.trace, "run_tokens", ended)
    result = runner.invoke(app, ["explain", CAT, "--no-plots"])
    assert _one_error(result, code) == f"mha: error: {words}; nothing half-written was left behind."


def test_a_signal_swallowed_by_a_destructor_still_decides_the_exit_code(runner, tmp_path, monkeypatch):
    """SIGTERM landing in a __del__ cannot unwind the run; the run ends, and the exit code still says 143."""
    import mhacli.attention.trace
    from mhacli.io import cleanup

    real_run = mhacli.attention.trace.run_tokens

    class Unlucky:
        def __del__(self):
            cleanup.on_signal(signal.SIGTERM, None)  # what the handler does when SIGTERM lands here

    def run(*args, **kwargs):
        Unlucky()
        return real_run(*args, **kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mhacli.attention.trace, "run_tokens", run)
    result = runner.invoke(app, ["explain", CAT, "--no-plots", "--save-npz", "t.npz"])
    assert _one_error(result, 143) == "mha: error: terminated (SIGTERM); nothing half-written was left behind."
    assert "Exception ignored" not in result.output
    monkeypatch.setattr(mhacli.attention.trace, "run_tokens", real_run)
    later = runner.invoke(app, ["explain", CAT, "--no-plots"])
    assert later.exit_code == 0, "a signal seen by one command must not end the next"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
@pytest.mark.slow
def test_a_signal_while_figures_are_written_leaves_nothing_behind(tmp_path, sig, code):
    """Real process, unusable MPLCONFIGDIR (so a temporary config folder exists), SVG figures of 16 heads."""
    from pause import paused

    (tmp_path / "tmp").mkdir()
    (tmp_path / "ro").mkdir(mode=0o500)
    env = _env(tmp_path, MPLCONFIGDIR="/dev/null/x", TMPDIR=str(tmp_path / "tmp"))
    text = " ".join(f"w{i}" for i in range(40))
    argv = [str(MHA), "explain", text, "--heads", "16", "--format", "svg", "--out", "figs"]
    # Paused inside savefig of head-2.svg: head-1.svg is written, the rest is not.
    with paused(argv, cwd=tmp_path, env=env, name="head-2.svg", stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE) as (proc, _):
        assert (tmp_path / "figs" / "head-1.svg").exists() and len(_temporaries(tmp_path)) == 1
        assert list((tmp_path / "tmp").glob("mha-matplotlib-*")), "the temporary matplotlib folder is in use"
        proc.send_signal(sig)
        _, err = proc.communicate()
    assert proc.returncode == code, err
    assert err.startswith("mha: error: ") and len(err.strip().splitlines()) == 1 and "nothing half-written" in err
    assert _temporaries(tmp_path) == [] and list((tmp_path / "tmp").iterdir()) == []
    assert not (tmp_path / "figs" / "head-2.svg").exists() and not (tmp_path / "figs" / "magnifiers.svg").exists()


@pytest.mark.slow
def test_sigterm_during_bench_startup_removes_its_folder(tmp_path):
    from pause import paused

    (tmp_path / "tmp").mkdir()
    env = _env(tmp_path, TMPDIR=str(tmp_path / "tmp"))
    # The timed 'mha explain' inherits the pause: it stops inside its first figure, so the bench is
    # waiting on a timed child process, with its folder made, when the signal comes.
    with paused([str(MHA), "bench", "--startup", "--repeats", "3"], cwd=tmp_path, env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as (proc, writing):
        assert "mha-bench-startup-" in writing and list((tmp_path / "tmp").glob("mha-bench-startup-*"))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate()
    assert proc.returncode == 143, err
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.slow
def test_train_piped_into_head_exits_0_and_writes_its_files(tmp_path):
    # One head: training-heads.png has a row of panels per head, and its layout is most of the run's time.
    command = (f"'{MHA}' train --steps 20 --batch 8 --heads 1 --out figs --save figs/model.npz | head -1; "
               "exit ${PIPESTATUS[0]}")
    p = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 1 and "Traceback" not in p.stderr
    assert {"training.png", "training-heads.png", "model.npz"} <= {f.name for f in (tmp_path / "figs").iterdir()}


# ---------------------------------------------------------------------------
# Every string printed is escaped
# ---------------------------------------------------------------------------

RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _no_raw(text: str) -> None:
    assert not any(ch in text for ch in RAW), repr(text[:300])


@pytest.mark.slow
def test_notes_and_file_lists_spell_out_escape_sequences(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = "fig\x1b[31mred\u202e"
    (tmp_path / name).mkdir()
    (tmp_path / name / "head-9.png").write_text("from a run with 9 heads")
    result = runner.invoke(app, ["explain", "the cat sat", "--out", name, "--dpi", "30"])  # notes, not pixels
    assert result.exit_code == 0, result.output
    _no_raw(result.stdout + result.stderr)
    assert "mha: note: fig\\x1b[31mred\\u202e also holds head-9.png" in result.stderr
    assert "fig\\x1b[31mred\\u202e/heads.png" in result.stdout
    trained = runner.invoke(app, ["train", *TRAIN_FAST, "--heads", "1", "--out", name, "--save", f"{name}/m.npz"])
    assert trained.exit_code == 0, trained.output
    _no_raw(trained.stdout + trained.stderr)
    assert "wrote fig\\x1b[31mred\\u202e/m.npz" in trained.stdout


def test_json_documents_hold_no_raw_control_character_and_decode_to_the_same_text(runner, tmp_path, monkeypatch):
    """The tokens are cleaned by the tokenizer; file names are not: verify's and compare's JSON name files.

    All three through the CliRunner: a file name is spelled out by the same code in a process or not
    (a real verify would also spend ~2 s importing PyTorch for its second opinion).
    """
    name = "t\x1b[31m\u202e\x9b.npz"
    monkeypatch.chdir(tmp_path)
    made = runner.invoke(app, ["explain", CAT, "--no-plots", "--save-npz", name], env={"COLUMNS": "100"})
    assert made.exit_code == 0, made.stderr
    _no_raw(made.stdout + made.stderr)
    for args, key in ((["verify", name, "--json"], "file"),
                      (["compare", CAT, "--json", "--out", name[:-4], "--dpi", "30"], "files")):  # names, not pixels
        result = runner.invoke(app, args, env={"COLUMNS": "100"})
        assert result.exit_code == 0, result.stderr
        _no_raw(result.stdout + result.stderr)
        assert "\\u001b" in result.stdout and "\\u202e" in result.stdout and "\\u009b" in result.stdout
        value = json.loads(result.stdout)[key]
        assert (value if key == "file" else value[0].split("/")[0] + ".npz") == name  # decoded back exactly


def test_the_cli_has_one_escaping_function():
    """cli and io print through mhacli.attention.messages (printable, one_line, shown), never tokenize's copy."""
    package = Path(__file__).resolve().parent.parent / "mhacli"
    for folder in ("cli", "io"):
        for path in (package / folder).rglob("*.py"):
            assert "tokenize import printable" not in path.read_text(encoding="utf-8"), path


# ---------------------------------------------------------------------------
# The figures' memory plan
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_figures_too_big_are_refused_before_out_is_made_and_the_advice_works(runner, tmp_path, monkeypatch):
    import mhacli.io.memory as memory
    from mhacli.attention.config import Config
    from mhacli.render.sizes import figure_bytes

    monkeypatch.chdir(tmp_path)
    # Two tokens: the largest figure is the 16 heads' magnifier slide either way, and the run that does
    # draw (at the suggested dpi) draws smaller heatmaps than with six (half the time).
    arrays = Config(heads=16, d_model=16).planned_bytes(2)
    limit = arrays + figure_bytes(16, 2, 200) - figure_bytes(16, 2, 30)  # 200 dpi fits, 600 does not
    monkeypatch.setattr(memory, "memory_limit_bytes", lambda: limit)
    args = ["explain", "the cat", "--heads", "16", "--quiet"]
    refused = runner.invoke(app, [*args, "--dpi", "600", "--out", "big"])
    line = _one_error(refused)
    assert "the figures of 16 heads at --dpi 600 need" in line and not (tmp_path / "big").exists()
    suggested = int(re.search(r"use --dpi (\d+) or less", line).group(1))
    assert 150 < suggested < 600
    assert runner.invoke(app, [*args, "--dpi", str(suggested), "--out", "ok"]).exit_code == 0
    assert runner.invoke(app, [*args, "--dpi", str(suggested + 1), "--out", "no"]).exit_code == 2
    # svg rasterises its heatmaps at --dpi as well (measured in core.config): refused the same, not advised.
    svg = runner.invoke(app, [*args, "--dpi", "600", "--format", "svg", "--out", "svg"])
    assert svg.exit_code == 2 and "--format svg" not in _one_error(svg) and not (tmp_path / "svg").exists()
    assert runner.invoke(app, [*args, "--dpi", "600", "--no-plots"]).exit_code == 0


def test_show_plans_the_figures_of_the_trace_it_reads(runner, tmp_path, monkeypatch):
    import mhacli.io.memory as memory
    from mhacli.render.sizes import figure_bytes

    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["explain", CAT, "--heads", "16", "--no-plots", "--save-npz", "t.npz"]).exit_code == 0
    monkeypatch.setattr(memory, "memory_limit_bytes", lambda: figure_bytes(16, 6, 300))
    line = _one_error(runner.invoke(app, ["show", "t.npz", "--dpi", "600", "--out", "figs"]))
    assert "the figures of 16 heads at --dpi 600" in line and not (tmp_path / "figs").exists()


@pytest.mark.slow
def test_the_plan_bounds_the_pixels_really_drawn(runner, tmp_path, monkeypatch):
    """The plan's largest figure holds at least as many pixels as any figure drawn (16 heads, 40 tokens)."""
    import struct

    from mhacli.render.sizes import figure_inches

    monkeypatch.chdir(tmp_path)
    text = " ".join(f"w{i}" for i in range(40))
    assert runner.invoke(app, ["explain", text, "--heads", "16", "--dpi", "40", "--quiet"]).exit_code == 0
    _, width, height = figure_inches(16, 40)
    for png in (tmp_path / "mha-output").glob("*.png"):
        w, h = struct.unpack(">II", png.read_bytes()[16:24])
        assert w * h <= width * height * 40 * 40, png.name


# ---------------------------------------------------------------------------
# Exports: the weight source as an enum, the arrays optional
# ---------------------------------------------------------------------------

def test_the_schema_names_exactly_the_weight_sources():
    from mhacli.attention.config import WEIGHT_SOURCES
    from mhacli.io.export import trace_schema

    schema = trace_schema()
    assert schema["$defs"]["weight_source"]["enum"] == list(WEIGHT_SOURCES)
    for where in (schema["properties"]["weight_kind"], schema["properties"]["config"]["properties"]["weights"]):
        assert where["$ref"] == "#/$defs/weight_source"


@pytest.mark.parametrize("args", [["--worked"], [CAT, "--weights", "designed"], [CAT, "--weights", "trained"]])
def test_documents_of_every_weight_source_follow_the_schema(runner, tmp_path, monkeypatch, args):
    jsonschema = pytest.importorskip("jsonschema")
    from mhacli.io.export import trace_schema

    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["explain", *args, "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    jsonschema.validate(document, trace_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "weight_kind": "bogus"}, trace_schema())


def test_no_json_arrays_leaves_the_arrays_out_and_plans_memory_without_them(runner, tmp_path, monkeypatch):
    jsonschema = pytest.importorskip("jsonschema")
    import mhacli.io.memory as memory
    from mhacli.attention.config import Config
    from mhacli.io.export import trace_schema

    monkeypatch.chdir(tmp_path)
    text = " ".join(f"w{i}" for i in range(200))
    full = runner.invoke(app, ["explain", text, "--json", "--no-plots"])
    small = runner.invoke(app, ["explain", text, "--json", "--no-json-arrays", "--no-plots"])
    assert full.exit_code == small.exit_code == 0
    a, b = json.loads(full.stdout), json.loads(small.stdout)
    assert b["arrays"] is None and set(a["arrays"]) >= {"X", "weights", "scores"}
    assert {k: v for k, v in a.items() if k not in ("arrays", "notes")} == \
        {k: v for k, v in b.items() if k not in ("arrays", "notes")}
    assert len(small.stdout) * 20 < len(full.stdout)
    jsonschema.validate(b, trace_schema())
    # A machine with room for the run but not for its arrays as JSON: only --no-json-arrays runs.
    room = Config().planned_bytes(200) + 2**20
    monkeypatch.setattr(memory, "memory_limit_bytes", lambda: room)
    assert "drop --json" in _one_error(runner.invoke(app, ["explain", text, "--json", "--no-plots"]))
    assert runner.invoke(app, ["explain", text, "--json", "--no-json-arrays", "--no-plots"]).exit_code == 0
    result = runner.invoke(app, ["explain", text, "--no-json-arrays", "--no-plots"])
    assert "add --json or drop them" in _one_error(result)


def test_quiz_names_the_run_it_asks_about_not_the_options_typed(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    name = "own\x1b[31m.npz"
    np.savez(tmp_path / name, **{"in_proj_weight": rng.normal(size=(24, 8)),
                                 "out_proj.weight": rng.normal(size=(8, 8))})
    result = runner.invoke(app, ["quiz", "the cat sat", "--weights", name, "--heads", "2"])
    assert result.exit_code == 0, result.output
    _no_raw(result.stdout + result.stderr)
    assert "d = 8, h = 2" in result.stdout and "pytorch weights" in " ".join(result.stdout.split())
    trained = runner.invoke(app, ["quiz", "the cat sat", "--weights", "trained"])
    assert trained.exit_code == 0 and "trained weights" in " ".join(trained.stdout.split())


def test_worked_plans_the_figures_of_its_own_two_heads(runner, tmp_path, monkeypatch):
    from mhacli.measures.worked import HEADS
    from mhacli.io.outputs import figure_names

    monkeypatch.chdir(tmp_path)
    (tmp_path / "figs").mkdir()
    (tmp_path / "victim.txt").write_text("precious")
    (tmp_path / "figs" / "head-3.png").symlink_to(tmp_path / "victim.txt")  # not a name --worked writes
    result = runner.invoke(app, ["explain", "--worked", "--out", "figs", "--heads", "4", "--quiet", "--dpi", "30"])
    assert result.exit_code == 0, result.output
    assert _files(tmp_path / "figs") == set(figure_names(HEADS)) | {"head-3.png"}
    assert (tmp_path / "victim.txt").read_text() == "precious"


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_a_swallowed_signal_is_what_the_run_reports_not_the_write_that_failed_after_it(runner, tmp_path,
                                                                                     monkeypatch, signum):
    # Seen once under load: SIGHUP while a figure was written removed the temporary file at once, a library
    # swallowed the exception, and the writer then failed on its vanished file ("cannot write …").
    import mhacli.render.figures as figures
    from mhacli.io import cleanup

    def swallowing_writer(*args, **kwargs):
        try:
            cleanup.on_signal(signum, None)  # what the installed handler does when the signal arrives
        except BaseException:  # noqa: BLE001 - a library that swallows it
            pass
        raise FileNotFoundError(2, "No such file or directory", "figs/head-2.svg")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(figures, "save_figures", swallowing_writer)
    result = runner.invoke(app, ["explain", "the cat", "--out", "figs"])
    assert result.exit_code == cleanup.exit_code_for(signum), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mha: error: "), result.stderr
    assert "nothing half-written was left behind" in lines[0] and "cannot write" not in lines[0], lines
