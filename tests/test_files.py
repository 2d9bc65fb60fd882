"""Nothing lost: atomic writes, refused targets, untouched neighbours, clean interrupts."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mhacli.cli.app import app
from mhacli.attention.errors import RunError, UsageError
from mhacli.io.files import TEMP_SUFFIX, atomic_write, atomic_write_text, check_target, prepare_out_dir

MHA = Path(sys.executable).with_name("mha")
NO_PLOTS = ["--no-plots"]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _listing(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``folder`` with its mtime and bytes: 'untouched' means equal listings."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _temps(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(TEMP_SUFFIX)]


# ---------------------------------------------------------------------------
# atomic_write
# ---------------------------------------------------------------------------

def test_atomic_write_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old contents that are longer than the new ones")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert _temps(tmp_path) == []


@pytest.mark.parametrize("failure", [KeyboardInterrupt, RuntimeError, MemoryError])
def test_a_failure_half_way_leaves_the_old_file_and_no_temporary(tmp_path, failure):
    target = tmp_path / "trace.npz"
    target.write_bytes(b"the previous run")

    def half_then_fail(handle):
        handle.write(b"PK\x03\x04 half an archive")
        raise failure()

    with pytest.raises(failure):
        atomic_write(target, half_then_fail)
    assert target.read_bytes() == b"the previous run"
    assert _temps(tmp_path) == []


def test_an_os_error_while_writing_is_a_run_error_with_nothing_left(tmp_path):
    target = tmp_path / "new.npz"

    def disk_full(handle):
        handle.write(b"x")
        raise OSError(28, "No space left on device")

    with pytest.raises(RunError, match="No space left on device"):
        atomic_write(target, disk_full)
    assert not target.exists() and _temps(tmp_path) == []


def test_the_new_file_keeps_the_mode_of_the_one_it_replaces(tmp_path):
    target = tmp_path / "shared.npz"
    target.write_bytes(b"old")
    target.chmod(0o640)
    atomic_write_text(target, "new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_new_file_gets_the_umask_mode_not_a_private_temp_mode(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "fresh.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "fresh.txt").stat().st_mode) == 0o644


def test_a_symlink_target_replaces_the_file_it_points_to(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


# ---------------------------------------------------------------------------
# Targets refused before any work
# ---------------------------------------------------------------------------

def test_check_target_refuses_folders_missing_folders_devices_and_files_as_folders(tmp_path):
    (tmp_path / "a_file").write_text("x")
    cases = {
        tmp_path: "is a folder",
        tmp_path / "missing" / "x.npz": "does not exist; create it first",
        Path("/dev/null"): "not a regular file",
        tmp_path / "a_file" / "x.npz": "is a file, not a folder",
        tmp_path / ("n" * 300 + ".npz"): "too long",
    }
    for target, needle in cases.items():
        with pytest.raises(UsageError, match=needle):
            check_target(target, "--save-npz")
    check_target(tmp_path / "fine.npz", "--save-npz")  # no error


def test_a_name_that_fits_but_whose_temporary_would_not_is_refused(tmp_path):
    with pytest.raises(UsageError, match="too long"):
        check_target(tmp_path / ("n" * 250), "--save-npz")


def test_prepare_out_dir_creates_nested_folders_and_refuses_files(tmp_path):
    made = prepare_out_dir(tmp_path / "a" / "b")
    assert made.is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        prepare_out_dir(tmp_path / "file")
    with pytest.raises(UsageError, match="part of that path is a file"):
        prepare_out_dir(tmp_path / "file" / "sub")


def test_folders_made_for_a_run_go_when_it_fails_while_empty_and_stay_with_a_file(tmp_path):
    from mhacli.io import cleanup

    (tmp_path / "kept").mkdir()
    prepare_out_dir(tmp_path / "kept" / "new" / "deeper")
    prepare_out_dir(tmp_path / "used")
    (tmp_path / "used" / "heads.png").write_bytes(b"x")
    cleanup.remove_all()  # how every run ends (mhacli.cli.app), a signal's handler included
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "used"]
    assert list((tmp_path / "kept").iterdir()) == [] and (tmp_path / "used" / "heads.png").exists()
    assert cleanup.pending() == []


def test_a_usage_error_found_after_out_was_made_leaves_no_folder(runner, tmp_path, monkeypatch):
    """--step's bound is known once the lesson is built, after --out was made for its figures."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kept").mkdir()
    for out in ("st", "kept/a/b"):
        result = runner.invoke(app, ["demo", "the cat", "--no-pause", "--step", "99", "--out", out])
        assert result.exit_code == 2 and "--step must be from 1 to" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and list((tmp_path / "kept").iterdir()) == []


@pytest.mark.skipif(IS_ROOT, reason="root may write into any folder; covered through setpriv below")
def test_unwritable_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(UsageError, match="not writable"):
            check_target(locked / "x.npz", "--save-npz")
        with pytest.raises(UsageError, match="not writable"):
            prepare_out_dir(locked)
    finally:
        locked.chmod(0o700)


def _as_nobody() -> list[str] | None:
    """A command prefix that drops root to 'nobody', or None where that is impossible."""
    setpriv = Path("/usr/bin/setpriv")
    if not IS_ROOT or not setpriv.exists():
        return None
    return [str(setpriv), "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture()
def open_folder():
    """A folder under /tmp that 'nobody' can enter (pytest's tmp_path is private to root)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="mha-perm-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(_as_nobody() is None, reason="needs root and setpriv to run the CLI as another user")
def test_unwritable_folder_and_unreadable_file_as_a_real_unprivileged_user(open_folder):
    secret = open_folder / "secret.txt"
    secret.write_text("the cat sat")
    secret.chmod(0o000)
    env = {**os.environ, "HOME": str(open_folder), "MPLCONFIGDIR": str(open_folder)}
    base = _as_nobody() + [str(MHA)]
    p = subprocess.run(base + ["explain", "--file", "secret.txt"], capture_output=True, text=True, env=env,
                       cwd=open_folder)
    if "mha: error:" not in p.stderr:
        pytest.skip(f"'nobody' cannot run the installed mha here: {p.stderr[-200:]}")
    assert p.returncode == 2, p.stderr
    assert p.stderr == "mha: error: --file 'secret.txt' cannot be read (permission denied); " \
                       "check its permissions (e.g. chmod u+r FILE).\n"
    p = subprocess.run(base + ["explain", "the cat", *NO_PLOTS, "--save-npz", "x.npz"],
                       capture_output=True, text=True, env=env, cwd=open_folder)
    assert p.returncode == 2, p.stderr
    assert p.stderr == "mha: error: --save-npz 'x.npz': folder '.' is not writable; choose another place.\n"
    assert sorted(x.name for x in open_folder.iterdir()) == ["secret.txt"]


# ---------------------------------------------------------------------------
# Through the CLI
# ---------------------------------------------------------------------------

def test_files_the_tool_did_not_write_are_never_touched(runner, tmp_path):
    (tmp_path / "notes.txt").write_text("my homework")
    (tmp_path / "trace.npz.bak").write_bytes(b"keep me")
    (tmp_path / ".trace.npz.keep.tmp").write_bytes(b"not ours either")
    before = _listing(tmp_path)
    r = runner.invoke(app, ["explain", "the cat sat", *NO_PLOTS, "--save-npz", "trace.npz"])
    assert r.exit_code == 0, r.output
    after = _listing(tmp_path)
    assert set(after) == set(before) | {"trace.npz"}
    assert all(after[name] == before[name] for name in before)


def test_an_existing_output_is_replaced_only_as_a_whole(runner, tmp_path):
    target = tmp_path / "trace.npz"
    assert runner.invoke(app, ["explain", "the cat sat", *NO_PLOTS, "--save-npz", str(target)]).exit_code == 0
    first = target.read_bytes()
    assert runner.invoke(app, ["explain", "a dog ran far away", *NO_PLOTS, "--save-npz", str(target)]).exit_code == 0
    second = target.read_bytes()
    assert first != second and _temps(tmp_path) == []
    shown = runner.invoke(app, ["show", str(target), *NO_PLOTS])
    assert shown.exit_code == 0 and "dog" in shown.stdout


def test_ctrl_c_while_saving_leaves_the_old_trace_and_exits_130(runner, tmp_path, monkeypatch):
    import numpy as np

    target = tmp_path / "trace.npz"
    assert runner.invoke(app, ["explain", "the cat sat", *NO_PLOTS, "--save-npz", str(target)]).exit_code == 0
    before = _listing(tmp_path)
    real_savez = np.savez

    def interrupted_savez(handle, **arrays):
        real_savez(handle, **dict(list(arrays.items())[:3]))  # some bytes are really written…
        raise KeyboardInterrupt  # …then Ctrl-C

    monkeypatch.setattr(np, "savez", interrupted_savez)
    r = runner.invoke(app, ["explain", "a dog ran", *NO_PLOTS, "--save-npz", str(target)])
    assert r.exit_code == 130
    assert r.stderr.strip() == "mha: error: interrupted; nothing half-written was left behind."
    assert _listing(tmp_path) == before and _temps(tmp_path) == []


def test_disk_full_while_saving_is_one_line_exit_1(runner, tmp_path, monkeypatch):
    import numpy as np

    def full(handle, **arrays):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full)
    r = runner.invoke(app, ["explain", "the cat", *NO_PLOTS, "--save-npz", str(tmp_path / "t.npz")])
    assert r.exit_code == 1
    assert r.stderr.count("\n") == 1 and "No space left on device" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_real_ctrl_c_exits_130_with_one_line(tmp_path):
    """SIGINT to the installed ``mha`` while it waits for standard input."""
    from pause import default_signals  # their default actions, even under nohup or in a shell's background

    p = subprocess.Popen([str(MHA), "explain", "-", *NO_PLOTS], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, preexec_fn=default_signals)
    try:
        # Wait until it is blocked reading the pipe: by then Python's SIGINT handler is installed.
        waiting = ""
        for _ in range(1200):
            try:
                waiting = Path(f"/proc/{p.pid}/wchan").read_text()
            except OSError:
                break
            if "pipe" in waiting or p.poll() is not None:
                break
            time.sleep(0.05)
        if "pipe" not in waiting:
            pytest.skip("cannot see when the process blocks (no /proc/PID/wchan)")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130
    assert err.decode() == "mha: error: interrupted; nothing half-written was left behind.\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_figures_leave_the_rest_of_the_out_folder_alone(runner, tmp_path):
    out = tmp_path / "slides"
    out.mkdir()
    (out / "lecture.pdf").write_bytes(b"%PDF-1.4 my lecture")
    (out / "head-1.png.orig").write_bytes(b"keep")
    (out / "notes").mkdir()
    (out / "notes" / "head-1.png").write_bytes(b"a student's own picture, one folder down")
    before = _listing(out)
    r = runner.invoke(app, ["explain", "the cat sat", "--out", str(out), "--dpi", "40"])
    assert r.exit_code == 0, r.output
    after = _listing(out)
    assert all(after[name] == before[name] for name in before)
    new = set(after) - set(before)
    assert new and all(name.endswith(".png") and "/" not in name for name in new), new
    assert _temps(out) == []


@pytest.mark.parametrize("args", [
    ["explain", "the cat", "--save-npz", "same", "--html", "same"],
    ["explain", "--file", "input.txt", "--save-npz", "input.txt"],
    ["show", "trace.npz", "--html", "./trace.npz"],
])
def test_an_output_never_replaces_another_output_or_the_input(runner, tmp_path, args):
    (tmp_path / "input.txt").write_text("the cat sat")
    assert runner.invoke(app, ["explain", "the cat", *NO_PLOTS, "--save-npz", "trace.npz"]).exit_code == 0
    before = _listing(tmp_path)
    r = runner.invoke(app, [*args, *NO_PLOTS])
    said = "is also the input" if "input.txt" in args or "show" in args else "name the same file"
    assert r.exit_code == 2 and said in r.stderr, r.output
    assert _listing(tmp_path) == before


def _complete_png(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")


def test_ctrl_c_while_figures_are_drawn_leaves_only_whole_files(tmp_path):
    """SIGINT to the whole process group (as a terminal sends it) once the first figure exists."""
    out = tmp_path / "figs"
    words = " ".join(f"w{i}" for i in range(300))
    p = subprocess.Popen([str(MHA), "explain", words, "--max-tokens", "300", "--out", str(out), "--dpi", "60"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path, start_new_session=True)
    try:
        for _ in range(2400):  # wait for drawing to be under way, however slow the machine
            if p.poll() is not None or (out.is_dir() and any(out.iterdir())):
                break
            time.sleep(0.05)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    err_text = err.decode()
    assert p.returncode in (0, 130), err_text
    assert err_text in ("", "mha: error: interrupted; nothing half-written was left behind.\n"), err_text
    assert _temps(out) == [] if out.exists() else True
    assert all(_complete_png(png) for png in out.glob("*.png"))
