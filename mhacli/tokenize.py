"""Split text into tokens: ``word``, ``char`` or ``whitespace``; Unicode-aware.

Pure Python. The text is first cleaned (NFC, control and invisible format
characters dropped) so that nothing from the input can reach a terminal as an
escape sequence or reorder it with bidi controls, then cut into grapheme
clusters so that an emoji with a skin tone, a flag or a letter with a
combining accent stays one unit.
"""

from __future__ import annotations

import unicodedata

from mhacli.errors import UsageError

ZWJ = "\u200d"
ZWNJ = "\u200c"
_KEEP_FORMAT = {ZWJ, ZWNJ}


def _is_tag(ch: str) -> bool:
    return 0xE0020 <= ord(ch) <= 0xE007F


def _is_regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _is_modifier(ch: str) -> bool:
    return 0x1F3FB <= ord(ch) <= 0x1F3FF


def clean(text: str) -> str:
    """NFC-normalise; turn control characters into spaces; drop invisible format characters."""
    out = []
    for ch in unicodedata.normalize("NFC", text):
        cat = unicodedata.category(ch)
        if cat == "Cc" or ch in "\u2028\u2029":
            out.append(" ")
        elif cat == "Cf" and ch not in _KEEP_FORMAT and not _is_tag(ch):
            # Zero-width spaces, BOMs, bidi overrides: invisible, and bidi
            # controls could reorder what the terminal shows.
            continue
        elif cat in ("Cs", "Co", "Cn"):
            out.append("\ufffd")
        else:
            out.append(ch)
    return "".join(out)


def graphemes(text: str) -> list[str]:
    """Cut text into user-perceived characters (a practical subset of UAX #29)."""
    clusters: list[str] = []
    i, n = 0, len(text)
    while i < n:
        start = i
        ch = text[i]
        i += 1
        if _is_regional(ch) and i < n and _is_regional(text[i]):
            i += 1  # a flag is a pair of regional indicators
        while i < n:
            nxt = text[i]
            if unicodedata.category(nxt) in ("Mn", "Mc", "Me") or _is_modifier(nxt) or _is_tag(nxt):
                i += 1
            elif nxt in (ZWJ, ZWNJ):
                i += 1
                if nxt == ZWJ and i < n and not text[i].isspace():
                    i += 1  # ZWJ glues the next character into the same emoji
            else:
                break
        clusters.append(text[start:i])
    return clusters


def _is_wordish(cluster: str) -> bool:
    """Letters and digits (with their marks) make words; Han and kana stand alone."""
    ch = cluster[0]
    return unicodedata.category(ch)[0] in ("L", "N") and not _is_ideographic(ch)


def _is_ideographic(ch: str) -> bool:
    name = unicodedata.name(ch, "")
    return name.startswith(("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH", "HIRAGANA", "KATAKANA"))


def tokenize(text: str, tokenizer: str = "word") -> list[str]:
    """Tokens of ``text`` under ``tokenizer`` (may be empty: the caller decides)."""
    text = clean(text)
    if tokenizer == "whitespace":
        return [t for t in text.split() if t.strip(ZWJ + ZWNJ)]
    clusters = [c for c in graphemes(text) if not c.isspace() and c.strip(ZWJ + ZWNJ)]
    if tokenizer == "char":
        return clusters
    if tokenizer != "word":
        raise UsageError(f"unknown tokenizer {tokenizer!r}; choose one of: word, char, whitespace.")
    tokens: list[str] = []
    word: list[str] = []
    for cluster in graphemes(text):
        if _is_wordish(cluster):
            word.append(cluster)
            continue
        if word:
            tokens.append("".join(word))
            word = []
        if not cluster.isspace() and cluster.strip(ZWJ + ZWNJ):
            tokens.append(cluster)
    if word:
        tokens.append("".join(word))
    return tokens


def label(token: str, max_chars: int = 12) -> str:
    """A token as safe, short text for a table cell or a tick label."""
    shown = "".join(ch if ch.isprintable() or ch in _KEEP_FORMAT else f"\\u{ord(ch):04x}" for ch in token)
    clusters = graphemes(shown)
    if len(clusters) > max_chars:
        return "".join(clusters[: max_chars - 1]) + "…"
    return shown
