"""One bounded reader for every archive: zip bombs are refused from what the zip declares, before inflating.

Each reader (a trace, an attention file, weights, a trained model) is given the
same bombs; each must answer with one line of its own, exit 2 on the command
line, and never allocate what the bomb promises.  The bombs are small files:
their sizes are declared, not written, so the tests take milliseconds.
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mhacli.attention.errors import UsageError

GIB = 2**30


def _npy(value: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, value)
    return buf.getvalue()


def declaring_bomb(path: Path, arrays: dict[str, np.ndarray], member: str | None, declared: int) -> Path:
    """An npz whose ``member`` (every member: None) declares ``declared`` bytes unpacked (directory and header)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, value in arrays.items():
            archive.writestr(name + ".npy", _npy(value))
    data = bytearray(path.read_bytes())
    name = (str(member) + ".npy").encode()
    for signature, size_at in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):
        at = 0
        while (at := data.find(signature, at)) != -1:
            name_at = at + (46 if signature == b"PK\x01\x02" else 30)
            if member is None or data[name_at : name_at + len(name)] == name:
                data[at + size_at : at + size_at + 4] = struct.pack("<I", declared)
            at += 4
    path.write_bytes(bytes(data))
    return path


def header_bomb(path: Path, arrays: dict[str, np.ndarray], member: str, shape: tuple[int, ...]) -> Path:
    """An npz whose ``member`` is an .npy header promising ``shape`` float64 with a few bytes of data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, value in arrays.items():
            archive.writestr(name + ".npy", header.getvalue() + b"\0" * 64 if name == member else _npy(value))
    return path


def _trace_arrays() -> dict[str, np.ndarray]:
    from traced import run
    from mhacli.io.export import npz_arrays

    return npz_arrays(run("the cat sat"))


def _attention_arrays() -> dict[str, np.ndarray]:
    return {"weights": np.full((1, 2, 3, 3), 1 / 3), "tokens": np.array(["a", "b", "c"])}


def _weights_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"in_proj_weight": rng.normal(size=(24, 8)), "out_proj.weight": rng.normal(size=(8, 8))}


def _trained_arrays() -> dict[str, np.ndarray]:
    from mhacli.models.weights import shipped_model_path

    with np.load(shipped_model_path()) as npz:
        return {k: npz[k] for k in npz.files}


def _read(kind: str, path: Path) -> object:
    if kind == "trace":
        from mhacli.io.export import load_trace

        return load_trace(path)
    if kind == "attention":
        from mhacli.models.attention_file import load_attention

        return load_attention(path)
    if kind == "weights":
        from mhacli.models.weights import load_weights

        return load_weights(path, heads=2)
    from mhacli.models.trained import load_trained

    return load_trained(path)


READERS = {"trace": (_trace_arrays, "X"), "attention": (_attention_arrays, "weights"),
           "weights": (_weights_arrays, "in_proj_weight"), "trained": (_trained_arrays, "embedding")}


@pytest.mark.parametrize("kind", READERS)
def test_a_member_declaring_gibibytes_is_refused_before_inflating(tmp_path, kind):
    """3.5 GiB declared by each member of a small file: refused from the zip's directory, for every reader alike
    (at least 7 GiB in all: more than each reader's cap, and more than the test machine can spare for a trace)."""
    arrays, _ = READERS[kind]
    bomb = declaring_bomb(tmp_path / "bomb.npz", arrays(), None, int(3.5 * GIB))
    assert bomb.stat().st_size < 100_000
    with pytest.raises(UsageError, match=r"would unpack to \d+(\.\d)? GiB .*(zip bomb|can spare now)"):
        _read(kind, bomb)


@pytest.mark.parametrize("kind", READERS)
def test_a_header_promising_gibibytes_is_refused_before_reading(tmp_path, kind):
    """An .npy header promising 2 GiB in a member the zip declares small: never allocated."""
    arrays, member = READERS[kind]
    bomb = header_bomb(tmp_path / "bomb.npz", arrays(), member, (2**28,))
    with pytest.raises(UsageError, match=f"'{member}' is cut short"):
        _read(kind, bomb)


def test_the_honest_file_of_each_bomb_is_read(tmp_path):
    """The bombs above are the honest files with one member changed: the honest ones load."""
    for kind, (arrays, _) in READERS.items():
        np.savez(tmp_path / f"{kind}.npz", **arrays())
        assert _read(kind, tmp_path / f"{kind}.npz") is not None


def test_a_member_inflating_beyond_what_it_declares_is_cut_at_the_declaration(tmp_path):
    """zipfile stops a member at its declared size, so data beyond it is never expanded (then the CRC fails)."""
    arrays = _attention_arrays()
    arrays["weights"] = np.full((1, 2, 64, 64), 1 / 64)
    arrays["tokens"] = np.array([f"t{i}" for i in range(64)])
    bomb = declaring_bomb(tmp_path / "bomb.npz", arrays, "weights", 200)
    from mhacli.models.attention_file import load_attention

    with pytest.raises(UsageError, match="cut short|truncated or damaged"):
        load_attention(bomb)


def test_too_many_members_are_refused_from_the_directory(tmp_path):
    with zipfile.ZipFile(tmp_path / "many.npz", "w") as archive:
        for i in range(5000):
            archive.writestr(f"m{i}.npy", b"")
    from mhacli.models.weights import load_weights

    with pytest.raises(UsageError, match="5,000 members"):
        load_weights(tmp_path / "many.npz", heads=2)


def test_a_zip_bomb_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    declaring_bomb(tmp_path / "attention.npz", _attention_arrays(), None, int(3.5 * GIB))
    declaring_bomb(tmp_path / "weights.npz", _weights_arrays(), None, int(3.5 * GIB))
    for argv in (["show", str(tmp_path / "attention.npz"), "--no-plots"],
                 ["explain", "a b", "--weights", str(tmp_path / "weights.npz"), "--heads", "2", "--no-plots"]):
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2, r.output
        assert "zip bomb" in r.output and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.torch
def test_a_pt_zip_is_checked_from_its_declared_sizes_before_torch_reads_it(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is optional")
    torch.save({k: torch.from_numpy(v) for k, v in _weights_arrays().items()}, tmp_path / "w.pt")
    declaring = bytearray((tmp_path / "w.pt").read_bytes())
    pos = 0  # every central-directory entry declares 3.5 GiB: the whole archive is a bomb
    while (pos := declaring.find(b"PK\x01\x02", pos)) != -1:
        declaring[pos + 24 : pos + 28] = struct.pack("<I", int(3.5 * GIB))
        pos += 4
    (tmp_path / "bomb.pt").write_bytes(bytes(declaring))
    from mhacli.models.weights import load_weights

    with pytest.raises(UsageError, match="zip bomb"):
        load_weights(tmp_path / "bomb.pt", heads=2)


@pytest.mark.parametrize("reader", ["trace", "attention", "weights", "trained"])
def test_one_regular_file_check_for_every_reader(tmp_path, reader):
    """A device, a folder and a missing name get the same three answers from every reader."""
    for target, words in (("/dev/zero", "not a regular file"), (str(tmp_path), "is a folder"),
                          (str(tmp_path / "missing.npz"), "does not exist")):
        with pytest.raises(UsageError, match=words):
            _read(reader, Path(target))


def test_no_module_but_the_archive_reader_opens_an_archive():
    """One bounded reader: np.load, zipfile.ZipFile and torch.load appear in io/archive.py (and torch.load in
    models/weights.py, after archive.check_zip_archive) only, so a new reader cannot skip the checks."""
    import ast

    package = Path(__file__).resolve().parents[1] / "mhacli"
    allowed = {("np", "load"): {"io/archive.py"}, ("zipfile", "ZipFile"): {"io/archive.py"},
               ("torch", "load"): {"models/weights.py"}}
    found = []
    for path in package.rglob("*.py"):
        where = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                key = (node.value.id, node.attr)
                if key in allowed and where not in allowed[key]:
                    found.append(f"{where}:{node.lineno} {'.'.join(key)}")
    assert not found, found
