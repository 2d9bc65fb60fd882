"""Any text works: emoji, marks, right-to-left, CJK, controls, invisibles, huge words.

The tokenizer must never crash, never lose a visible character, and never let
anything from the input act on a terminal (escape sequences, bidi overrides).
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mhacli.cli.app import app
from mhacli.attention.config import TOKENIZERS
from mhacli.attention.tokenize import (
    DOTTED_CIRCLE,
    MAX_MARKS_SHOWN,
    clean,
    graphemes,
    label,
    printable,
    tokenize,
)

# Every code point, surrogates included: sys.argv can carry lone surrogates
# (undecodable bytes), and a pasted text anything at all.
any_text = st.text(alphabet=st.characters(codec=None), max_size=60)
# Text that leans on the hard parts, so examples hit them often.
HARD = ["\u200d", "\u200c", "\u200b", "\u0301", "\u0308", "\U0001F3FD", "\U0001F1EB", "\U0001F1F7",
        "\U0001F3F4", "\U000E0067", "\U000E007F", "\u202e", "\u2066", "\x1b", "\x07", "\x9b", "\r",
        "\ufeff", "\u3164", "\ud800", "\U0001F468", "\u05e9", "\u0627", "\u65e5", "\u3042", "\ufe0f",
        "\u20e3", " ", "a", "1", "[", "]"]
hard_text = st.lists(st.one_of(st.sampled_from(HARD), st.characters(codec=None)), max_size=40).map("".join)

ALLOWED_FORMAT = {"\u200d", "\u200c"}
NO_PLOTS = ["--no-plots"]  # figures have their own tests; these are about text


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Run every CLI test in a fresh folder, so nothing lands in the work tree."""
    monkeypatch.chdir(tmp_path)


def _is_tag(ch: str) -> bool:
    return 0xE0020 <= ord(ch) <= 0xE007F


def _dangerous(ch: str) -> bool:
    """A character that could act on a terminal or reorder what it shows."""
    cat = unicodedata.category(ch)
    if cat in ("Cc", "Cs", "Zl", "Zp"):
        return True
    return cat == "Cf" and ch not in ALLOWED_FORMAT and not _is_tag(ch)


def _visible_clusters(text: str) -> list[str]:
    """What a reader sees of ``text``: non-blank clusters that draw something."""
    return [c for c in graphemes(clean(text))
            if not c.isspace() and any(ch not in ALLOWED_FORMAT and not _is_tag(ch) for ch in c)]


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(any_text, hard_text))
def test_tokenizing_any_text_never_crashes_and_tokens_are_safe(tokenizer, text):
    tokens = tokenize(text, tokenizer)
    for tok in tokens:
        assert tok, "no empty tokens"
        assert not any(ch.isspace() for ch in tok), repr(tok)
        assert not any(_dangerous(ch) for ch in tok), repr(tok)
        assert any(ch not in ALLOWED_FORMAT and not _is_tag(ch) for ch in tok), "token draws something"


@settings(max_examples=150, deadline=None)
@given(text=st.one_of(any_text, hard_text))
def test_no_visible_character_is_lost(text):
    """Word and char tokens, joined, are exactly the visible characters of the cleaned text."""
    visible = "".join(_visible_clusters(text))
    assert "".join(tokenize(text, "char")) == visible
    assert "".join(tokenize(text, "word")) == visible
    assert "".join(tokenize(text, "whitespace")) == "".join(
        t for t in clean(text).split() if any(ch not in ALLOWED_FORMAT and not _is_tag(ch) for ch in t))


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(any_text, hard_text), width=st.integers(1, 30))
def test_label_is_short_and_safe_for_any_string(text, width):
    shown = label(text, width)
    assert not any(_dangerous(ch) for ch in shown), repr(shown)
    assert "\x1b" not in shown and "\x07" not in shown
    assert len(graphemes(shown)) <= max(width, 1)


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(any_text, hard_text))
def test_printable_escapes_everything_that_could_act_on_a_terminal(text):
    out = printable(text)
    assert not any(_dangerous(ch) for ch in out), repr(out)
    # Nothing printable is changed: a text without dangerous characters passes through.
    if not any(_dangerous(ch) or not (ch.isprintable() or ch in ALLOWED_FORMAT or _is_tag(ch)) for ch in text):
        assert out == text


@pytest.mark.parametrize("text,expected", [
    ("👨\u200d👩\u200d👧\u200d👦 family", ["👨\u200d👩\u200d👧\u200d👦", "family"]),  # ZWJ sequence
    ("👍🏽👍🏿", ["👍🏽", "👍🏿"]),  # skin tones stay on their thumb
    ("🇫🇷🇩🇪🇯", ["🇫🇷", "🇩🇪", "🇯"]),  # flags pair up; a lone indicator stands alone
    ("🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F!",
     ["🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F", "!"]),  # Scotland's tag flag
    ("cafe\u0301 naïve", ["café", "naïve"]),  # combining accent composed (NFC)
    ("q\u0307\u0323 x", ["q\u0323\u0307", "x"]),  # no precomposed form: marks stay on their letter
    ("שָׁלוֹם עולם", ["שָׁלוֹם", "עולם"]),  # Hebrew with points
    ("مرحبا بالعالم", ["مرحبا", "بالعالم"]),  # Arabic
    ("我爱你", ["我", "爱", "你"]),  # Chinese without spaces: one token per character
    ("東京タワーへ行く", ["東", "京", "タ", "ワ", "ー", "へ", "行", "く"]),  # Japanese
    ("ภาษาไทย ดี", ["ภาษาไทย", "ดี"]),  # Thai has no spaces between words: runs stay together
    ("a\u200bb", ["a", "b"]),  # a zero-width space separates words
    ("in\u00advisible wo\u2060rd", ["invisible", "word"]),  # soft hyphen and word joiner go
    ("x\u202eevil\u202c y", ["xevil", "y"]),  # bidi override removed, cannot reorder the line
    ("bell\x07 esc\x1b[31m red", ["bell", "esc", "[", "31m", "red"]),  # controls become spaces
    ("\u3164 \u2800 hi", ["hi"]),  # blank fillers draw nothing
    ("1\ufe0f\u20e3 go", ["1\ufe0f\u20e3", "go"]),  # keycap emoji
])
def test_hard_texts_tokenize_as_a_reader_would(text, expected):
    assert tokenize(text, "word") == expected


@pytest.mark.parametrize("text", ["", "   ", "\u200b\u200b", "\x00\x01\x1b", "\ufeff\u202e", "\u200d", "\U000E0067"])
def test_texts_that_draw_nothing_have_no_tokens(text):
    for tokenizer in TOKENIZERS:
        assert tokenize(text, tokenizer) == []


def test_lone_surrogates_from_undecodable_arguments_become_replacement_characters():
    assert tokenize("ab\udcff cd", "word") == ["ab", "\ufffd", "cd"]


def test_label_shows_lone_marks_on_a_dotted_circle_and_caps_stacked_marks():
    assert label("\u0301") == DOTTED_CIRCLE + "\u0301"
    zalgo = "a" + "\u0300\u0301\u0302\u0303\u0304\u0305\u0306"
    assert label(zalgo) == "a" + zalgo[1:1 + MAX_MARKS_SHOWN]


def test_a_very_long_word_is_one_token_with_a_short_label():
    word = "Donaudampfschifffahrtsgesellschaftskapitän" * 50
    assert tokenize(word) == [word]
    assert label(word, 12).endswith("…") and len(graphemes(label(word, 12))) == 12


def test_label_spells_out_controls_in_strings_that_were_never_cleaned():
    # Tokens from a tampered .npz and file names are not cleaned by the tokenizer.
    assert label("a\x1b[31mb", 40) == "a\\x1b[31mb"
    assert printable("\u202eabc") == "\\u202eabc"


# ---------------------------------------------------------------------------
# Through the CLI: nothing from the input reaches the terminal as a control
# ---------------------------------------------------------------------------

ESCAPES = "say \x1b[5;35mblink\x1b[0m and \x1b]0;pwned title\x07 then \x9b31m done \x1bc"


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" and ch not in "\n" for ch in text)


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_escape_sequences_in_the_text_never_reach_the_output(runner, tokenizer):
    r = runner.invoke(app, ["explain", *NO_PLOTS, ESCAPES, "--tokenizer", tokenizer, "--show-values", "-d", "8"])
    assert r.exit_code == 0, r.output
    assert not _has_control(r.stdout), [ch for ch in r.stdout if unicodedata.category(ch) == "Cc"][:5]
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr


def test_escape_sequences_in_json_are_json_escapes_not_raw_bytes(runner):
    r = runner.invoke(app, ["explain", *NO_PLOTS, ESCAPES, "--json"])
    assert r.exit_code == 0
    assert not _has_control(r.stdout.rstrip("\n"))


def test_escape_sequences_in_an_error_are_spelled_out(runner, tmp_path, monkeypatch):
    # A relative name: the message shortens long paths, and how long tmp_path is depends on the
    # runner (pytest-xdist adds a folder per worker), which once cut the escapes off.
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["explain", *NO_PLOTS, "--file", "a\x1b[31mb\x07.txt"])
    assert r.exit_code == 2
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr
    assert "\\x1b[31mb\\x07" in r.stderr
    r = runner.invoke(app, ["\x1b]0;title\x07"])
    assert r.exit_code == 2 and "\x1b" not in r.stderr and "\\x1b" in r.stderr


def test_escape_sequences_in_a_file_name_written_are_spelled_out(runner, tmp_path):
    target = tmp_path / "x\x1b[31m.npz"
    r = runner.invoke(app, ["explain", *NO_PLOTS, "the cat", "--save-npz", str(target)])
    assert r.exit_code == 0, r.output
    assert target.exists()
    assert "\x1b" not in r.stdout, "the 'Wrote:' list must not replay an escape from a file name"


def test_rich_markup_in_the_text_is_shown_literally(runner):
    r = runner.invoke(app, ["explain", *NO_PLOTS, "[bold]x[/bold] [red]y", "--tokenizer", "whitespace"])
    assert r.exit_code == 0, r.output
    assert "[bold]x[/bold]" in r.stdout and "[red]y" in r.stdout


def test_rich_markup_in_a_file_name_is_shown_literally(runner, tmp_path):
    target = tmp_path / "[red]trace[bold].npz"
    r = runner.invoke(app, ["explain", *NO_PLOTS, "the cat", "--save-npz", str(target)])
    assert r.exit_code == 0 and "[red]trace[bold].npz" in r.stdout


@pytest.mark.parametrize("text", [
    "👨‍👩‍👧‍👦 👍🏽 🇫🇷 🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F",
    "שלום עולם مرحبا",
    "我爱你 東京タワー",
    "Z̷̧̛̝̞̟a̴l̶g̵o̸ text",
    "x" * 5000,
    "\u0301\u0302 \u200b\u200d a",
])
def test_hard_texts_run_end_to_end(runner, text):
    r = runner.invoke(app, ["explain", *NO_PLOTS, text, "--show-values", "-d", "8", "-H", "2"])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output


def test_escape_sequences_in_a_trace_file_name_or_its_tokens_never_reach_the_output(runner, tmp_path):
    import numpy as np

    target = tmp_path / "e\x1b[31m.npz"
    assert runner.invoke(app, ["explain", *NO_PLOTS, "the cat", "--save-npz", str(target)]).exit_code == 0
    for command in (["show", str(target), *NO_PLOTS], ["verify", str(target)]):
        r = runner.invoke(app, command)
        assert r.exit_code == 0, r.output
        assert not _has_control(r.stdout), command
    arrays = dict(np.load(target))
    arrays["tokens"] = np.array(["\x1b]0;pwned\x07", "\x1b[5mcat"], dtype=np.str_)  # a tampered file
    tampered = tmp_path / "tampered.npz"
    np.savez(tampered, **arrays)
    r = runner.invoke(app, ["show", str(tampered), *NO_PLOTS, "--show-values"])
    assert r.exit_code == 0, r.output
    assert not _has_control(r.stdout) and "\\x1b" in r.stdout


# Extended grapheme clusters (UAX #29) for scripts where a cluster is more than a letter and its marks;
# the expected cuts are the `regex` package's \X on the same strings (Unicode 16), written out.
@pytest.mark.parametrize("text,clusters", [
    ("नमस्ते", ["न", "म", "स्ते"]),  # virama + consonant: one conjunct (GB9c)
    ("क्षत्रिय", ["क्ष", "त्रि", "य"]),
    ("स्त्री", ["स्त्री"]),
    ("कि", ["कि"]),  # a vowel sign (Mc) stays with its consonant
    ("กำลัง", ["กำ", "ลั", "ง"]),  # Thai SARA AM is a spacing mark though its category is Lo
    ("น้ำ", ["น้ำ"]),
    ("ภาษาไทย", ["ภ", "า", "ษ", "า", "ไ", "ท", "ย"]),  # Thai leading vowels are not prepended
    ("\u1100\u1161\u11a8", ["\u1100\u1161\u11a8"]),  # conjoining jamo make one syllable
    ("ক্ষমা", ["ক্ষ", "মা"]),
    ("த்த", ["த்", "த"]),  # Tamil's virama does not link (no InCB=Linker)
])
def test_char_tokens_are_extended_grapheme_clusters(text, clusters):
    assert graphemes(text) == clusters
    assert tokenize(text, "char") == [unicodedata.normalize("NFC", c) for c in clusters]  # tokenize cleans to NFC


@pytest.mark.parametrize("text,tokens", [
    ("The animal didn't cross", ["The", "animal", "didn't", "cross"]),
    ("the cat's bowl", ["the", "cat's", "bowl"]),
    ("l’eau and O'Brien", ["l’eau", "and", "O'Brien"]),
    ("the dogs' bowl", ["the", "dogs", "'", "bowl"]),  # at a word's edge the apostrophe stands alone
    ("'quoted'", ["'", "quoted", "'"]),
])
def test_contractions_and_possessives_stay_one_readable_token(text, tokens):
    assert tokenize(text) == tokens


def test_the_readme_sentence_has_no_token_t(runner):
    result = runner.invoke(app, ["explain", "The animal didn't cross the street because it was too tired",
                                 "--json", *NO_PLOTS])
    import json

    assert result.exit_code == 0, result.output
    tokens = json.loads(result.output)["tokens"]
    assert "didn't" in tokens and "t" not in tokens and "'" not in tokens
