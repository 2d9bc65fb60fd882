"""The ready-made texts of ``--sample NAME``, each teaching one thing: a UTF-8 file each in ``sample_texts/``,
described in ``index.json``. Pure Python, no numpy: ``mha samples`` must start fast.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from mhacli.attention.errors import RunError, UsageError
from mhacli.attention.messages import shown

if TYPE_CHECKING:  # pragma: no cover - importlib.abc's copy is deprecated from Python 3.12
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

INDEX = "index.json"


@dataclass(frozen=True)
class Sample:
    """One ready-made text and what it shows."""

    name: str
    description: str
    text: str

    def tokens(self, tokenizer: str = "word") -> list[str]:
        """The sample's tokens under ``tokenizer``."""
        from mhacli.attention.tokenize import tokenize

        return tokenize(self.text, tokenizer)


def sample_dir() -> Traversable:
    """Where the texts are: inside the installed package, else beside it in the source tree."""
    packaged = resources.files("mhacli") / "sample_texts"
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2] / "sample_texts"
    if source.is_dir():
        return source
    raise RunError("the sample texts are missing from this installation of mhacli; reinstall it "
                   "(pip install --force-reinstall mhacli).")


@lru_cache(maxsize=1)
def _index() -> tuple[tuple[str, str, str], ...]:
    """(name, file, description) of every sample, in teaching order."""
    where = sample_dir()
    try:
        entries = json.loads((where / INDEX).read_text(encoding="utf-8"))["samples"]
        return tuple((e["name"], e["file"], e["description"]) for e in entries)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunError(f"the sample index {where / INDEX} cannot be read ({exc}); reinstall mhacli.") from None


def sample_names() -> list[str]:
    """Every sample name, in teaching order."""
    return [name for name, _, _ in _index()]


def load_sample(name: str) -> Sample:
    """The sample called ``name``; an unknown name is a usage error listing the valid ones."""
    from mhacli.attention.checks import chosen

    name = str(chosen(name, sample_names()))  # " Cat" is cat: the one rule for names (core.checks)
    for entry_name, file, description in _index():
        if entry_name == name:
            try:
                text = (sample_dir() / file).read_text(encoding="utf-8")
            except OSError as exc:
                raise RunError(f"sample {name!r} cannot be read ({exc}); reinstall mhacli.") from None
            return Sample(name=name, description=description, text=text.strip())
    raise UsageError(f"unknown sample {shown(name)}; choose one of: {', '.join(sample_names())} "
                     "(see 'mha samples').")


def list_samples() -> list[Sample]:
    """Every sample, loaded, in teaching order."""
    return [load_sample(name) for name in sample_names()]
