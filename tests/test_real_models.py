"""Other people's models, built by their own libraries: nn.MultiheadAttention in every variant, a 2-layer
nn.TransformerEncoder, Hugging Face BertModel and GPT2Model from a config (random weights, no download),
.pt, .safetensors and bfloat16 files.  Each is compared with the library's own attention
(``need_weights=True, average_attn_weights=False``), or refused by name.

PyTorch, transformers and safetensors are optional: their tests skip cleanly when absent.
PyTorch under a memory limit is run for real in a subprocess: the guard decides from
``ulimit -v`` before importing, so the outcome does not depend on timing or luck.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mhacli
from mhacli.attention.errors import UsageError

TEXT = "the animal did not cross the street because it was tired"
MHA = Path(sys.executable).with_name("mha")


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is optional; the numpy tests always run")


def _compare(module, t, causal: bool = False, tol: float = 1e-9) -> None:
    """The module's own output and per-head weights on the trace's X, against the trace."""
    torch = _torch()
    batch_first = getattr(module, "batch_first", False)
    x = torch.from_numpy(np.array(t.X))[None] if batch_first else torch.from_numpy(np.array(t.X))[:, None]
    mask = torch.triu(torch.ones(t.n_tokens, t.n_tokens, dtype=torch.bool), 1) if causal else None
    with torch.no_grad():
        out, w = module(x, x, x, need_weights=True, average_attn_weights=False, attn_mask=mask)
    out = out[0] if batch_first else out[:, 0]
    assert np.max(np.abs(out.numpy() - t.output)) < tol
    assert np.max(np.abs(w[0].numpy() - t.weights)) < tol


@pytest.mark.torch
@pytest.mark.parametrize("options", [dict(bias=False), dict(bias=True), dict(bias=True, batch_first=True)],
                         ids=["no-bias", "bias", "batch_first"])
def test_each_multihead_attention_that_maps_matches_pytorch(options):
    """batch_first changes only how PyTorch takes its input, never the weights: the same numbers."""
    torch = _torch()
    torch.manual_seed(3)
    module = torch.nn.MultiheadAttention(16, 4, **options).double().eval()
    if options["bias"]:
        with torch.no_grad():
            module.in_proj_bias.normal_()
            module.out_proj.bias.normal_()
    t = mhacli.run(TEXT, weights=module.state_dict(), heads=4)
    assert np.array_equal(t.W_q, module.in_proj_weight[:16].detach().numpy())
    _compare(module, t)


@pytest.mark.torch
@pytest.mark.parametrize("options,name", [(dict(add_bias_kv=True), "bias_k"),
                                          (dict(kdim=12, vdim=12), "k_proj_weight")], ids=["add_bias_kv", "kdim-vdim"])
def test_a_multihead_attention_that_does_not_map_is_refused_by_name(options, name):
    torch = _torch()
    module = torch.nn.MultiheadAttention(16, 4, **options)
    with pytest.raises(UsageError, match=f"'{name}'"):
        mhacli.run(TEXT, weights=module.state_dict(), heads=4)


@pytest.mark.torch
def test_separate_q_k_v_projections_of_width_d_match_pytorch():
    """PyTorch's own separate-projection path (use_separate_proj_weight) on the same three matrices."""
    torch = _torch()
    rng = np.random.default_rng(1)
    d, h = 12, 3
    sd = {"q_proj_weight": rng.normal(size=(d, d)), "k_proj_weight": rng.normal(size=(d, d)),
          "v_proj_weight": rng.normal(size=(d, d)), "in_proj_bias": rng.normal(size=3 * d),
          "out_proj.weight": rng.normal(size=(d, d)), "out_proj.bias": rng.normal(size=d)}
    t = mhacli.run(TEXT, weights=sd, heads=h)
    x = torch.from_numpy(np.array(t.X))[:, None]
    tensors = {k: torch.from_numpy(v) for k, v in sd.items()}
    out, w = torch.nn.functional.multi_head_attention_forward(
        x, x, x, d, h, None, tensors["in_proj_bias"], None, None, False, 0.0, tensors["out_proj.weight"],
        tensors["out_proj.bias"], training=False, need_weights=True, average_attn_weights=False,
        use_separate_proj_weight=True, q_proj_weight=tensors["q_proj_weight"],
        k_proj_weight=tensors["k_proj_weight"], v_proj_weight=tensors["v_proj_weight"])
    assert np.max(np.abs(out[:, 0].numpy() - t.output)) < 1e-9 and np.max(np.abs(w[0].numpy() - t.weights)) < 1e-9


def _encoder(tmp_path: Path):
    torch = _torch()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True, dtype=torch.float64)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    with torch.no_grad():  # the encoder copies one layer twice: make layer 2 its own (and its biases count)
        for parameter in encoder.layers[1].self_attn.parameters():
            parameter.normal_(0.0, 0.3)
    torch.save(encoder.state_dict(), tmp_path / "enc.pt")
    return encoder


@pytest.mark.torch
def test_layer_1_of_a_transformer_encoder_from_the_command_line_matches_pytorch_to_1e9(tmp_path):
    """Issue 22's done-when, counted from 0 as the module names are since issue 47: --layer 1 --heads 4."""
    from typer.testing import CliRunner

    from mhacli.cli.app import app
    from mhacli.io.export import load_trace

    encoder = _encoder(tmp_path)
    r = CliRunner().invoke(app, ["explain", TEXT, "--weights", str(tmp_path / "enc.pt"), "--layer", "1",
                                 "--heads", "4", "--no-plots", "--save-npz", str(tmp_path / "run.npz")])
    assert r.exit_code == 0, r.output
    assert "ran the self-attention layers.1.self_attn (layer 1 of 0–1)" in r.output  # the note says which
    t = load_trace(tmp_path / "run.npz")
    _compare(encoder.layers[1].self_attn, t)
    assert not np.allclose(t.W_q, encoder.layers[0].self_attn.in_proj_weight[:16].detach().numpy())


@pytest.mark.torch
def test_a_transformer_encoder_without_layer_or_heads_is_one_line_each(tmp_path):
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    _encoder(tmp_path)
    base = ["explain", TEXT, "--weights", str(tmp_path / "enc.pt"), "--no-plots"]
    for extra, words in (([], "pick one with --layer 0 to 1"), (["--layer", "1"], "give --heads"),
                         (["--heads", "4", "--layer", "2"], "--layer 2 is not a layer of")):
        r = CliRunner().invoke(app, base + extra)
        assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.torch
def test_a_bfloat16_state_dict_is_converted_on_load(tmp_path):
    torch = _torch()
    torch.manual_seed(2)
    module = torch.nn.MultiheadAttention(8, 2).to(torch.bfloat16)
    torch.save(module.state_dict(), tmp_path / "bf16.pt")
    t = mhacli.run(TEXT, weights=tmp_path / "bf16.pt", heads=2)
    assert np.array_equal(t.W_q, module.in_proj_weight[:8].detach().float().numpy())
    _compare(module.double().eval(), t)  # bfloat16 values are exact in float64


@pytest.mark.torch
def test_pytorch_s_own_warnings_about_a_file_never_reach_the_user(tmp_path):
    """A legacy file saved with pickle protocol 4 made torch.load print two lines of UserWarning first."""
    torch = _torch()
    torch.save(torch.nn.MultiheadAttention(8, 2).state_dict(), tmp_path / "legacy.pt",
               _use_new_zipfile_serialization=False, pickle_protocol=4)
    proc = subprocess.run([str(MHA), "explain", "a b", "--weights", str(tmp_path / "legacy.pt"), "--heads", "2",
                           "--no-plots"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "Warning" not in proc.stderr and "pickle protocol" not in proc.stderr
    assert proc.returncode in (0, 2) and len(proc.stderr.strip().splitlines()) <= 1, proc.stderr


@pytest.mark.torch
def test_pytorch_under_a_memory_limit_is_one_line_never_an_abort(tmp_path):
    """ulimit -v 550000: importing torch aborted the process (exit 127 or SIGABRT); now the guard refuses first."""
    _torch()
    if not Path("/bin/bash").exists() or sys.platform != "linux":
        pytest.skip("ulimit -v is a Linux shell's")
    import torch

    torch.save(torch.nn.MultiheadAttention(8, 2).state_dict(), tmp_path / "w.pt")
    mhacli.run("the cat", heads=2)  # a trace for verify
    from mhacli.io.export import save_npz

    save_npz(mhacli.run("the cat sat", heads=2), tmp_path / "t.npz")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    script = (f"ulimit -v 550000; {MHA} explain 'a b' --weights w.pt --heads 2 --no-plots; echo rc=$?; "
              f"{MHA} verify t.npz; echo rc=$?")
    proc = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    assert "rc=2" in proc.stdout and "rc=0" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.count("mha: error:") == 1 and "memory limit" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "bad_alloc" not in proc.stderr
    assert "memory limit" in proc.stdout  # verify's note says why PyTorch was not compared


def test_the_guard_turns_any_import_failure_into_one_sentence(monkeypatch):
    """Simulated: an OSError from a shared library and a MemoryError, as a failed dlopen raises them."""
    import builtins

    from mhacli.models import torch_import

    real = builtins.__import__
    for error in (OSError("libtorch_cpu.so: failed to map segment"), MemoryError()):
        def failing(name, *args, error=error, **kwargs):
            if name == "torch":
                raise error
            return real(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", failing)
        monkeypatch.setattr(torch_import, "_failure", [])
        monkeypatch.delitem(sys.modules, "torch", raising=False)
        with pytest.raises(torch_import.TorchUnavailable, match=f"cannot be imported \\({type(error).__name__}\\)"):
            torch_import.load_torch()
        assert torch_import.torch_or_none() is None
        monkeypatch.setattr(builtins, "__import__", real)


def test_safetensors_load_through_the_numpy_api(tmp_path):
    st = pytest.importorskip("safetensors.numpy", reason="safetensors is an optional extra")
    rng = np.random.default_rng(4)
    sd = {"in_proj_weight": rng.normal(size=(24, 8)), "out_proj.weight": rng.normal(size=(8, 8))}
    st.save_file(sd, str(tmp_path / "w.safetensors"))
    t = mhacli.run(TEXT, weights=tmp_path / "w.safetensors", heads=2)
    assert np.array_equal(t.W_v, sd["in_proj_weight"][16:]) and np.array_equal(t.W_o, sd["out_proj.weight"])
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(UsageError, match="not a readable .safetensors file"):
        mhacli.run(TEXT, weights=tmp_path / "bad.safetensors", heads=2)


@pytest.mark.torch
def test_bfloat16_safetensors_are_converted_through_pytorch(tmp_path):
    pytest.importorskip("safetensors", reason="safetensors is an optional extra")
    torch = _torch()
    from safetensors.torch import save_file

    module = torch.nn.MultiheadAttention(8, 2).to(torch.bfloat16)
    save_file(dict(module.state_dict()), str(tmp_path / "bf16.safetensors"))
    t = mhacli.run(TEXT, weights=tmp_path / "bf16.safetensors", heads=2)
    assert np.array_equal(t.W_k, module.in_proj_weight[8:16].detach().float().numpy())


def _transformers():
    return pytest.importorskip("transformers", reason="Hugging Face transformers is optional")


@pytest.mark.torch
def test_a_bert_model_s_layer_matches_its_own_self_attention():
    transformers = _transformers()
    torch = _torch()
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=2,
                                     intermediate_size=32, vocab_size=50, attn_implementation="eager")
    model = transformers.BertModel(config).double().eval()
    t = mhacli.run(TEXT, weights=model.state_dict(), heads=4, layer=1)
    attention = model.encoder.layer[1].attention
    with torch.no_grad():
        context, weights = attention.self(torch.from_numpy(np.array(t.X))[None])[:2]
        output = attention.output.dense(context)  # the residual and LayerNorm come after attention
    assert np.max(np.abs(weights[0].numpy() - t.weights)) < 1e-9
    assert np.max(np.abs(output[0].numpy() - t.output)) < 1e-9


@pytest.mark.torch
def test_a_gpt2_model_s_layer_matches_its_own_causal_attention():
    transformers = _transformers()
    torch = _torch()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=16, n_head=4, n_layer=2, vocab_size=50, n_positions=32,
                                     bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    model = transformers.GPT2Model(config).double().eval()
    t = mhacli.run(TEXT, weights=model.state_dict(), heads=4, layer=1)
    assert t.config.causal
    n = t.n_tokens
    mask = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), 1)[None, None]
    with torch.no_grad():
        output, weights = model.h[1].attn(torch.from_numpy(np.array(t.X))[None], attention_mask=mask)[:2]
    assert np.max(np.abs(weights[0].numpy() - t.weights)) < 1e-9
    assert np.max(np.abs(output[0].numpy() - t.output)) < 1e-9


@pytest.mark.torch
def test_hugging_face_output_attentions_show_as_a_view_with_a_batch():
    """output_attentions of a batch of two: one sequence picked with batch_index; SDPA's empty tuple explained."""
    transformers = _transformers()
    torch = _torch()
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=2,
                                     intermediate_size=32, vocab_size=50, attn_implementation="eager")
    model = transformers.BertModel(config).eval()
    ids = torch.tensor([[1, 5, 7, 2], [1, 9, 3, 2]])
    with torch.no_grad():
        attentions = model(ids, output_attentions=True).attentions
    tokens = ["[CLS]", "b", "c", "[SEP]"]
    with pytest.raises(UsageError, match="batch of 2 sequences; pick one with batch_index"):
        mhacli.from_attention(attentions, tokens)
    view = mhacli.from_attention(attentions, tokens, batch_index=1, layer=1)
    assert view.n_layers == 2 and np.allclose(view.weights, attentions[1][1].numpy(), atol=1e-7)
    with pytest.raises(UsageError, match='attn_implementation="eager"'):
        mhacli.from_attention((), tokens)


@pytest.mark.torch
def test_the_docs_end_to_end_encoder_layer_runs_and_agrees(tmp_path):
    """docs/your-model.md's 'One encoder layer, end to end' block, run as written: it prints True True."""
    _torch()
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "your-model.md").read_text(encoding="utf-8")
    section = page.split("## One encoder layer, end to end", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    proc = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "True True", proc.stdout + proc.stderr
    assert not proc.stderr, proc.stderr


@pytest.mark.torch
@pytest.mark.parametrize("content,words", [
    ("{3: torch.zeros(24, 8)}", "a key is 3 (int)"),
    ("[torch.zeros(24, 8)]", "holds a list, not a state dict"),
])
def test_a_pt_file_that_is_not_a_state_dict_of_names_is_one_line(tmp_path, content, words):
    torch = _torch()
    torch.save(eval(content, {"torch": torch}), tmp_path / "odd.pt")
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    r = CliRunner().invoke(app, ["explain", "a b", "--weights", str(tmp_path / "odd.pt"), "--heads", "2",
                                 "--no-plots"])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.torch
def test_a_missing_torch_is_not_remembered_once_it_is_back(monkeypatch):
    """An ImportError loads nothing of torch: the next import is tried again (the guard remembered it for the
    whole process, so one test simulating 'not installed' hid PyTorch from every later test in its worker)."""
    pytest.importorskip("torch", reason="needs PyTorch to come back")
    from mhacli.models import torch_import

    with monkeypatch.context() as m:
        m.setitem(sys.modules, "torch", None)
        with pytest.raises(torch_import.TorchUnavailable, match="not installed"):
            torch_import.load_torch()
    assert torch_import.load_torch() is sys.modules["torch"]
