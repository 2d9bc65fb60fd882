"""Split text into tokens: ``word``, ``char`` or ``whitespace``; Unicode-aware, pure Python.

``word`` tokens are runs of letters and digits; other visible characters stand alone, except an apostrophe
between two letters (``didn't``, ``O'Brien`` stay one token). The text is cleaned first (NFC, controls and
invisible format characters dropped), so nothing in it can act on a terminal, then cut into grapheme
clusters, so an emoji with a skin tone or a letter with a combining accent stays one unit. Another model's tokens
are read back as text (:func:`readable`: GPT-2's ``Ġ``, SentencePiece's ``▁``, WordPiece's ``##``, BPE's ``</w>``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from mhacli.attention.errors import UsageError
from mhacli.attention.messages import escaped

ZWJ = "\u200d"
ZWNJ = "\u200c"
_KEEP_FORMAT = {ZWJ, ZWNJ}
DOTTED_CIRCLE = "\u25cc"  # shows where a mark with nothing to sit on would go
MAX_MARKS_SHOWN = 3  # combining marks drawn per character in a label ("Zalgo" text stays in its cell)

# Letters and symbols that draw nothing: fillers used to make "invisible" names.
# They separate words like spaces; as tokens they would be blank cells.
_BLANK = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\u180e"}
# An apostrophe between two letters joins them into one word token (didn't, cat's, O'Brien):
# the ASCII one and the typographic one (U+2019).  U+02BC is a letter already.
APOSTROPHES = {"'", "\u2019"}
# Zero-width space marks a word break (Thai, Khmer, web text): a separator, not a letter.
_ZERO_WIDTH_BREAKS = {"\u200b"}


def _is_tag(ch: str) -> bool:
    return 0xE0020 <= ord(ch) <= 0xE007F


def _is_regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _is_modifier(ch: str) -> bool:
    return 0x1F3FB <= ord(ch) <= 0x1F3FF


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch) in ("Mn", "Mc", "Me")


def clean(text: str) -> str:
    """NFC-normalise; control characters and blank fillers become spaces; invisible format characters go.

    After this no character can act on a terminal: controls become spaces, bidi overrides and isolates are gone,
    unpaired surrogates and private-use code points become U+FFFD.
    """
    out = []
    for ch in unicodedata.normalize("NFC", text):
        cat = unicodedata.category(ch)
        if cat == "Cc" or ch in "\u2028\u2029" or ch in _BLANK or ch in _ZERO_WIDTH_BREAKS:
            out.append(" ")
        elif cat == "Cf" and ch not in _KEEP_FORMAT and not _is_tag(ch):
            # BOMs, soft hyphens, word joiners, bidi overrides: invisible, and
            # bidi controls could reorder what the terminal shows.
            continue
        elif cat in ("Cs", "Co", "Cn"):
            out.append("\ufffd")
        else:
            out.append(ch)
    return "".join(out)


# Letters that attach to the letter before them like a mark (Grapheme_Cluster_Break=SpacingMark
# although their category is Lo): Thai SARA AM and Lao AM.
_SPACING_LETTERS = {"\u0e33", "\u0eb3"}
# Viramas that link two consonants into one conjunct (Indic_Conjunct_Break=Linker, UAX #29 GB9c):
# Devanagari, Bengali, Gujarati, Oriya, Telugu, Malayalam.
_LINKERS = {"\u094d", "\u09cd", "\u0acd", "\u0b4d", "\u0c4d", "\u0d4d"}
_LINKER_BLOCKS = ((0x0900, 0x097F), (0x0980, 0x09FF), (0x0A80, 0x0AFF), (0x0B00, 0x0B7F), (0x0C00, 0x0C7F),
                  (0x0D00, 0x0D7F))
# Independent vowels and other letters of those scripts that are not consonants, by the word after LETTER.
_NOT_CONSONANT = re.compile(r"(?:VOCALIC|SHORT|CANDRA|A|AA|I|II|U|UU|E|EE|AI|O|OO|AU|OE|OOE|AW|UE|UUE|"
                            r"KHANDA TA|VEDIC ANUSVARA|NAKAARA POLLU|DOT REPH|ARCHAIC)\b|CHILLU")


def _is_consonant(ch: str) -> bool:
    """A consonant of a script whose virama makes conjuncts (Indic_Conjunct_Break=Consonant, approximately)."""
    cp = ord(ch)
    if not any(lo <= cp <= hi for lo, hi in _LINKER_BLOCKS) or unicodedata.category(ch) != "Lo":
        return False
    name = unicodedata.name(ch, "")
    _, _, letter = name.partition(" LETTER ")
    return bool(letter) and not _NOT_CONSONANT.match(letter)


def _jamo(ch: str) -> str:
    """The Hangul syllable part of ``ch``: L, V, T, LV, LVT, or '' (UAX #29's Hangul_Syllable_Type)."""
    cp = ord(ch)
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97C:
        return "L"
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return "V"
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return "T"
    if 0xAC00 <= cp <= 0xD7A3:
        return "LV" if (cp - 0xAC00) % 28 == 0 else "LVT"
    return ""


_JAMO_NEXT = {"L": {"L", "V", "LV", "LVT"}, "V": {"V", "T"}, "LV": {"V", "T"}, "T": {"T"}, "LVT": {"T"}}


def graphemes(text: str) -> list[str]:
    """Cut text into user-perceived characters: UAX #29's extended grapheme clusters, in pure Python.

    Covers marks, emoji sequences, Hangul jamo and Indic conjuncts (GB9c), so ``--tokenizer char`` splits
    Devanagari and Thai where a reader would; tested against the ``regex`` package's ``\\X``.
    """
    clusters: list[str] = []
    i, n = 0, len(text)
    while i < n:
        start = i
        ch = text[i]
        i += 1
        if ch.isspace():
            # White space never carries marks or joiners: they start their own cluster.
            clusters.append(ch)
            continue
        if _is_regional(ch) and i < n and _is_regional(text[i]):
            i += 1  # a flag is a pair of regional indicators
        jamo = _jamo(ch)
        while jamo and i < n and _jamo(text[i]) in _JAMO_NEXT[jamo]:
            jamo = _jamo(text[i])  # conjoining jamo make one Hangul syllable (UAX #29 GB6-GB8)
            i += 1
        conjunct = _is_consonant(ch)  # the cluster starts with a consonant that a virama can link
        linked = False  # ... and a virama has come since its last consonant
        while i < n:
            nxt = text[i]
            if unicodedata.category(nxt) in ("Mn", "Mc", "Me") or nxt in _SPACING_LETTERS or _is_modifier(nxt) \
                    or _is_tag(nxt):
                # A spacing mark (a vowel sign such as ि) ends the chain a virama could link through.
                spacing = unicodedata.category(nxt) == "Mc" or nxt in _SPACING_LETTERS
                conjunct = conjunct and not spacing
                linked = conjunct and (linked or nxt in _LINKERS)
                i += 1
            elif linked and _is_consonant(nxt):
                linked = False  # virama + consonant: one conjunct, one cluster (UAX #29 GB9c)
                i += 1
            elif nxt in (ZWJ, ZWNJ):
                i += 1
                if nxt == ZWJ and i < n and not text[i].isspace():
                    i += 1  # ZWJ glues the next character into the same emoji
            else:
                break
        clusters.append(text[start:i])
    return clusters


def _is_letter(cluster: str) -> bool:
    return unicodedata.category(cluster[0])[0] == "L" and not _is_ideographic(cluster[0])


def _is_wordish(cluster: str) -> bool:
    """Letters and digits (with their marks) make words; Han and kana stand alone."""
    ch = cluster[0]
    return unicodedata.category(ch)[0] in ("L", "N") and not _is_ideographic(ch)


def _is_ideographic(ch: str) -> bool:
    name = unicodedata.name(ch, "")
    return name.startswith(("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH", "HIRAGANA", "KATAKANA"))


def _visible(piece: str) -> bool:
    """False for a piece that draws nothing: only joiners and tag characters."""
    return any(ch not in _KEEP_FORMAT and not _is_tag(ch) and not ch.isspace() for ch in piece)


def tokenize(text: str, tokenizer: str = "word") -> list[str]:
    """Tokens of ``text`` under ``tokenizer`` (may be empty: the caller decides)."""
    text = clean(text)
    if tokenizer == "whitespace":
        return [t for t in text.split() if _visible(t)]
    clusters = [c for c in graphemes(text) if not c.isspace() and _visible(c)]
    if tokenizer == "char":
        return clusters
    if tokenizer != "word":
        raise UsageError(f"unknown tokenizer {tokenizer!r}; choose one of: word, char, whitespace.")
    tokens: list[str] = []
    word: list[str] = []
    clusters = graphemes(text)
    for i, cluster in enumerate(clusters):
        if _is_wordish(cluster) or (cluster in APOSTROPHES and word and i + 1 < len(clusters)
                                    and _is_letter(clusters[i + 1])):
            # An apostrophe between letters stays inside the word: didn't, cat's, O'Brien, l'eau.
            word.append(cluster)
            continue
        if word:
            tokens.append("".join(word))
            word = []
        if not cluster.isspace() and _visible(cluster):
            tokens.append(cluster)
    if word:
        tokens.append("".join(word))
    return tokens


def printable(text: str) -> str:
    """``text`` with everything that could act on a terminal written as an escape (``\\x1b``).

    For any string shown to a person: controls, bidi controls, surrogates and other invisible code points are
    spelled out; joiners and tag characters stay (they belong to emoji).
    """
    return "".join(ch if ch.isprintable() or ch in _KEEP_FORMAT or _is_tag(ch) else escaped(ch) for ch in text)


def _tame(cluster: str) -> str:
    """One cluster as drawn in a label: a lone mark gets a dotted circle; marks are capped."""
    if _is_mark(cluster[0]):
        cluster = DOTTED_CIRCLE + cluster
    base, marks = cluster[0], [ch for ch in cluster[1:] if _is_mark(ch)]
    if len(marks) <= MAX_MARKS_SHOWN:
        return cluster
    rest = [ch for ch in cluster[1:] if not _is_mark(ch)]
    return base + "".join(marks[:MAX_MARKS_SHOWN]) + "".join(rest)


def label(token: str, max_chars: int = 12) -> str:
    """A token as safe, short text for a table cell or a tick label.

    Never contains a control character or an escape sequence; at most
    ``max_chars`` user-perceived characters (the last one an ellipsis when cut).
    """
    clusters = [_tame(c) for c in graphemes(printable(token))]
    if len(clusters) > max_chars:
        return "".join(clusters[: max(max_chars - 1, 0)]) + "…"
    return "".join(clusters)


def labels(tokens: Sequence[str], max_chars: int = 12) -> list[str]:
    """:func:`label` of every token, in order (a grid's row and column labels in one call)."""
    return [label(t, max_chars) for t in tokens]


# --- another tokenizer's tokens as the text they stand for (BertViz reads them so) ---------------------------

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
