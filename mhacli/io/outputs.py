"""Where every output of a run goes, decided once before any work (:func:`plan_outputs`): a usage error for
whatever would lose or clobber data (a trailing slash on a file, a link in --out, an output equal to an input or
to another output by real path).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mhacli.attention.messages import shown_path
from mhacli.attention.errors import UsageError
from mhacli.io.files import _stat, check_target, confine

# The file names the figure renderers write into --out (mhacli.render.figures): keep in step.
PER_HEAD = "head-{k}.{fmt}"
SHEETS = ("heads.{fmt}", "magnifiers.{fmt}", "split.{fmt}")
COMPARE = ("single-vs-multi.{fmt}",)
_EXAMPLE = {"--save-npz": "trace.npz", "--html": "attention.html", "--save": "weights.npz"}


def figure_names(heads: int, fmt: str = "png", *, compare: bool = False, split: bool = True) -> list[str]:
    """The file names one run writes into ``--out``: a heatmap per head, the sheets (or compare's figure); no
    ``split`` for an attention view (``split=False``), which has no weight matrices to split."""
    if compare:
        return [name.format(fmt=fmt) for name in COMPARE]
    sheets = [s.format(fmt=fmt) for s in SHEETS if split or not s.startswith("split.")]
    return [PER_HEAD.format(k=k, fmt=fmt) for k in range(1, heads + 1)] + sheets


@dataclass(frozen=True)
class OutputPlan:
    """Every output of one run, resolved: write exactly these paths."""

    out: Path | None = None
    figures: tuple[Path, ...] = ()
    save_npz: Path | None = None
    html: Path | None = None
    save: Path | None = None


def _as_file_target(what: str, value: object, made: Path | None = None) -> Path | None:
    """A file option as typed: refuse a trailing slash, then :func:`check_target`; ``made`` is an --out the run
    creates first, so a file inside it (``--save figs/model.npz --out figs``) needs no folder yet."""
    if value is None:
        return None
    raw = os.fspath(value)  # type: ignore[call-overload]
    if raw.endswith(("/", os.sep)) or raw in (".", ".."):
        example = _EXAMPLE.get(what, "output")
        folder = raw.rstrip("/" + os.sep) or raw
        raise UsageError(f"{what} {shown_path(raw)} ends with '/', which names a folder; give a file name "
                         f"such as {shown_path(os.path.join(folder, example))}, or drop the '/'.")
    path = Path(raw)
    if _is_link(path):
        target = Path(os.path.realpath(path))
        if not target.exists() and not target.parent.is_dir():
            raise UsageError(f"{what} {shown_path(raw)} is a symbolic link to {shown_path(os.readlink(path))}, "
                             f"whose folder does not exist; remove the link or give another name.")
        check_target(target, what)
    elif made is not None and _key(path.parent if str(path.parent) else Path(".")) == _key(made) \
            and not os.path.lexists(made):
        pass  # --out is created before anything is written; what it must be, plan_outputs checked
    else:
        check_target(path, what)
    return path


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(path.lstat().st_mode)
    except OSError:  # missing, or a name the system refuses: check_target says which
        return False


def _figure_target(out: Path, name: str) -> Path:
    """One figure's path in --out; refuse a link (never followed out of --out), a folder or a device there."""
    path = out / name
    try:
        info = path.lstat()
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise UsageError(f"--out {shown_path(out)}: {shown_path(name)} cannot be used: "
                         f"{exc.strerror or exc}.") from None
    if stat.S_ISLNK(info.st_mode):
        raise UsageError(f"--out {shown_path(out)} holds {shown_path(name)}, a symbolic link (to "
                         f"{shown_path(os.readlink(path))}); mha never writes through a link in --out: "
                         "remove it or choose another --out.")
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise UsageError(f"--out {shown_path(out)} holds {shown_path(name)}, which is {kind}; "
                         "move it away or choose another --out.")
    return path


def _key(path: Path) -> str:
    return os.path.realpath(os.path.abspath(path))


def _refuse_file_over_out(out: Path, files: dict[str, Path | None]) -> None:
    """Refuse a file output named like --out or a folder --out lies in (``--save m.npz --out m.npz`` would make the
    folder m.npz, then fail to write the file after all the work)."""
    out_key = _key(out)
    for what, path in files.items():
        if path is None:
            continue
        key = _key(path)
        if out_key == key:
            raise UsageError(f"{what} {shown_path(path)} and --out name the same path: --out is the folder the "
                             f"figures go into, {what} a file; give {what} or --out another name.")
        if out_key.startswith(key.rstrip(os.sep) + os.sep):
            raise UsageError(f"--out {shown_path(out)} lies inside {shown_path(path)}, which {what} writes as a file; "
                             f"give {what} or --out another name.")


def _check_model_name(path: Path) -> None:
    """``mha train --save`` writes an npz: a name that says otherwise could not be read back by ``--weights``."""
    if path.suffix.lower() != ".npz":
        fixed = path.with_name(path.stem + ".npz") if path.suffix.lower() in (".pt", ".pth", ".safetensors") \
            else path.with_name(path.name + ".npz")
        said = f"its suffix {shown_path(path.suffix)} says another format" if path.suffix else "it has no .npz suffix"
        raise UsageError(f"--save {shown_path(path)}: mha train writes the model as an .npz, and {said}, so "
                         f"--weights could not read it back; name it {shown_path(fixed)}.")


def plan_outputs(*, out: object = None, figure_names: Sequence[str] = (), save_npz: object = None,
                 html: object = None, save: object = None,
                 inputs: Sequence[tuple[str, object]] = ()) -> OutputPlan:
    """Resolve every output of a run once, creating nothing; ``out`` is the figures' folder (used only with
    ``figure_names``); ``inputs`` are the ``(what, path)`` pairs the run reads (``-`` and None skipped)."""
    named: list[tuple[str, Path]] = []
    figures: list[Path] = []
    out_path = Path(os.fspath(out)) if out is not None and figure_names else None  # type: ignore[call-overload]
    if out_path is not None:
        info = _stat(out_path, "--out")
        if info is not None and not stat.S_ISDIR(info.st_mode):
            raise UsageError(f"--out {shown_path(out_path)} is a file, not a folder; choose another --out.")
        for name in figure_names:
            figures.append(_figure_target(out_path, name))
        named += [("--out", p) for p in figures]
    files = {what: _as_file_target(what, value, out_path)
             for what, value in (("--save-npz", save_npz), ("--html", html), ("--save", save))}
    named += [(what, p) for what, p in files.items() if p is not None]
    if out_path is not None:
        _refuse_file_over_out(out_path, files)

    read: dict[str, tuple[str, object]] = {}
    for what, value in inputs:
        if value is None or os.fspath(value) == "-":  # type: ignore[call-overload]
            continue
        read[_key(Path(os.fspath(value)))] = (what, value)  # type: ignore[call-overload]
    seen: dict[str, str] = {}
    for what, path in named:
        key = _key(path)
        if key in read:
            source, value = read[key]
            if what == "--out":
                raise UsageError(f"--out {shown_path(out_path)} would write {shown_path(path)}, which is the input "
                                 f"({source}); mha never writes over its input: choose another --out.")
            raise UsageError(f"{what} {shown_path(path)} is also the input ({source}); mha never writes over its "
                             f"input: give {what} another name.")
        if key in seen:
            first = seen[key]
            if first == what == "--out":  # pragma: no cover - figure names are distinct
                continue
            where = f"{shown_path(path)}, a figure --out writes" if first == "--out" else shown_path(path)
            raise UsageError(f"{first} and {what} name the same file {where}; give {what} another name.")
        seen[key] = what
    if files["--save"] is not None:  # after the collisions: "the same file as a figure" says more
        _check_model_name(files["--save"])
    if out_path is not None:
        confine(out_path)  # also when it is created later: the real path is what atomic_write compares
    return OutputPlan(out=out_path, figures=tuple(figures), save_npz=files["--save-npz"], html=files["--html"],
                      save=files["--save"])
