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
from mhacli.attention.errors import UsageError

# A sentence of the grammar the shipped grammar model learned: its card's rows are read against its parse.
GRAMMAR_SENTENCE = "a horse sent the cake to a king because it was too tired"


def _edited_card(tmp_path: Path, rows: list[str]) -> Path:
    from mhacli.models.shipped import shipped_model_path

    with np.load(shipped_model_path(name="grammar")) as shipped:
        arrays = {k: shipped[k] for k in shipped.files}
    metrics = json.loads(str(arrays["metrics"]))
    metrics["card"] = {**metrics["card"], "rows": rows}
    arrays["metrics"] = np.array(json.dumps(metrics))
    path = tmp_path / "edited.npz"
    np.savez(path, **arrays)
    return path


def _card_rows() -> list[str]:
    from mhacli.grammar.card import rows

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
    from mhacli.models.shipped import shipped_model_path
    from mhacli.models.trained import load_trained

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


# ---------------------------------------------------------------------------
# Your model's own files and structure
# ---------------------------------------------------------------------------

# Pickles as torch.save(model) writes them, by hand (PyTorch is optional): a class global, protocol 2's GLOBAL
# and protocol 4's STACK_GLOBAL (two SHORT_BINUNICODE names, then the opcode).
MODULE_PROTOCOL_2 = b"\x80\x02ctorch.nn.modules.activation\nMultiheadAttention\nq\x00)\x81q\x01}q\x02b."
MODULE_PROTOCOL_4 = (b"\x80\x04\x8c\x1btorch.nn.modules.activation\x94\x8c\x12MultiheadAttention\x94\x93\x94)"
                     b"\x81\x94.")
OWN_CLASS = b"\x80\x02c__main__\nNet\nq\x00)\x81q\x01."
STATE_DICT = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01ctorch._utils\n_rebuild_tensor_v2\nq\x02."


@pytest.mark.parametrize(("pickled", "found"), [
    (MODULE_PROTOCOL_2, "torch.nn.modules.activation.MultiheadAttention"),
    (MODULE_PROTOCOL_4, "torch.nn.modules.activation.MultiheadAttention"),
    (OWN_CLASS, "__main__.Net"), (STATE_DICT, None), (b"not a pickle", None),
])
def test_a_pickled_model_is_found_from_its_opcodes_alone(pickled, found):
    from mhacli.models.weights import saved_object

    assert saved_object(pickled) == found


def _pt_file(path: Path, pickled: bytes) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:  # the layout torch.save's zip format writes
        archive.writestr("model/data.pkl", pickled)
        archive.writestr("model/version", "3\n")
    return path


@pytest.mark.parametrize("pickled", [MODULE_PROTOCOL_2, MODULE_PROTOCOL_4])
def test_a_file_torch_save_model_wrote_is_named_with_the_save_that_works(tmp_path, pickled):
    """It was "not a readable PyTorch state dict (UnpicklingError) … save it again with torch.save (a recent
    PyTorch writes the zip format)": it was zip already, and saving it again the same way changed nothing."""
    _pt_file(tmp_path / "model.pt", pickled)
    proc = mha_in_process("explain", "a b c", "--weights", "model.pt", "--heads", "2", "--no-plots", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and line == (
        "mha: error: 'model.pt' holds a whole model or object (torch.nn.modules.activation.MultiheadAttention), as "
        "torch.save(model) writes it, not a state dict; save its weights with torch.save(model.state_dict()) and "
        "give that file."), line
    assert "zip format" not in line


@pytest.mark.torch
def test_torch_save_of_a_real_module_is_named_as_such(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch makes the file")
    torch.save(torch.nn.MultiheadAttention(8, 2), tmp_path / "model.pt")
    with pytest.raises(UsageError, match=r"holds a whole model or object \(torch\.nn\.modules\.activation\."
                                         r"MultiheadAttention\), as torch\.save\(model\) writes it"):
        mhacli.run("a b c", weights=tmp_path / "model.pt", heads=2)


@pytest.mark.torch
def test_a_real_nn_transformer_is_numbered_encoder_first_and_its_cross_attention_refused(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch makes the model")
    # batch_first: the same state dict, and none of PyTorch's own warning about nested tensors in the summary
    model = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
                                 dim_feedforward=16, batch_first=True)
    torch.save(model.state_dict(), tmp_path / "tr.pt")
    first = mhacli.run("a b c", weights=tmp_path / "tr.pt", heads=2, layer=0)
    assert first.notes[0].startswith("ran the self-attention encoder.layers.0.self_attn (layer 0 of 0–2)")
    decoder = mhacli.run("a b c", weights=tmp_path / "tr.pt", heads=2, layer=2)
    assert decoder.notes[0].startswith("ran the self-attention decoder.layers.0.self_attn (layer 2 of 0–2), causal")
    assert np.all(np.triu(decoder.trace.weights, 1) == 0)
    with pytest.raises(UsageError, match="'decoder.layers.0.multihead_attn' in the weights in .* is cross-attention"):
        mhacli.run("a b c", weights=tmp_path / "tr.pt", heads=2, layer="decoder.layers.0.multihead_attn")


def _mha_layer(rng: np.random.Generator, prefix: str, d: int = 8) -> dict[str, np.ndarray]:
    return {prefix + "in_proj_weight": rng.normal(size=(3 * d, d)), prefix + "in_proj_bias": rng.normal(size=3 * d),
            prefix + "out_proj.weight": rng.normal(size=(d, d)), prefix + "out_proj.bias": rng.normal(size=d)}


def transformer_state(layers: int = 2) -> dict[str, np.ndarray]:
    """nn.Transformer's state dict by its names (sorted, as a safetensors file lists them): encoder and decoder
    layers, each decoder layer with its self-attention and its cross-attention (multihead_attn)."""
    rng = np.random.default_rng(0)
    state: dict[str, np.ndarray] = {}
    for i in range(layers):
        state |= _mha_layer(rng, f"encoder.layers.{i}.self_attn.")
        state |= _mha_layer(rng, f"decoder.layers.{i}.self_attn.")
        state |= _mha_layer(rng, f"decoder.layers.{i}.multihead_attn.")
    return dict(sorted(state.items()))


def bert2bert_state() -> dict[str, np.ndarray]:
    """A Hugging Face EncoderDecoderModel (BERT to BERT): the decoder's layers hold crossattention."""
    rng = np.random.default_rng(1)
    d = 8

    def bert(prefix: str) -> dict[str, np.ndarray]:
        parts = {f"{prefix}self.{p}.{t}": rng.normal(size=(d, d) if t == "weight" else d)
                 for p in ("query", "key", "value") for t in ("weight", "bias")}
        return parts | {f"{prefix}output.dense.weight": rng.normal(size=(d, d)),
                        f"{prefix}output.dense.bias": rng.normal(size=d)}

    state = bert("encoder.encoder.layer.0.attention.") | bert("decoder.bert.encoder.layer.0.attention.")
    return dict(sorted((state | bert("decoder.bert.encoder.layer.0.crossattention.")).items()))


@pytest.mark.parametrize(("state", "first", "decoder"), [
    (transformer_state(), "encoder.layers.0.self_attn", "decoder.layers.0.self_attn"),
    (bert2bert_state(), "encoder.encoder.layer.0.attention", "decoder.bert.encoder.layer.0.attention"),
])
def test_an_encoder_decoder_is_numbered_as_the_model_runs_and_its_decoder_runs_causally(state, first, decoder):
    """nn.Transformer's layers were numbered alphabetically (layer 1 was decoder.layers.0.self_attn), and the
    decoder's self-attention ran over every key without a word."""
    from mhacli.models.state_dict import from_state_dict

    assert from_state_dict(state, layer=0).name.startswith(first)
    assert from_state_dict(state, layer=0).causal is None
    result = mhacli.run("a b c", weights=state, heads=2, layer=decoder)
    assert result.config.causal and np.all(np.triu(result.trace.weights, 1) == 0)
    assert result.notes == (f"ran the self-attention {from_state_dict(state, layer=decoder).name}, causal, as a "
                            "decoder's self-attention runs (run it with causal off to let each query see every "
                            "key).",)
    free = mhacli.run("a b c", weights=state, heads=2, layer=decoder, causal=False)
    assert not free.config.causal and "though a decoder's self-attention only ever looks at earlier tokens" in \
        free.notes[0]


@pytest.mark.parametrize(("state", "cross"), [
    (transformer_state(), "decoder.layers.0.multihead_attn"),
    (bert2bert_state(), "decoder.bert.encoder.layer.0.crossattention"),
])
def test_cross_attention_asked_by_name_is_refused_by_its_whole_name(tmp_path, state, cross):
    """The message was cut mid-name with no closing quote, where docs/your-model.md promised one naming it."""
    np.savez(tmp_path / "model.npz", **state)
    proc = mha_in_process("explain", "a b c", "--weights", "model.npz", "--heads", "2", "--layer", cross.upper(),
                          "--no-plots", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and f"'{cross}' in the weights in 'model.npz' is cross-attention (a decoder's " \
        "queries over the encoder's output, two sequences); mhacli draws self-attention over one text: pick one " \
        "of " in line, line


def test_a_long_name_that_names_no_layer_is_quoted_whole(tmp_path):
    np.savez(tmp_path / "model.npz", **transformer_state())
    typed = "encoder.layers.1.self_attn.out_proj.no_such_part"
    proc = mha_in_process("explain", "a b c", "--weights", "model.npz", "--heads", "2", "--layer", typed,
                          "--no-plots", cwd=tmp_path)
    assert f"--layer '{typed}' is not a layer of the weights in 'model.npz'" in one_error_line(proc)


def test_a_causal_model_run_over_every_key_gets_a_note():
    rng = np.random.default_rng(2)
    gpt2 = {"h.0.attn.c_attn.weight": rng.normal(size=(8, 24)), "h.0.attn.c_proj.weight": rng.normal(size=(8, 8))}
    assert mhacli.run("a b c", weights=gpt2, heads=2).notes == ()  # causal as trained: nothing to say
    said = mhacli.run("a b c", weights=gpt2, heads=2, causal=False).notes
    assert said == ("ran the self-attention of your model, over every key as asked, though the model only ever "
                    "looks at earlier tokens: its weights on later keys are ones it never used.",)


# ---------------------------------------------------------------------------
# One numbering of layers: from 0, as outputs.attentions[L] and layers.L count them
# ---------------------------------------------------------------------------

def _three_layers() -> np.ndarray:
    rng = np.random.default_rng(3)
    w = rng.random((3, 2, 4, 4))  # (L, h, N, N)
    return w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_layer_k_is_the_same_layer_in_every_function_option_and_field(tmp_path, k):
    """run(layer=1) was the first layer while from_attention(layer=1) and at_layer(1) were the second."""
    w = _three_layers()
    view = mhacli.from_attention(w, list("abcd"), layer=k)
    assert view.layer == k and np.array_equal(view.weights, w[k])
    assert np.array_equal(view.at_layer(0).at_layer(k).weights, w[k])
    state = {f"layers.{i}.self_attn.{key}": value for i in range(3)
             for key, value in _mha_layer(np.random.default_rng(i), "").items()}
    ran = mhacli.run("a b c", weights=state, heads=2, layer=k)
    assert np.array_equal(ran.trace.W_q, state[f"layers.{k}.self_attn.in_proj_weight"][:8])
    assert ran.notes[0].startswith(f"ran the self-attention layers.{k}.self_attn (layer {k} of 0–2)")
    np.savez(tmp_path / "att.npz", weights=w, tokens=np.array(list("abcd")))
    proc = mha_in_process("show", "att.npz", "--layer", str(k), "--json", "--no-plots", cwd=tmp_path)
    document = json.loads(proc.stdout)
    assert document["layer"] == k and np.allclose(document["weights"], w[k], atol=1e-6)


def test_a_layer_out_of_range_is_refused_in_the_same_numbering(tmp_path):
    w = _three_layers()
    with pytest.raises(UsageError, match=r"^layer=3 is out of range: this attention has 3 layers \(0–2\)\.$"):
        mhacli.from_attention(w, list("abcd"), layer=3)
    with pytest.raises(UsageError, match=r"^layer=5 is out of range"):
        mhacli.from_attention(w, list("abcd")).at_layer(5)
    np.savez(tmp_path / "att.npz", weights=w, tokens=np.array(list("abcd")))
    proc = mha_in_process("show", "att.npz", "--layer", "3", "--no-plots", cwd=tmp_path)
    assert one_error_line(proc) == "mha: error: --layer 3 is out of range: this attention has 3 layers (0–2)."
    one = mhacli.from_attention(w[:1], list("abcd"))
    with pytest.raises(UsageError, match=r"this attention has 1 layer \(layer 0\)"):
        one.at_layer(1)


# ---------------------------------------------------------------------------
# --json has no side effects; the smaller items
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["explain", "the cat sat"], ["compare", "the cat sat"]])
def test_a_json_run_writes_no_figures_unless_a_figure_option_asks(tmp_path, argv):
    """mha explain --json wrote seven PNGs into ./mha-output unless --no-plots was added."""
    proc = mha_in_process(*argv, "--json", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout) and sorted(tmp_path.iterdir()) == [], proc.stderr
    proc = mha_in_process(*argv, "--json", "--format", "svg", "--dpi", "30", cwd=tmp_path)
    assert proc.returncode == 0 and any((tmp_path / "mha-output").glob("*.svg")), proc.stderr
    proc = mha_in_process(*argv, "--json", "--out", "figs", "--dpi", "30", cwd=tmp_path)
    assert proc.returncode == 0 and any((tmp_path / "figs").glob("*.png")), proc.stderr


def test_a_run_without_json_still_draws_into_mha_output(tmp_path):
    proc = mha_in_process("explain", "the cat", "--dpi", "30", cwd=tmp_path)
    assert proc.returncode == 0 and (tmp_path / "mha-output" / "heads.png").is_file(), proc.stderr


def test_lines_written_to_a_file_end_without_spaces(tmp_path):
    """About 70 % of the lines of mha explain, written to a file, ended in a space (Rich pads to the width)."""
    proc = mha_in_process("explain", "the cat sat on the mat", "--no-plots", cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert len(lines) > 50 and [line for line in lines if line != line.rstrip()] == []


def test_verify_of_an_attention_file_says_what_it_holds(tmp_path):
    np.savez(tmp_path / "attention.npz", weights=np.full((2, 3, 3), 1 / 3), tokens=np.array(["a", "b", "c"]))
    proc = mha_in_process("verify", "attention.npz", cwd=tmp_path)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "it holds attention weights (your model's, which 'mha show' draws), not a " \
        "saved run: verify recomputes every step of a run" in line and "missing" not in line, line


@pytest.mark.parametrize(("argv", "said"), [
    (["explain", "--help"], ".safetensors"),
    (["explain", "--help"], "[float64|float32]"),
    (["explain", "--help"], "Your own model: mha explain \"the cat sat\" --weights enc.pt --layer 1 --heads"),
    (["show", "--help"], "Usage: mha show [OPTIONS] {FILE}"),
    (["show", "--help"], " (layers × heads × N × N) and 'tokens' (docs/your-model.md), one layer at a "),
    (["explain", "--help"], "--format is given"),
])
def test_the_help_names_what_works(tmp_path, argv, said):
    proc = mha_in_process(*argv, cwd=tmp_path, env={"COLUMNS": "80"})  # a sentence was cut at 80 columns
    assert said in proc.stdout, proc.stdout
    assert "trace_file" not in proc.stdout


def test_a_lone_decoder_layer_is_known_by_the_cross_attention_beside_it():
    """nn.TransformerDecoderLayer's state dict has no 'decoder.' in its names: its self_attn sits beside a
    multihead_attn, which only a decoder layer has."""
    rng = np.random.default_rng(7)
    layer = _mha_layer(rng, "self_attn.") | _mha_layer(rng, "multihead_attn.")
    ran = mhacli.run("a b c", weights=layer, heads=2)
    assert ran.config.causal and ran.notes == ("ran the self-attention of your model, causal, as a decoder's "
                                               "self-attention runs (run it with causal off to let each query see "
                                               "every key).",)
    alone = mhacli.run("a b c", weights=_mha_layer(rng, ""), heads=2)  # an encoder's or a lone module: as before
    assert not alone.config.causal and alone.notes == ()
