"""The ready-made texts: chosen to teach, listed quickly, found in a wheel as in the source tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
import zipfile
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from mhacli.attention.errors import UsageError
from mhacli.io.samples import Sample, list_samples, load_sample, sample_dir, sample_names
from mhacli.attention.tokenize import tokenize

ROOT = Path(__file__).resolve().parent.parent


def _render(*renderables: object, width: int = 80) -> str:
    console = Console(file=StringIO(), width=width, color_system=None)
    for r in renderables:
        console.print(r)
    return console.file.getvalue()


def test_at_least_eight_samples_each_with_text_and_one_line_description():
    samples = list_samples()
    assert len(samples) >= 8
    assert len({s.name for s in samples}) == len(samples)
    for s in samples:
        assert isinstance(s, Sample)
        assert s.text.strip() and tokenize(s.text), s.name
        assert s.description and "\n" not in s.description and len(s.description) <= 100, s.name
        assert s.name == s.name.lower() and " " not in s.name


def test_the_samples_cover_what_the_lesson_needs():
    by_name = {s.name: s for s in list_samples()}
    counts = {name: len(s.tokens()) for name, s in by_name.items()}
    # a paragraph of about 60 tokens
    assert any(50 <= n <= 70 for n in counts.values())
    # another language in another script (not Latin letters)
    def scripts(text: str) -> set[str]:
        return {unicodedata.name(ch).split()[0] for ch in text if ch.isalpha()}
    assert any(scripts(s.text) - {"LATIN"} for s in by_name.values())
    # repeated words, a line of code, a far pronoun, word order, a list, a poem
    assert any(len(set(s.tokens())) < len(s.tokens()) / 2 for s in by_name.values())
    assert "(" in by_name["code"].text and "=" in by_name["code"].text
    pron = by_name["pronoun"].tokens()
    assert pron.index("she") - pron.index("keeper") >= 10
    first, second = by_name["word-order"].text.lower().rstrip(".").split(". then ")
    assert sorted(tokenize(first)) == sorted(tokenize(second))  # the same words ...
    assert tokenize(first) != tokenize(second)  # ... in another order
    assert by_name["list"].text.count(",") >= 3
    assert "Shall I compare thee" in by_name["poem"].text


def test_every_claim_of_every_description_matches_the_texts():
    """Each description states only what the sample's tokens show (the word tokenizer, as 'mha samples' counts)."""
    from mhacli.cli.options import MAX_TOKENS

    by_name = {s.name: (s.description, s.tokens()) for s in list_samples()}
    checked = set()

    def claim(name, *facts):
        checked.add(name)
        assert all(facts), (name, by_name[name][0])

    text, toks = by_name["cat"]
    claim("cat", text.startswith("Six words"), len(toks) == 6, toks.count("the") == 2)
    text, toks = by_name["repeated"]
    claim("repeated", "Five distinct words in eleven tokens" in text, len(set(toks)) == 5, len(toks) == 11)
    text, toks = by_name["word-order"]
    half = toks.index("Then")
    claim("word-order", sorted(t.lower() for t in toks[:half]) == sorted(t.lower() for t in toks[half + 1:]),
          [t.lower() for t in toks[:half]] != [t.lower() for t in toks[half + 1:]])
    text, toks = by_name["pronoun"]
    claim("pronoun", f"{toks.index('she') - toks.index('keeper')} tokens away" in text)
    text, toks = by_name["list"]
    items = [t for t in toks if t not in (",", "a", ".", "and")]
    claim("list", toks.count(",") >= 2, toks.count("a") >= 2, len(set(items)) == len(items))
    text, toks = by_name["poem"]
    claim("poem", toks.count("more") == 2, "summer's" in toks, "stays one token" in text)
    text, toks = by_name["code"]
    claim("code", "'i' three times" in text, toks.count("i") == 3, "(" in toks and "=" in toks)
    text, toks = by_name["russian"]
    claim("russian", all(unicodedata.name(ch).startswith("CYRILLIC") for t in toks for ch in t if ch.isalpha()))
    text, toks = by_name["japanese"]
    claim("japanese", " " not in load_sample("japanese").text,
          all(len(t) == 1 for t in toks))  # every kana and kanji (and the full stop) its own token
    text, toks = by_name["paragraph"]
    claim("paragraph", "About 60 tokens" in text, 55 <= len(toks) <= 65,
          f"longer than the {MAX_TOKENS} tokens" in text, len(toks) > MAX_TOKENS)
    assert checked == set(by_name), f"a description nobody checks: {sorted(set(by_name) - checked)}"


def test_unknown_sample_is_a_usage_error_listing_the_names():
    with pytest.raises(UsageError) as err:
        load_sample("no-such-text")
    message = str(err.value)
    assert "no-such-text" in message
    for name in sample_names():
        assert name in message


def test_index_lists_every_text_file_and_nothing_else():
    folder = ROOT / "sample_texts"
    index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    listed = {entry["file"] for entry in index["samples"]}
    assert listed == {p.name for p in folder.glob("*.txt")}


def test_samples_command_lists_every_sample_within_80_columns(runner):
    from mhacli.cli.app import app

    result = runner.invoke(app, ["samples"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    for s in list_samples():
        assert s.name in result.output
        assert f" {len(s.tokens())} " in result.output
    from mhacli.render.samples import samples_table

    text = _render(samples_table(list_samples()))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "what it shows" in text


def test_samples_command_shows_one_sample(runner):
    from mhacli.cli.app import app

    result = runner.invoke(app, ["samples", "russian"])
    assert result.exit_code == 0
    assert load_sample("russian").text in result.output
    result = runner.invoke(app, ["samples", "nope"])
    assert result.exit_code == 2
    assert "cat" in result.output


def test_samples_and_shapes_never_import_numpy():
    code = (
        "import sys\n"
        "from mhacli.cli.app import app\n"
        "for args in (['samples'], ['samples', 'poem'], ['shapes', '--tokens', '9']):\n"
        "    try:\n"
        "        app(args, standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('LOADED', 'numpy' in sys.modules, 'matplotlib' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "COLUMNS": "80"}).stdout
    assert "LOADED False False" in out


@pytest.mark.parametrize("weights", ["random", "designed"])
def test_every_sample_runs_with_both_weights(weights):
    from traced import run

    for s in list_samples():
        trace = run(s.text, weights=weights)
        assert trace.tokens == tuple(s.tokens())


def test_explain_takes_a_sample(runner, tmp_path, monkeypatch):
    from mhacli.cli.app import app

    monkeypatch.chdir(tmp_path)  # nothing may land in the work tree
    # The walkthrough's words; this sample's figures with these weights are the session's demo run (conftest).
    result = runner.invoke(app, ["explain", "--sample", "repeated", "--weights", "designed", "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "first copy of word" in result.output


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from this tree with hatchling (the project's own build backend), no network."""
    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    (built,) = out.glob("mhacli-*.whl")
    return built


def test_the_wheel_carries_every_sample(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for p in (ROOT / "sample_texts").iterdir():
        assert f"mhacli/sample_texts/{p.name}" in names


def test_samples_load_from_an_unpacked_wheel_outside_the_source_tree(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import mhacli.io.samples as s\n"
        "print('DIR', s.sample_dir())\n"
        "for x in s.list_samples():\n"
        "    print('SAMPLE', x.name, len(x.text))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=env, capture_output=True,
                         text=True, check=True).stdout
    assert f"DIR {site / 'mhacli' / 'sample_texts'}" in out
    assert out.count("SAMPLE ") == len(sample_names())


def test_samples_come_from_the_package_or_the_top_level_folder():
    import mhacli

    installed = Path(mhacli.__file__).resolve().parent / "sample_texts"  # a wheel (non-editable install)
    assert Path(str(sample_dir())).resolve() in {(ROOT / "sample_texts").resolve(), installed}


def test_the_wheel_carries_the_licence_types_marker_and_package_data(wheel):
    """py.typed (PEP 561), the LICENSE, the page template and the docs the help points to ship in the wheel."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "mhacli/py.typed" in names
    assert any(n.endswith("licenses/LICENSE") or n.endswith("/LICENSE") for n in names), sorted(names)[:20]
    assert "mhacli/render/templates/page.html" in names
    assert "mhacli/data/trained.npz" in names  # --weights trained from a fresh install
