"""docs/errors.md cannot rot: every row's command really gets that message and exit code.

The rows are listed once, below (ROWS). ``python tests/test_errors.py --write``
runs each command in a folder of fixture files and rewrites the table in
docs/errors.md from what ``mha`` actually printed; the tests then parse the
table and run every row again.  Numbers that depend on the machine (how much
memory it can spare, how many tokens fit) are compared as ``…``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "errors.md"
MHA = Path(sys.executable).with_name("mha")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
BEGIN, END = "<!-- errors-table:begin -->", "<!-- errors-table:end -->"

# (what went wrong, the command a user typed)
ROWS: list[tuple[str, str]] = [
    # --- the text -----------------------------------------------------------
    ("no text at all", "mha explain"),
    ("empty text", 'mha explain ""'),
    ("only white space", 'mha explain "   "'),
    ("only invisible characters (zero-width spaces)", "mha explain --file invisible.txt"),
    ("two sources of text", 'mha explain "the cat" --file notes.txt'),
    ("several words without quotes", "mha explain the cat sat"),
    ("a text that starts with a dash", 'mha explain "-5 degrees outside"'),
    ("empty standard input", "mha explain - < empty.txt"),
    ("unknown sample", "mha explain --sample dragons"),
    ("unknown sample in the list command", "mha samples dragons"),
    # --- --file ---------------------------------------------------------------
    ("file does not exist", "mha explain --file missing.txt"),
    ("file name mistyped", "mha explain --file note.txt"),
    ("a folder instead of a file", "mha explain --file folder"),
    ("a file that cannot be read (chmod 000)", "mha explain --file unreadable.txt"),
    ("a binary file", "mha explain --file picture.png"),
    ("a device that never ends", "mha explain --file /dev/zero"),
    ("a Latin-1 file", "mha explain --file latin1.txt"),
    ("a UTF-16 file", "mha explain --file utf16.txt"),
    ("an empty file", "mha explain --file empty.txt"),
    ("a file of blank lines", "mha explain --file blank.txt"),
    ("a file over 1 MiB", "mha explain --file huge.txt"),
    ("a whole book: more tokens than memory allows", "mha explain --file book.txt"),
    ("--json on a text whose JSON would not fit", "mha explain --file long.txt --json"),
    # --- sizes ----------------------------------------------------------------
    ("zero heads", 'mha explain "the cat" --heads 0'),
    ("negative heads", 'mha explain "the cat" --heads -2'),
    ("heads not a number", 'mha explain "the cat" --heads four'),
    ("heads a fraction", 'mha explain "the cat" --heads 2.5'),
    ("--heads without a value", 'mha explain "the cat" --heads'),
    ("more heads than dimensions", 'mha explain "the cat" --heads 32 --d-model 16'),
    ("d_model not divisible by heads", 'mha explain "the cat" --heads 3'),
    ("d_model not divisible, many divisors", 'mha explain "the cat" --d-model 360 --heads 7'),
    ("zero d_model", 'mha explain "the cat" --d-model 0'),
    ("d_model not a number", 'mha explain "the cat" --d-model big'),
    ("d_model too large for memory", 'mha explain "the cat" --d-model 10000000'),
    ("d_model absurdly large", 'mha explain "the cat" --d-model 1000000000000000000000000000000'),
    ("heads absurdly large", 'mha explain "the cat" --heads 99999999999999999999999999'),
    ("negative seed", 'mha explain "the cat" --seed -1'),
    ("a negative seed past any integer", 'mha explain "the cat" --seed=-99999999999999999999'),
    ("--max-tokens negative past any integer", 'mha explain "the cat" --max-tokens=-99999999999999999999'),
    ("--max-tokens zero", 'mha explain "the cat" --max-tokens 0'),
    ("a superscript digit as a number", 'mha explain "the cat" --heads ²'),
    ("two signs before a number", 'mha explain "the cat" --seed +-2'),
    ("an underscore inside a number", 'mha explain "the cat" --heads 2_0'),
    ("a number with more digits than any count", 'mha explain "the cat" --max-tokens ' + "9" * 30),
    ("--compare with a superscript digit", "mha train --compare ²"),
    ("--compare with two signs", "mha train --compare 1,+-2"),
    ("--layer with a superscript digit", "mha show attention.npz --layer ²"),
    ("--layer with two signs", "mha show attention.npz --layer +-2"),
    ("designed weights with too narrow heads", 'mha explain "the cat" --weights designed --heads 8'),
    ("shapes with an absurd d_model", "mha shapes --d-model 10000000"),
    ("shapes with zero tokens", "mha shapes --tokens 0"),
    ("shapes with key/value heads that do not divide the heads", "mha shapes -d 64 -H 8 --kv-heads 3"),
    ("shapes given a config that is not JSON", "mha shapes --config notes.txt"),
    ("tiles with blocks longer than the text", 'mha tiles "the cat" --block 3'),
    # --- names of things ------------------------------------------------------
    ("unknown tokenizer", 'mha explain "the cat" --tokenizer bpe'),
    ("tokenizer with a typo", 'mha explain "the cat" --tokenizer wrod'),
    ("unknown weights", 'mha explain "the cat" --weights bogus'),
    ("unknown dtype", 'mha explain "the cat" --dtype float16'),
    ("unknown figure format", 'mha explain "the cat" --format jpg'),
    ("dpi out of range", 'mha explain "the cat" --dpi 5'),
    ("unknown command", "mha explian"),
    ("unknown option", 'mha explain "the cat" --verbose'),
    ("asking for no colour with an option", 'mha explain "the cat" --no-color'),
    ("British spelling of an option", 'mha explain "the cat" --tokeniser char'),
    ("option mistyped", 'mha explain "the cat" --head 2'),
    ("a switch given a value", 'mha explain "the cat" --causal=yes'),
    ("demo step out of range", 'mha demo "the cat" --step 99'),
    ("quiz with too many questions", 'mha quiz "the cat" --questions 50'),
    ("demo drawing its figures onto a file", 'mha demo "the cat" --out notes.txt --no-pause'),
    ("bench with zero repeats", "mha bench --repeats 0"),
    ("bench with a million repeats", "mha bench --repeats 1000000"),
    ("bench with heads that do not divide d", "mha bench --heads 3"),
    ("bench over more tokens than memory allows", "mha bench --max-tokens 99999999"),
    ("bench --startup asked to plot", "mha bench --startup --plot"),
    ("bench --task without --train", "mha bench --task grammar"),
    ("bench with an unknown dtype", "mha bench --dtype float16"),
    ("bench with zero tokens", "mha bench --max-tokens 0"),
    ("bench --train given a layer option", "mha bench --train --heads 2"),
    ("bench --tiles given a layer option", "mha bench --tiles --heads 2"),
    ("bench --train and --startup together", "mha bench --train --startup"),
    ("bench --startup given --max-tokens", "mha bench --startup --max-tokens 64"),
    ("bench --train with zero repeats", "mha bench --train --repeats 0"),
    ("train an unknown task", "mha train --task sorting"),
    ("train for zero steps", "mha train --steps 0"),
    ("train with a learning rate of zero", "mha train --lr 0"),
    ("train with an infinite learning rate", "mha train --lr inf"),
    ("train with heads that do not divide d", "mha train --heads 3"),
    ("train --compare with a head count that does not divide d", "mha train --compare 1,3"),
    ("train --compare with a word", "mha train --compare two"),
    ("the grammar model with another head count", 'mha explain "the dog saw the cat" --weights grammar --heads 2'),
    ("the grammar model without its positions", 'mha explain "the dog saw the cat" --weights grammar --no-positions'),
    ("the grammar model with another seed", 'mha explain "the dog saw the cat" --weights grammar --seed 7'),
    ("a --weights name with a typo and a space", 'mha explain "the cat" --weights " gramar"'),
    ("--words with a class the grammar does not have",
     'mha explain "the lion crossed the park" --weights grammar --words park=plase'),
    ("--words without a class", 'mha explain "the lion crossed the park" --weights grammar --words park'),
    ("--words for a word the grammar already has",
     'mha explain "the lion crossed the street" --weights grammar --words street=place'),
    ("--words for punctuation", 'mha explain "the lion crossed the park" --weights grammar --words "?!=place"'),
    ("--words for a word the tokenizer splits",
     'mha explain "the lion crossed the 公园" --weights grammar --words 公园=place'),
    ("--words mapping one word to two classes",
     'mha explain "the lion crossed the park" --weights grammar --words "park=place park=thing"'),
    ("--words without the grammar model", 'mha explain "the lion crossed the park" --words park=place'),
    ("--words with a model that is not of the grammar",
     'mha explain "the lion crossed the park" --weights trained --words park=place'),
    ("--words with the worked example", "mha explain --worked --words park=place"),
    ("train --compare with a head count of 0", "mha train --compare 1,0"),
    ("train --compare with a head count past any integer", "mha train --compare 99999999999999999999"),
    ("train --save to a suffix --weights cannot read back", "mha train --save model.pt"),
    ("train --save without a suffix", "mha train --save model"),
    # --- --query --------------------------------------------------------------
    ("--query past the end", 'mha explain "the cat sat" --query 7'),
    ("--query negative", 'mha explain "the cat sat" --query -1'),
    ("--query a word that is not there", 'mha explain "the cat sat" --query dog'),
    # --- where output goes ----------------------------------------------------
    ("--save-npz into a missing folder", 'mha explain "the cat" --save-npz nowhere/trace.npz'),
    ("--save-npz onto a folder", 'mha explain "the cat" --save-npz folder'),
    ("--save-npz onto a device", 'mha explain "the cat" --save-npz /dev/null'),
    ("--save-npz under a file", 'mha explain "the cat" --save-npz notes.txt/trace.npz'),
    ("--save-npz into a folder without write permission", 'mha explain "the cat" --save-npz locked/trace.npz'),
    ("--save-npz with a name too long", 'mha explain "the cat" --save-npz ' + "n" * 260 + ".npz"),
    ("--out an existing file", 'mha explain "the cat" --out notes.txt'),
    ("--out a folder without write permission", 'mha explain "the cat" --out locked'),
    ("--out empty (an unset variable in --out \"$DIR\")", 'mha explain "the cat" --out ""'),
    ("--weights empty", 'mha explain "the cat" --weights ""'),
    ("--html onto a folder", 'mha explain "the cat" --html folder'),
    ("two outputs with the same name", 'mha explain "the cat" --save-npz run.npz --html run.npz'),
    ("an output over the input text", "mha explain --file notes.txt --save-npz notes.txt"),
    ("show writing its page over the trace it reads", "mha show trace.npz --html trace.npz"),
    ("figures over the trace being shown", "mha show figs/heads.png --out figs"),
    ("figures over the input text", "mha explain --file figs/magnifiers.png --out figs"),
    ("--html named like a figure in --out", 'mha explain "the cat" --html figs/heads.png --out figs'),
    ("a link planted in --out", 'mha explain "the cat" --out planted'),
    ("--save-npz ending with a slash", 'mha explain "the cat" --save-npz keep.txt/'),
    ("--html ending with a slash", 'mha explain "the cat" --html newdir/'),
    ("--html behind a dangling link", 'mha explain "the cat" --html dangling.html'),
    ("--query with more digits than any position", 'mha explain "the cat sat" --query ' + "9" * 40),
    ("figures too large for memory", 'mha explain "the cat" --d-model 512 --heads 512 --dpi 600'),
    ("--no-json-arrays without --json", 'mha explain "the cat" --no-json-arrays'),
    ("an output over the weights file it reads",
     'mha explain "the cat" --weights own.npz --heads 2 --save-npz own.npz'),
    ("train saving its model over one of its figures", "mha train --save figs/training.png --out figs"),
    ("train --save ending with a slash", "mha train --save model.npz/"),
    ("train for more steps than a lesson needs", "mha train --steps 10000000"),
    ("train --seeds as a range that runs backwards", "mha train --task grammar --seeds 4-1 --compare 1,4"),
    ("train --seeds without --compare", "mha train --task grammar --seeds 0-1"),
    ("train --seeds with more seeds than a lesson needs", "mha train --task grammar --seeds 0-99999 --compare 1,4"),
    ("train --seeds with --save", "mha train --task grammar --seeds 0-1 --compare 1,4 --save m.npz"),
    ("train --knockout without the grammar task", "mha train --knockout"),
    ("train with a learning rate that can only diverge", "mha train --lr 1e100 --steps 5 --json --no-plots"),
    ("train saving its model where --out makes its folder", "mha train --save m.npz --out m.npz"),
    ("--save-npz named like --out", 'mha explain "the cat" --save-npz f --out f'),
    ("--out inside the file --html writes", 'mha explain "the cat" --html f --out f/sub'),
    ("train with a batch bigger than memory needs", "mha train --batch 10000000"),
    ("a --weights name too long for the file system", "mha compare \"a b\" --weights " + "x" * 300),
    # --- show and verify ------------------------------------------------------
    ("show without a file", "mha show"),
    ("show a missing file", "mha show missing.npz"),
    ("show a folder", "mha show folder"),
    ("show a truncated npz", "mha show truncated.npz"),
    ("show a .npy array", "mha show array.npy"),
    ("show someone else's npz", "mha show other.npz"),
    ("show a text file named .npz", "mha show text.npz"),
    ("show an npz holding pickled objects", "mha show pickled.npz"),
    ("show an npz with an array cut short", "mha show tampered-shape.npz"),
    ("show an npz whose head count does not divide d", "mha show tampered-heads.npz"),
    ("show an npz whose weights are not probabilities", "mha show tampered-probs.npz"),
    ("verify an npz whose weights were changed", "mha verify tampered-weights.npz"),
    ("verify two files", "mha verify trace.npz other.npz"),
    ("show a device that never ends", "mha show /dev/zero"),
    ("verify a device that never ends", "mha verify /dev/urandom"),
    ("show an npz whose seed is infinite", "mha show tampered-inf-seed.npz"),
    ("verify an npz whose head count is infinite", "mha verify tampered-inf-heads.npz"),
    ("verify an npz with infinite weights", "mha verify tampered-inf-weights.npz"),
    ("show an npz with a member that is not .npy data", "mha show not-npy.npz"),
    ("show an npz from a newer mhacli", "mha show newer.npz"),
    ("show a model mha train saved", "mha show model.npz"),
    ("a saved run given as weights", 'mha explain "the cat" --weights trace.npz'),
    ("an attention file given as weights", 'mha explain "the cat" --weights attention.npz'),
    ("shapes asked for Markdown and JSON at once", "mha shapes --markdown --json"),
    # --- your own weights and attention (issues 21 and 22) -------------------------
    ("a weights file without --heads (a state dict never records them)", 'mha explain "the cat" --weights own.npz'),
    ("a weights file holding several layers, without --layer",
     'mha explain "the cat" --weights encoder.npz --heads 2'),
    ("--layer beyond the layers of a weights file", 'mha explain "the cat" --weights encoder.npz --heads 2 --layer 2'),
    ("--layer without a weights file", 'mha explain "the cat" --layer 2'),
    ("--layer with the shipped trained model", 'mha explain "the cat" --weights trained --layer 2'),
    ("weights with add_bias_kv (bias_k, bias_v)", 'mha explain "the cat" --weights bias-kv.npz --heads 2'),
    ("weights too large to run (x 1e200)", 'mha explain "the cat" --weights huge-weights.npz --heads 2'),
    ("a zip bomb as weights", 'mha explain "the cat" --weights bomb.npz --heads 2'),
    ("show a zip bomb", "mha show bomb-attention.npz"),
    ("show a batch of attention without --batch-index", "mha show batch.npz"),
    ("--batch-index beyond the batch", "mha show batch.npz --batch-index 5"),
    ("show attention whose tokens are Python objects", "mha show object-tokens.npz"),
    ("show scores instead of attention weights", "mha show scores.npz"),
    ("show an empty attention array (SDPA)", "mha show empty-attention.npz"),
    ("show a file holding two different attention arrays", "mha show two-attentions.npz"),
    ("a trained model whose config is nested 100,000 deep", 'mha explain "the cat" --weights deep-config.npz'),
    ("a trained model whose config was edited", 'mha explain "the cat" --weights edited-config.npz'),
    ("weights recording a head count that cannot split d", 'mha explain "the cat" --weights three-heads.npz'),
    ("safetensors of float8 weights", 'mha explain "the cat" --weights float8.safetensors --heads 2'),
]

# Rows that need a user without root's powers (root may read and write anything).
NEEDS_UNPRIVILEGED = ("unreadable.txt", "locked")


# ---------------------------------------------------------------------------
# Fixture files
# ---------------------------------------------------------------------------

def make_fixtures(folder: Path) -> None:
    """The files the rows' commands name; made fresh for every run."""
    import numpy as np

    from mhacli.attention.config import Config
    from mhacli.attention.trace import run_tokens
    from mhacli.io.export import npz_arrays, save_npz

    (folder / "notes.txt").write_text("the cat sat on the mat\n", encoding="utf-8")
    (folder / "invisible.txt").write_text("\u200b\u200b\u2060\n", encoding="utf-8")
    (folder / "empty.txt").write_bytes(b"")
    (folder / "blank.txt").write_text("\n   \n\t\n", encoding="utf-8")
    (folder / "latin1.txt").write_bytes("the caf\u00e9 is open\n".encode("latin-1"))
    (folder / "utf16.txt").write_bytes("the cat sat\n".encode("utf-16"))
    (folder / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    (folder / "huge.txt").write_bytes(b"the cat sat on the mat. " * 50_000)
    (folder / "book.txt").write_text(" ".join(f"w{i % 5000}" for i in range(100_000)), encoding="utf-8")
    (folder / "long.txt").write_text(" ".join(f"word{i % 997}" for i in range(5_000)), encoding="utf-8")
    (folder / "folder").mkdir()
    unreadable = folder / "unreadable.txt"
    unreadable.write_text("the cat sat\n", encoding="utf-8")
    unreadable.chmod(0o000)
    (folder / "locked").mkdir()
    (folder / "locked").chmod(0o555)

    trace = run_tokens(["the", "cat", "sat", "on", "the", "mat"], Config())
    save_npz(trace, folder / "trace.npz")
    good = npz_arrays(trace)
    (folder / "truncated.npz").write_bytes((folder / "trace.npz").read_bytes()[:1500])
    np.save(folder / "array.npy", np.zeros(3))
    np.savez(folder / "other.npz", images=np.zeros((2, 2)), labels=np.arange(2))
    np.savez(folder / "attention.npz", weights=np.full((2, 2, 3, 3), 1 / 3), tokens=np.array(["a", "b", "c"]))
    (folder / "text.npz").write_text("not an archive\n", encoding="utf-8")
    np.savez(folder / "pickled.npz", **{**good, "tokens": np.array(["the", 3], dtype=object)})
    np.savez(folder / "tampered-shape.npz", **{**good, "Q": good["Q"][:, :4]})
    np.savez(folder / "tampered-heads.npz", **{**good, "num_heads": np.array(3)})
    np.savez(folder / "tampered-probs.npz", **{**good, "weights": good["weights"] * 2})
    np.savez(folder / "tampered-weights.npz", **{**good, "W_q": good["W_q"] + 0.1})
    np.savez(folder / "tampered-inf-seed.npz", **{**good, "seed": np.array(np.inf)})
    np.savez(folder / "tampered-inf-heads.npz", **{**good, "num_heads": np.array(np.inf)})
    np.savez(folder / "tampered-inf-weights.npz", **{**good, "W_k": good["W_k"] * np.inf})
    np.savez(folder / "newer.npz", **{**good, "format_version": np.array(3)})
    from mhacli.models.shipped import shipped_model_path

    (folder / "model.npz").write_bytes(shipped_model_path(name="trained").read_bytes())  # as mha train --save wrote it
    import io
    import zipfile

    with zipfile.ZipFile(folder / "not-npy.npz", "w") as archive:
        for name, value in good.items():
            buffer = io.BytesIO()
            np.save(buffer, value)
            archive.writestr(name + ".npy", b"not an array" if name == "seed" else buffer.getvalue())
    (folder / "figs").mkdir()
    save_npz(trace, folder / "figs" / "heads.png")
    (folder / "figs" / "magnifiers.png").write_text("the cat sat on the mat\n", encoding="utf-8")
    (folder / "keep.txt").write_text("keep\n", encoding="utf-8")
    (folder / "planted").mkdir()
    (folder / "planted" / "heads.png").symlink_to("../notes.txt")
    (folder / "dangling.html").symlink_to("gone/page.html")
    rng = np.random.default_rng(0)
    np.savez(folder / "own.npz", **{"in_proj_weight": rng.normal(size=(48, 16)),
                                    "out_proj.weight": rng.normal(size=(16, 16))})
    own = {"in_proj_weight": rng.normal(size=(48, 16)), "out_proj.weight": rng.normal(size=(16, 16))}
    np.savez(folder / "encoder.npz", **{f"layers.{i}.self_attn.{k}": v for i in range(2) for k, v in own.items()})
    np.savez(folder / "bias-kv.npz", **own, bias_k=np.zeros((1, 1, 16)), bias_v=np.zeros((1, 1, 16)))
    np.savez(folder / "huge-weights.npz", **{k: v * 1e200 for k, v in own.items()})
    sys.path.insert(0, str(Path(__file__).parent))
    from test_archive import declaring_bomb

    declaring_bomb(folder / "bomb.npz", own, None, int(3.5 * 2**30))
    uniform = np.full((1, 2, 3, 3), 1 / 3)
    declaring_bomb(folder / "bomb-attention.npz", {"weights": uniform, "tokens": np.array(["a", "b", "c"])}, None,
                   int(3.5 * 2**30))
    np.savez(folder / "batch.npz", attentions=np.full((2, 3, 2, 3, 3), 1 / 3), tokens=np.array(["a", "b", "c"]))
    np.savez(folder / "object-tokens.npz", weights=uniform, tokens=np.array(["a", "b", "c"], dtype=object))
    np.savez(folder / "scores.npz", weights=rng.normal(size=(2, 3, 3)), tokens=np.array(["a", "b", "c"]))
    np.savez(folder / "empty-attention.npz", weights=np.zeros((0, 2, 3, 3)), tokens=np.array(["a", "b", "c"]))
    np.savez(folder / "two-attentions.npz", weights=uniform, attentions=np.eye(3)[None, None].repeat(2, axis=1),
             tokens=np.array(["a", "b", "c"]))
    np.savez(folder / "three-heads.npz", **own, num_heads=np.array(3))
    _edited_models(folder)
    from test_hard_inputs_four import _safetensors_of

    _safetensors_of(folder / "float8.safetensors", own, "F8_E4M3")


def _edited_models(folder: Path) -> None:
    """The shipped trained model with its config nested past any depth, and with a head count edited to 3."""
    import json

    import numpy as np

    from mhacli.models.shipped import shipped_model_path

    with np.load(shipped_model_path(name="trained")) as shipped:
        arrays = {k: shipped[k] for k in shipped.files}
    config = json.loads(str(arrays["config"]))
    np.savez(folder / "deep-config.npz", **{**arrays, "config": np.array("[" * 100_000 + "]" * 100_000)})
    np.savez(folder / "edited-config.npz", **{**arrays, "config": np.array(json.dumps({**config, "heads": 3}))})


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    message: str  # the one line on stderr


def _argv(command: str) -> tuple[list[str], str | None]:
    words = shlex.split(command)
    assert words[0] == "mha", command
    stdin = None
    if "<" in words:
        at = words.index("<")
        stdin, words = words[at + 1], words[:at]
    return words[1:], stdin


def _unprivileged(command: str) -> bool:
    return any(name in shlex.split(command) or any(w.startswith(name + "/") for w in shlex.split(command))
               for name in NEEDS_UNPRIVILEGED)


def _as_nobody() -> list[str] | None:
    setpriv = Path("/usr/bin/setpriv")
    return [str(setpriv), "--reuid=65534", "--regid=65534", "--clear-groups"] if setpriv.exists() else None


def _in_process(args: list[str], stdin: bytes | None, folder: Path) -> tuple[int, str]:
    """The command through Typer's CliRunner (the app's own error handling runs inside it)."""
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    here = Path.cwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(app, args, input=stdin)
    finally:
        os.chdir(here)
    return result.exit_code, result.stderr


def _installed(args: list[str], stdin: Path | None, folder: Path, prefix: list[str]) -> tuple[int, str]:
    """The command as a person runs it: the installed script in a real process."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "TERM")}
    env.update(MPLBACKEND="Agg", MPLCONFIGDIR=str(folder / ".mpl"), HOME=str(folder))
    with open(stdin, "rb") if stdin else open(os.devnull, "rb") as handle:
        p = subprocess.run(prefix + [str(MHA), *args], stdin=handle, capture_output=True, text=True,
                           cwd=folder, env=env, timeout=300)
    return p.returncode, p.stderr


def run_row(command: str, folder: Path, installed: bool = False) -> Outcome:
    """Run one row's command in ``folder`` and return its exit code and its one line on stderr.

    In-process by default (fast); rows that need an unprivileged user, and
    ``installed=True``, run the installed ``mha`` in a real process.
    """
    args, stdin = _argv(command)
    if _unprivileged(command) and IS_ROOT:
        nobody = _as_nobody()
        if nobody is None:
            pytest.skip("root reads and writes anything, and setpriv is missing to drop to 'nobody'")
        code, err = _installed(args, folder / stdin if stdin else None, folder, nobody)
        if "mha: error:" not in err:
            # e.g. the checkout lives in a folder 'nobody' may not enter: nothing to learn here.
            pytest.skip(f"'nobody' cannot run the installed mha here: {err.strip()[-200:]}")
    elif installed:
        code, err = _installed(args, folder / stdin if stdin else None, folder, [])
    else:
        code, err = _in_process(args, (folder / stdin).read_bytes() if stdin else None, folder)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"{command!r} printed {len(lines)} lines on stderr:\n{err}"
    return Outcome(code, lines[0])


def normalize(message: str) -> str:
    """Machine-dependent numbers (free memory, tokens that fit) as '…'."""
    message = re.sub(r"the [\d.,]+ [KMGTPE]iB this machine can spare", "the … this machine can spare", message)
    message = re.sub(r"at most [\d,]+ tokens fit", "at most … tokens fit", message)
    message = re.sub(r"need about [\d.,]+ [KMGTPE]iB", "need about …", message)
    message = re.sub(r"use --dpi \d+ or less", "use --dpi … or less", message)
    return message


# ---------------------------------------------------------------------------
# The table in docs/errors.md
# ---------------------------------------------------------------------------

def _cell(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def _uncell(cell: str) -> str:
    cell = cell.strip()
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1].replace("\\|", "|")


def render_table(outcomes: list[tuple[str, str, Outcome]]) -> str:
    lines = ["| what went wrong | command | exit | message |", "| --- | --- | --- | --- |"]
    for mistake, command, out in outcomes:
        lines.append(f"| {mistake} | {_cell(command)} | {out.exit_code} | {_cell(out.message)} |")
    return "\n".join(lines)


def parse_table(doc: str) -> list[tuple[str, str, int, str]]:
    """(mistake, command, exit code, message) of every row between the markers."""
    body = doc.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = []
    for line in body.strip().splitlines()[2:]:
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        assert len(cells) == 4, line
        rows.append((cells[0].strip(), _uncell(cells[1]), int(cells[2]), _uncell(cells[3])))
    return rows


def fixture_folder() -> Path:
    """A folder under /tmp that an unprivileged user may enter (pytest's tmp_path is root-only)."""
    folder = Path(tempfile.mkdtemp(prefix="mha-errors-", dir="/tmp"))
    folder.chmod(0o755)
    make_fixtures(folder)
    return folder


def _remove(folder: Path) -> None:
    for path in folder.rglob("*"):
        try:
            path.chmod(0o755)
        except OSError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


def write_doc() -> None:
    folder = fixture_folder()
    try:
        outcomes = [(m, c, run_row(c, folder)) for m, c in ROWS]
    finally:
        _remove(folder)
    doc = DOC.read_text(encoding="utf-8")
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{BEGIN}\n{render_table(outcomes)}\n{END}{tail}", encoding="utf-8")


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

DOC_ROWS = parse_table(DOC.read_text(encoding="utf-8")) if DOC.exists() else []


@pytest.fixture(scope="module")
def folder():
    made = fixture_folder()
    yield made
    _remove(made)


def test_the_doc_lists_every_row_and_nothing_else():
    assert [(m, c) for m, c, _, _ in DOC_ROWS] == ROWS, "run: python tests/test_errors.py --write"


# Run as root, a row that needs an unprivileged user starts the installed mha as 'nobody': those are the slow tier's
# (the same rows and messages), and test_files.py keeps one unprivileged real process in the default tier (issue 46.5).
@pytest.mark.parametrize("mistake,command,exit_code,message", [
    pytest.param(*row, marks=pytest.mark.slow) if IS_ROOT and _unprivileged(row[1]) else row for row in DOC_ROWS],
    ids=[r[0] for r in DOC_ROWS])
def test_each_row_gets_its_documented_message(folder, mistake, command, exit_code, message):
    got = run_row(command, folder)
    assert got.exit_code == exit_code, got
    assert normalize(got.message) == normalize(message)


@pytest.mark.parametrize("mistake,command,exit_code,message", DOC_ROWS, ids=[r[0] for r in DOC_ROWS])
def test_each_message_reads_as_one_sentence_with_a_fix(mistake, command, exit_code, message):
    assert message.startswith("mha: error: ")
    assert "Traceback" not in message and "this is a bug" not in message
    assert not re.search(r"unexpected [A-Z]\w*(Error|Exception)", message), "a crash dressed as a message"
    assert message.endswith((".", "?")), message
    assert exit_code in (1, 2)
    assert "\x1b" not in message
    assert len(message) < 400, "one line a person reads, not a paragraph"


# A sample of rows through the installed script, to show the in-process runs say the same.
INSTALLED_SAMPLE = ["mha explain", 'mha explain "the cat" --heads four', "mha explain - < empty.txt",
                    "mha explain --file latin1.txt", "mha show truncated.npz", "mha verify tampered-weights.npz",
                    'mha explain "-5 degrees outside"', "mha explian", "mha train --compare ²",
                    'mha explain "the cat" --max-tokens 0']


@pytest.mark.skipif(not MHA.exists(), reason="the mha console script is not installed")
@pytest.mark.parametrize("command", INSTALLED_SAMPLE)
@pytest.mark.slow
def test_the_installed_script_says_the_same(folder, command):
    row = {c: (code, msg) for _, c, code, msg in DOC_ROWS}[command]
    got = run_row(command, folder, installed=True)
    assert (got.exit_code, normalize(got.message)) == (row[0], normalize(row[1]))


def test_usage_errors_are_2_and_run_time_failures_are_1():
    codes = {command: code for _, command, code, _ in DOC_ROWS}
    assert codes["mha verify tampered-weights.npz"] == 1
    assert sum(1 for c in codes.values() if c == 2) == len(codes) - 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_doc()
        print(f"wrote {DOC.relative_to(ROOT)} ({len(ROWS)} rows)")
    else:
        print(__doc__)


# ---------------------------------------------------------------------------
# Failures no command line can cause on purpose: app.report_error still gives one line
# ---------------------------------------------------------------------------

def _failing_run(exc: BaseException):
    def run(*args, **kwargs):
        raise exc
    return run


@pytest.mark.parametrize("exc,code,needle", [
    (MemoryError(), 1, "ran out of memory; use a shorter text, a smaller --max-tokens"),
    (OSError(28, "No space left on device"), 1, "the disk is full"),
    (OSError(5, "Input/output error"), 1, "Input/output error; check the path and permissions"),
    (KeyboardInterrupt(), 130, "interrupted; nothing half-written was left behind."),
    (ZeroDivisionError("boom"), 1, "unexpected ZeroDivisionError: boom (this is a bug; rerun as 'mha --debug "
                                   "explain …' and report"),
])
def test_any_failure_inside_a_command_is_one_line_with_its_exit_code(monkeypatch, tmp_path, exc, code, needle):
    from typer.testing import CliRunner

    import mhacli.attention.trace
    from mhacli.cli.app import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mhacli.attention.trace, "run_tokens", _failing_run(exc))
    r = CliRunner().invoke(app, ["explain", "the cat", "--no-plots"])
    assert r.exit_code == code
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mha: error: ") and needle in lines[0], r.stderr
    assert "Traceback" not in r.output


def test_debug_adds_the_traceback(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import mhacli.attention.trace
    from mhacli.cli.app import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mhacli.attention.trace, "run_tokens", _failing_run(ZeroDivisionError("boom")))
    r = CliRunner().invoke(app, ["--debug", "explain", "the cat", "--no-plots"])
    assert r.exit_code == 1
    assert "Traceback (most recent call last)" in r.stderr and "ZeroDivisionError: boom" in r.stderr
    assert r.stderr.rstrip().splitlines()[-1].startswith("mha: error: unexpected ZeroDivisionError")
    plain = CliRunner().invoke(app, ["explain", "", "--no-plots"])
    assert "Traceback" not in plain.stderr, "--debug must not stick to later runs"


def test_ctrl_c_swallowed_by_a_destructor_is_reported_not_printed_as_a_traceback(monkeypatch, tmp_path):
    """Ctrl-C can land inside __del__ or a weakref callback, where Python only prints it."""
    from typer.testing import CliRunner

    import mhacli.attention.trace
    from mhacli.cli.app import app

    real_run = mhacli.attention.trace.run_tokens

    class Unlucky:
        def __del__(self):
            raise KeyboardInterrupt

    def run(*args, **kwargs):
        Unlucky()  # collected at once: its KeyboardInterrupt goes to sys.unraisablehook
        return real_run(*args, **kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mhacli.attention.trace, "run_tokens", run)
    hook = sys.unraisablehook
    r = CliRunner().invoke(app, ["explain", "the cat", "--no-plots"])
    assert r.exit_code == 130
    assert r.stderr == "mha: error: interrupted; nothing half-written was left behind.\n"
    assert "Exception ignored" not in r.output
    assert sys.unraisablehook is hook, "the hook is the process's again after the command"
