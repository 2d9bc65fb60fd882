"""Hard inputs, round two (issue 14): one test per family, several variants each.

Every test runs the installed ``mha`` (or the io functions under it) on an
input an attacker or an unlucky user would give, and checks the one-line
answer, the exit code, and that nothing was left behind or clobbered.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

MHA = Path(sys.executable).with_name("mha")
ENV = {**os.environ, "MPLBACKEND": "Agg", "COLUMNS": "100", "PYTHONWARNINGS": "default"}


def mha(*args: str, cwd: Path, env: dict[str, str] | None = None, stdin: object = subprocess.DEVNULL,
        timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MHA), *args], cwd=cwd, env=env or ENV, capture_output=True, text=True,
                          stdin=stdin, timeout=timeout, **kw)  # type: ignore[call-overload]


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

LONG_TEXT = " ".join(f"w{i % 500}" for i in range(2500))


def _wait_for_temporary(proc: subprocess.Popen[str], folder: Path) -> None:
    """Poll until the run is writing its temporary file (the moment a signal hurts most)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if temporaries(folder) or proc.poll() is not None:
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the run never started writing")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_signal_during_save_npz_leaves_no_temporary_file(tmp_path, sig, code):
    (tmp_path / "long.txt").write_text(LONG_TEXT)
    proc = subprocess.Popen([str(MHA), "explain", "--file", "long.txt", "--no-plots", "--save-npz", "big.npz"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_temporary(proc, tmp_path)
    assert proc.poll() is None, "the run finished before the signal; make the text longer"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert err.strip().startswith("mha: error: ") and len(err.strip().splitlines()) == 1, err
    assert "nothing half-written" in err
    assert temporaries(tmp_path) == [] and not (tmp_path / "big.npz").exists()


def test_a_signal_keeps_the_previous_file_whole(tmp_path):
    (tmp_path / "long.txt").write_text(LONG_TEXT)
    (tmp_path / "big.npz").write_bytes(b"the old file")
    proc = subprocess.Popen([str(MHA), "explain", "--file", "long.txt", "--no-plots", "--save-npz", "big.npz"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_temporary(proc, tmp_path)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143
    assert (tmp_path / "big.npz").read_bytes() == b"the old file"
    assert temporaries(tmp_path) == []


def test_cleanup_removes_registered_files_and_folders_only_of_this_process(tmp_path):
    from mhacli.io import cleanup

    a_file, a_folder = tmp_path / "x.tmp", tmp_path / "scratch"
    a_file.write_text("x")
    a_folder.mkdir()
    (a_folder / "inside").write_text("y")
    cleanup.register(a_file)
    cleanup.register(a_folder, folder=True)
    foreign = tmp_path / "foreign.tmp"
    foreign.write_text("z")
    cleanup._registered[(os.getpid() + 1, str(foreign))] = False  # a parent's or a child's: not ours
    cleanup.remove_all()
    assert not a_file.exists() and not a_folder.exists() and foreign.exists()
    cleanup._registered.clear()


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
