"""Heads that share keys and values (issue 45): the sizes against hand arithmetic, and ``mha shapes``' cache."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from io import StringIO

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from mhacli.cli.app import app
from mhacli.attention.errors import UsageError
from mhacli.attention.kv import BYTES, Sharing, from_config, group_of, side_by_side

LLAMA_2_70B = {"hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 80,
               "torch_dtype": "float16", "intermediate_size": 28672, "vocab_size": 32000}
# DeepSeek-V2's attention numbers: 128 heads of width 128, a latent of 512 and a rotary key of 64 per token and layer.
DEEPSEEK_V2 = {"hidden_size": 5120, "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 60,
               "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
               "torch_dtype": "bfloat16"}
KIB, MIB, GIB = 2**10, 2**20, 2**30


@st.composite
def layers(draw: st.DrawFn) -> tuple[Sharing, int]:
    """A layer of h heads of width d_h = d/h sharing g | h key/value heads, and a number of tokens."""
    heads = draw(st.integers(1, 96))
    kv_heads = draw(st.sampled_from([g for g in range(1, heads + 1) if heads % g == 0]))
    head_dim = draw(st.integers(1, 256))
    layer = Sharing(heads * head_dim, heads, kv_heads, head_dim, draw(st.integers(1, 128)),
                    draw(st.sampled_from(sorted(BYTES))))
    return layer, draw(st.integers(1, 200_000))


@given(layers(), st.integers(1, 4096))
def test_parameters_are_the_four_matrices_sizes(drawn, width):
    layer, _ = drawn
    for shown in (layer, replace(layer, d_model=width)):  # d = h·d_h, and a config's d apart from h·d_h
        d, h, g, dh = shown.d_model, shown.heads, shown.kv_heads, shown.head_dim
        # W_q (h·d_h, d), W_k and W_v (g·d_h, d), W_o (d, h·d_h) in PyTorch's layout: their entries, counted.
        shapes = [(h * dh, d), (g * dh, d), (g * dh, d), (d, h * dh)]
        assert shown.parameters == sum(rows * cols for rows, cols in shapes)
    d, h, g = layer.d_model, layer.heads, layer.kv_heads
    # The issue's closed forms, exactly: MHA 4d², GQA 2d²(1 + g/h), MQA 2d²(1 + 1/h).
    assert layer.parameters * h == 2 * d * d * (h + g)
    assert layer.with_kv_heads(h).parameters == 4 * d * d
    assert layer.with_kv_heads(1).parameters * h == 2 * d * d * (h + 1)


@given(layers())
def test_the_cache_is_every_layers_keys_and_values(drawn):
    layer, n = drawn
    # Each layer keeps K and V of shape (g, N, d_h): 2·g·N·d_h numbers of b bytes, times L layers.
    per_layer = 2 * math.prod((layer.kv_heads, n, layer.head_dim))
    assert layer.cache_per_sequence(n) == layer.layers * per_layer * BYTES[layer.dtype]
    assert layer.cache_per_token * n == layer.cache_per_sequence(n)
    assert layer.with_kv_heads(layer.heads).cache_per_token == 2 * layer.layers * layer.d_model * BYTES[layer.dtype]


@given(layers())
def test_sharing_shrinks_the_kv_projections_only(drawn):
    layer, n = drawn
    d, h, g, dh = layer.d_model, layer.heads, layer.kv_heads, layer.head_dim
    mha = layer.with_kv_heads(h)
    assert layer.attention_madds(n) == mha.attention_madds(n) == 2 * h * n * n * dh  # Q·Kᵀ and A·V, h·N²·d_h each
    assert mha.kv_projection_madds(n) == 2 * n * d * d
    assert layer.kv_projection_madds(n) == 2 * n * d * g * dh


@given(st.integers(1, 64).flatmap(lambda h: st.tuples(st.just(h), st.sampled_from(
    [g for g in range(1, h + 1) if h % g == 0]))))
def test_each_group_is_read_by_h_over_g_neighbouring_query_heads(hg):
    h, g = hg
    groups = [group_of(i, h, g) for i in range(h)]
    assert groups == sorted(groups) and set(groups) == set(range(g))
    assert all(groups.count(j) == h // g for j in range(g))


def test_llama_2_70b_from_its_config_values():
    layer = from_config(LLAMA_2_70B)
    mha = layer.with_kv_heads(layer.heads)
    assert (layer.cache_per_token, mha.cache_per_token) == (320 * KIB, 5 * MIB // 2)
    assert (layer.cache_per_sequence(4096), mha.cache_per_sequence(4096)) == (5 * GIB // 4, 10 * GIB)
    assert (round(layer.parameters / 1e6, 1), round(mha.parameters / 1e6, 1)) == (151.0, 268.4)
    assert [s.name for s in side_by_side(layer)] == ["MHA", "GQA", "MQA"]


def test_deepseek_v2s_latent_is_576_numbers_against_32768():
    layer = from_config(DEEPSEEK_V2)
    assert layer.latent_numbers == 576 and layer.cache_numbers == 32_768
    assert layer.latent_per_token == 60 * 576 * 2


@pytest.mark.parametrize(("config", "words"), [
    ({**LLAMA_2_70B, "num_key_value_heads": 7}, "num_key_value_heads 7 does not divide"),
    ({"num_attention_heads": 8, "num_hidden_layers": 2}, "no hidden_size"),
    ({**LLAMA_2_70B, "num_hidden_layers": "80"}, "num_hidden_layers must be a whole number"),
    ({**LLAMA_2_70B, "num_attention_heads": 0}, "num_attention_heads must be a whole number"),
    ({**LLAMA_2_70B, "num_attention_heads": 48}, "not divisible by num_attention_heads 48"),
    ({**LLAMA_2_70B, "torch_dtype": "complex64"}, "torch_dtype 'complex64' is not one of"),
])
def test_a_config_that_cannot_be_read_is_refused_by_its_key(config, words):
    with pytest.raises(UsageError, match=words):
        from_config(config)


def test_a_config_in_transformers_newer_words():
    """``dtype`` instead of ``torch_dtype``, written as torch prints it; no num_key_value_heads: MHA."""
    layer = from_config({"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
                         "dtype": "torch.bfloat16"})
    assert (layer.kv_heads, layer.head_dim, layer.dtype, layer.name) == (32, 128, "bfloat16", "MHA")
    assert from_config(LLAMA_2_70B, dtype="float32").cache_per_token == 640 * KIB  # a given dtype wins


def test_g_must_divide_h():
    with pytest.raises(UsageError, match="kv_heads 3 must divide heads 8.*1, 2, 4, 8"):
        Sharing(64, 8, 3, 8)


# --------------------------------------------------------------------------
# mha shapes
# --------------------------------------------------------------------------

ENV = {"NO_COLOR": "1", "TERM": "dumb"}


@pytest.fixture()
def llama(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_2_70B))
    return path


def test_shapes_reproduces_llama_2_70b(runner, llama):
    out = runner.invoke(app, ["shapes", "--config", str(llama), "--tokens", "4096"], env={**ENV, "COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    cache = next(line for line in out.stdout.splitlines() if line.strip().startswith("KV cache per token"))
    assert cache.split()[-6:] == ["2.5", "MiB", "320", "KiB", "40", "KiB"]
    sequence = next(line for line in out.stdout.splitlines() if line.strip().startswith("KV cache for 4,096"))
    assert sequence.split()[-6:] == ["10", "GiB", "1.25", "GiB", "160", "MiB"]
    params = next(line for line in out.stdout.splitlines() if line.strip().startswith("parameters per layer"))
    assert params.split()[-6:] == ["268.4", "M", "151.0", "M", "136.3", "M"]
    assert all(len(line) <= 80 for line in out.stdout.splitlines())


def test_shapes_json_carries_the_cache_in_bytes(runner, llama):
    out = runner.invoke(app, ["shapes", "--config", str(llama), "--tokens", "4096", "--json"])
    assert out.exit_code == 0, out.output
    kv = json.loads(out.stdout)["kv"]
    assert (kv["kv_heads"], kv["layers"], kv["dtype"], kv["latent"]) == (8, 80, "float16", None)
    by_name = {s["name"]: s for s in kv["sharings"]}
    assert by_name["GQA"]["cache_bytes_per_token"] == 327_680 and by_name["MHA"]["cache_bytes_per_token"] == 2_621_440
    assert by_name["GQA"]["cache_bytes_per_sequence"] == 1_342_177_280
    assert by_name["MHA"]["cache_bytes_per_sequence"] == 10_737_418_240


def test_options_override_the_config(runner, llama):
    out = runner.invoke(app, ["shapes", "--config", str(llama), "--json", "--kv-heads", "1", "--layers", "2",
                              "--dtype", "float32"])
    kv = json.loads(out.stdout)["kv"]
    assert (kv["kv_heads"], kv["layers"], kv["dtype"]) == (1, 2, "float32")
    assert [s["name"] for s in kv["sharings"]] == ["MHA", "MQA"]
    assert kv["sharings"][1]["cache_bytes_per_token"] == 2 * 2 * 1 * 128 * 4


def test_a_latent_config_shows_its_cache_without_the_step_table(runner, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V2))
    out = runner.invoke(app, ["shapes", "--config", str(path), "--tokens", "4096"], env={**ENV, "COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert "Steps" not in out.stdout
    assert "512 + 64 = 576 numbers per token and layer against MHA's 2·h·d_h = 32,768" in " ".join(out.stdout.split())


def test_without_the_new_options_shapes_is_as_before(runner):
    plain = runner.invoke(app, ["shapes", "--json"])
    assert "kv" not in json.loads(plain.stdout)
    shared = runner.invoke(app, ["shapes", "--kv-heads", "2"], env={**ENV, "COLUMNS": "80"})
    assert runner.invoke(app, ["shapes"], env={**ENV, "COLUMNS": "80"}).stdout in shared.stdout


def test_shapes_kv_heads_markdown(runner):
    out = runner.invoke(app, ["shapes", "--d-model", "16", "--heads", "4", "--kv-heads", "2", "--markdown"])
    assert out.exit_code == 0, out.output
    assert "| KV cache per token | 64 bytes | 32 bytes | 16 bytes |" in out.stdout  # 2·1·g·4·2 bytes, g = 4, 2, 1


@pytest.mark.parametrize(("args", "words"), [
    (["--heads", "8", "--d-model", "64", "--kv-heads", "3"], "--kv-heads 3 must divide --heads 8"),
    (["--kv-heads", "0"], "--kv-heads"),
    (["--layers", "0"], "--layers"),
    (["--dtype", "float12"], "--dtype must be one of"),
    (["--config", "missing.json"], "--config 'missing.json' does not exist"),
    (["--config", "bad.json"], "--config 'bad.json' is not JSON"),
    (["--config", "list.json"], "'list.json' holds an array, not a JSON object"),
    (["--config", "null.json"], "'null.json' holds null, not a JSON object"),
    (["--config", "small.json"], "'small.json': the config has no hidden_size"),
    (["--config", "ok.json", "--heads", "4"], "--config sets d and h from the model's config.json; drop --heads"),
])
def test_bad_options_and_configs_are_one_line_and_exit_2(runner, tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{hidden_size: 1")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "null.json").write_text("null")
    (tmp_path / "small.json").write_text('{"num_attention_heads": 2}')
    (tmp_path / "ok.json").write_text(json.dumps(LLAMA_2_70B))
    out = runner.invoke(app, ["shapes", *args], env=ENV)
    assert out.exit_code == 2, out.output
    assert words in " ".join(out.stderr.split()) and "Traceback" not in out.output
    assert out.stdout == ""


@pytest.mark.parametrize("width", [80, 40])
def test_the_sharing_table_fits(width):
    from mhacli.attention.kv import sized_side_by_side
    from mhacli.render.kv import sharing_view

    console = Console(file=StringIO(), width=width, color_system=None)
    for layer in (from_config(LLAMA_2_70B), from_config(DEEPSEEK_V2), Sharing(16, 4, 2, 4, 1)):
        console.print(sharing_view(sized_side_by_side(layer, 4096)))
    lines = console.file.getvalue().splitlines()
    assert lines and all(len(line) <= width for line in lines)


def test_binary_sizes_read_as_the_issue_writes_them():
    from mhacli.render.kv import binary_size

    assert [binary_size(n) for n in (320 * KIB, 5 * MIB // 2, 5 * GIB // 4, 10 * GIB, 1000)] == \
        ["320 KiB", "2.5 MiB", "1.25 GiB", "10 GiB", "1,000 bytes"]


def test_the_steps_page_quotes_mha_shapes_own_output(runner, tmp_path, monkeypatch):
    """docs/steps.md shows the cache of Llama 2 70B: the block is what the command prints at 80 columns."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "steps.md").read_text(encoding="utf-8")
    config = re.search(r"echo '(\{.*?\})' > llama-2-70b.json", page, re.S)[1]
    quoted = page.split("```\nShared keys and values", 1)[1].split("```", 1)[0]
    quoted = ("Shared keys and values" + quoted).rstrip("\n").splitlines()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llama-2-70b.json").write_text(config)
    out = runner.invoke(app, ["shapes", "--config", "llama-2-70b.json", "--tokens", "4096"],
                        env={**ENV, "COLUMNS": "80"})
    lines = [line.rstrip() for line in out.stdout.splitlines()]
    assert lines[lines.index(quoted[0]):][:len(quoted)] == quoted
