"""Tokens as a reader reads them: a tokenizer's markers turned back into the text they stand for.

GPT-2 writes a space as ``Ġ`` and a line break as ``Ċ``, SentencePiece a space as ``▁``, WordPiece a word's
continuation as ``##``, some BPEs a word's end as ``</w>``. :func:`readable` cleans them, as BertViz does;
:func:`mhacli.measures.view.from_attention` applies it unless asked for the raw tokens.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

# What a token made only of white space is drawn as: a blank label would show nothing.
SHOWN_SPACE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "↵"}
CONTINUES = "-"  # a WordPiece piece that continues a word (``##ing``) is drawn as ``-ing``


@lru_cache(maxsize=1)
def _byte_of() -> dict[str, int]:
    """GPT-2's byte-level alphabet inverted: each of its 256 characters -> the byte it stands for.

    Printable bytes stand for themselves; the 68 others (space, controls, 127-160, 173) were moved to
    U+0100 onwards in byte order, so a space is ``Ġ`` (U+0120) and a line break ``Ċ`` (U+010A).
    """
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]
    table = {chr(b): b for b in kept}
    table.update({chr(256 + i): b for i, b in enumerate(moved)})
    return table


def _byte_level(tokens: Sequence[str]) -> bool:
    """Tokens of a byte-level BPE (GPT-2, RoBERTa): one holds a moved character, and every character is one of its
    256 (a text's own ``Ġ`` beside letters no byte-level vocabulary has leaves the tokens as they are)."""
    table = _byte_of()
    moved = any(ord(ch) >= 256 for t in tokens for ch in t if ch in table)
    return moved and all(ch in table for t in tokens for ch in t)


def _decoded(token: str) -> str:
    """A byte-level token's text; a piece of a character cut between tokens stays as it was given."""
    table = _byte_of()
    try:
        return bytes(table[ch] for ch in token).decode("utf-8")
    except UnicodeDecodeError:
        return token


def _shown(text: str) -> str:
    """Spaces around a word dropped (a label's edges show none); a token of white space alone made visible."""
    if text.strip():
        return text.strip()
    return "".join(SHOWN_SPACE.get(ch, ch) for ch in text) if text else text


def readable(tokens: Sequence[str]) -> tuple[str, ...]:
    """``tokens`` with their tokenizer's markers read: ``Ġcat`` -> ``cat``, ``Ċ`` -> ``↵``, ``▁the`` -> ``the``,
    ``##ing`` -> ``-ing``, ``cat</w>`` -> ``cat``; tokens without markers are kept as they are."""
    out = [_decoded(t) for t in tokens] if _byte_level(tokens) else list(tokens)
    if any("▁" in t for t in out):  # SentencePiece: U+2581 is its space
        out = [t.replace("▁", " ") for t in out]
    out = [CONTINUES + t[2:] if t.startswith("##") and len(t) > 2 else t for t in out]
    out = [t[: -len("</w>")] if t.endswith("</w>") and len(t) > len("</w>") else t for t in out]
    return tuple(_shown(t) for t in out)
