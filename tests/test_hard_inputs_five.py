"""Hard inputs, round five (issue 47): the newest surfaces, each input as a user meets it.

Each test gives ``mha`` (or the function under it) an input that was seen to fail and checks the
one-line answer, the exit code, and that nothing was written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_hard_inputs import mha_in_process, one_error_line

import mhacli
from mhacli.core.errors import UsageError

# A sentence of the grammar the shipped grammar model learned: its card's rows are read against its parse.
GRAMMAR_SENTENCE = "a horse sent the cake to a king because it was too tired"


def _edited_card(tmp_path: Path, rows: list[str]) -> Path:
    from mhacli.io.shipped import shipped_model_path

    with np.load(shipped_model_path(name="grammar")) as shipped:
        arrays = {k: shipped[k] for k in shipped.files}
    metrics = json.loads(str(arrays["metrics"]))
    metrics["card"] = {**metrics["card"], "rows": rows}
    arrays["metrics"] = np.array(json.dumps(metrics))
    path = tmp_path / "edited.npz"
    np.savez(path, **arrays)
    return path


def _card_rows() -> list[str]:
    from mhacli.core.card import rows

    return list(rows())


@pytest.mark.parametrize(("edit", "words"), [
    (lambda r: ["subj", *r[1:]], "its report card (metrics 'card') has a row 'subj', which the grammar's card has not"),
    (lambda r: ["\x1b[31msubject", *r[1:]], "has a row '\\x1b[31msubject', which the grammar's card has not"),
    (lambda r: [r[1], r[0], *r[2:]], "lists its rows in another order than the grammar's"),
    (lambda r: [r[0], *r[:-1]], "has the row 'subject' twice"),
])
def test_an_edited_report_card_is_one_line_naming_the_card(tmp_path, edit, words):
    """Renamed rows ended in "unexpected KeyError … (this is a bug)" on a sentence of the grammar; reordered
    rows were accepted, each row's hit rates shown under another row's name."""
    _edited_card(tmp_path, edit(_card_rows()))
    proc = mha_in_process("explain", GRAMMAR_SENTENCE, "--weights", "edited.npz", "--no-plots", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "'edited.npz' is not a trained mha model" in line and words in line, line
    assert "\x1b" not in proc.stderr


def test_a_request_with_both_a_text_and_tokens_is_refused_as_the_keywords_are():
    with pytest.raises(UsageError, match="takes a text or tokens, not both"):
        mhacli.run(text="the cat", tokens=["a", "b"])
    with pytest.raises(UsageError, match="a Request takes a text or tokens, not both"):
        mhacli.run(mhacli.Request(text="the cat", tokens=["a", "b"]))


@pytest.mark.parametrize("tokens", [[1.0, 2.5], np.array([1.0, 2.5]), ["the", 2.5], [np.float32(0.5), "cat"]])
def test_tokens_given_as_numbers_are_refused_never_read_as_text(tokens):
    with pytest.raises(UsageError, match=r"tokens must be strings, one per position; item \d is .*, a number"):
        mhacli.run(tokens=tokens)
    with pytest.raises(UsageError, match="tokens must be strings"):
        mhacli.from_attention(np.full((1, 2, 2), 0.5), tokens)


def test_numpy_whole_numbers_count_sentences_as_python_ints_do():
    from mhacli.io.shipped import shipped_model_path
    from mhacli.io.trained import load_trained

    model, _ = load_trained(shipped_model_path(name="grammar"))
    card = mhacli.report_card(model, np.int64(5))
    assert card.sentences == 5 and type(card.sentences) is int
    assert json.dumps(card.to_dict())  # a numpy integer would not be JSON
    assert json.dumps(mhacli.knockout(model, np.int64(5)).to_dict())
    with pytest.raises(UsageError, match="at least 1 sentence"):
        mhacli.report_card(model, np.int64(0))


def _two_cased_layers(path: Path, d: int = 8) -> None:
    rng = np.random.default_rng(0)
    arrays = {f"{name}.{key}": rng.normal(size=shape) for name in ("Attn", "attn")
              for key, shape in (("in_proj_weight", (3 * d, d)), ("out_proj.weight", (d, d)))}
    np.savez(path, **arrays)


@pytest.mark.parametrize(("layer", "said"), [
    ("Attn", "ran the self-attention Attn"), ("attn", "ran the self-attention attn"),
    ("ATTN", "--layer ATTN names 2 layers whose names differ only in letter case, 'Attn' and 'attn'; give one "
             "exactly as it is written."),
])
def test_layers_whose_names_differ_only_in_case_are_never_picked_by_a_guess(tmp_path, layer, said):
    _two_cased_layers(tmp_path / "w.npz")
    proc = mha_in_process("explain", "a b c", "--weights", "w.npz", "--heads", "2", "--layer", layer, "--no-plots",
                          cwd=tmp_path)
    assert said in proc.stderr, proc.stderr
    if layer == "ATTN":
        assert proc.returncode == 2 and one_error_line(proc)
