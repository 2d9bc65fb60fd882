"""One pipeline assembles a run (mhacli/pipeline.py): weights resolved once, Config built once, one frozen result.

The commands only connect: they parse options, call the pipeline, hand its result to the renderers and write.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import mhacli
from mhacli.cli.app import COMMANDS, app
from mhacli.pipeline import Run, prepare, result_of

PACKAGE = Path(__file__).resolve().parent.parent / "mhacli"
CAT = "the cat sat on the mat"


def test_run_returns_one_frozen_result_with_every_part():
    result = mhacli.run(CAT, heads=2, causal=True)
    assert isinstance(result, Run)
    assert result.config is result.trace.config and result.config.heads == 2
    assert result.analysis.num_heads == 2 and result.analysis.tokens == result.trace.tokens
    # The mask the renderers draw is the analysis' (True = blocked), the same as the trace's causal mask.
    np.testing.assert_array_equal(result.analysis.mask, np.triu(np.ones((6, 6), dtype=bool), k=1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.trace = None  # type: ignore[misc]
    assert not result.trace.weights.flags.writeable


def test_a_trace_written_before_the_result_still_reads_through():
    trace = mhacli.run(CAT)  # `trace = mhacli.run(...)` as the README had it
    assert trace.weights is trace.trace.weights and trace.tokens == tuple(CAT.split())
    assert trace.num_heads == 4 and "<mhacli Trace" in repr(trace)
    with pytest.raises(AttributeError):
        trace.no_such_attribute  # noqa: B018


def test_the_single_head_and_the_comparison_come_with_the_result_when_asked():
    prepared = prepare(CAT, heads=2)
    plain = prepared.run()
    assert plain.single is None and plain.comparison is None
    both = prepared.run(compare=True)
    assert both.single is not None and both.single.num_heads == 1
    assert both.comparison is not None and both.analysis is both.comparison.analysis


def test_tokens_can_be_given_instead_of_text():
    result = mhacli.run(tokens=["a", "b", "a"], heads=2, d_model=8)
    assert result.trace.tokens == ("a", "b", "a") and result.config.d_model == 8


def test_a_saved_trace_and_a_view_get_the_same_kind_of_result():
    from mhacli.measures.view import from_attention

    trace = mhacli.run(CAT, heads=2).trace
    again = result_of(trace, single=True)
    assert again.trace is trace and again.single is not None and again.analysis.num_heads == 2
    w = np.full((2, 2, 3, 3), 1 / 3)
    view = result_of(from_attention(w, ["a", "b", "c"]), layers=True)
    assert view.config is None and view.layers is not None and len(view.layers) == 2


def test_weights_are_resolved_once_and_the_config_built_once_per_command(monkeypatch, tmp_path):
    import mhacli.attention.config as config
    import mhacli.models.weights as weights

    resolved, built = [], []
    real_resolve, real_post_init = weights.resolve_weights, config.Config.__post_init__
    monkeypatch.setattr(weights, "resolve_weights", lambda v, **kw: resolved.append(v) or real_resolve(v, **kw))
    monkeypatch.setattr(config.Config, "__post_init__", lambda self: built.append(self) or real_post_init(self))
    r = CliRunner().invoke(app, ["explain", CAT, "--weights", "trained", "--no-plots", "--quiet"])
    assert r.exit_code == 0, r.output
    assert resolved == ["trained"]
    # The run's Config once; the others are the trained model's own TrainConfig checking its shared
    # fields (heads, d_model, seed) through Config's one validation.
    assert [c.weights for c in built if c.weights == "trained"] == ["trained"]
    assert all(c.weights == "random" for c in built if c.weights != "trained")


def test_the_model_option_block_hands_a_command_only_what_was_given():
    """None is "not given": the block reaches the command as one ModelOptions, the default never passed on."""
    from mhacli.cli.options import MODEL_BLOCK, model_block
    from mhacli.request import ModelOptions

    seen = []

    @model_block("heads", "causal", "weights")
    def command(model: ModelOptions = None, quiet: bool = False) -> None:  # type: ignore[assignment]
        seen.append((model, quiet))

    probe = typer.Typer()
    probe.command()(command)
    for argv, given in ((["--heads", "2"], {"heads": 2}), ([], {}), (["--no-causal", "-w", "designed"],
                                                                    {"causal": False, "weights": "designed"})):
        assert CliRunner().invoke(probe, argv).exit_code == 0
        assert seen[-1][0].given() == given and seen[-1][1] is False
    assert CliRunner().invoke(probe, ["--d-model", "8"]).exit_code == 2  # not an option of this command
    assert {f.name for f in dataclasses.fields(ModelOptions)} == set(MODEL_BLOCK)


def test_a_request_runs_as_keyword_options_do():
    """mhacli.run(request) and mhacli.run(text, **options) are one run, through one prepare."""
    from mhacli.request import ModelOptions, Request

    by_request = mhacli.run(Request(model=ModelOptions(heads=2, seed=3), text=CAT))
    by_options = mhacli.run(CAT, heads=2, seed=3)
    np.testing.assert_array_equal(by_request.trace.weights, by_options.trace.weights)
    assert by_request.config == by_options.config and by_request.config.heads == 2
    with pytest.raises(TypeError, match="request alone"):
        mhacli.run(Request(text=CAT), heads=2)  # type: ignore[arg-type]


def test_a_request_is_frozen_and_checked_when_built():
    from mhacli.cli.flow import request
    from mhacli.attention.errors import UsageError

    asked = request(text=CAT, fmt="PNG", dpi=72)
    assert asked.outputs.fmt == "png" and asked.outputs.dpi == 72 and asked.text == CAT
    with pytest.raises(dataclasses.FrozenInstanceError):
        asked.outputs.dpi = 100  # type: ignore[misc]
    for bad in (dict(fmt="bmp"), dict(dpi=5), dict(json_arrays=False), dict(query="9" * 5000)):
        with pytest.raises(UsageError):
            request(text=CAT, **bad)  # type: ignore[arg-type]
    assert request(text=CAT, max_tokens=None).outputs.page_max_tokens is None  # the page keeps its own default


def _body_lines(function: ast.FunctionDef) -> int:
    """Lines of a function's body, its docstring left out (a command's signature is its option list)."""
    body = function.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1


COMMAND_LINES = 15  # a command builds its request and hands it on: issue 30's target


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.__name__)
def test_every_command_only_connects(command):
    import inspect

    source = Path(inspect.unwrap(command).__code__.co_filename)
    tree = ast.parse(source.read_text(encoding="utf-8"))
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == command.__name__)
    assert _body_lines(function) <= COMMAND_LINES, f"mha {command.__name__} has {_body_lines(function)} lines"


def test_the_length_check_counts_a_long_command():
    long = ast.parse("def explain(text=None):\n    \"\"\"Doc.\"\"\"\n" + "    x = 1\n" * 16)
    assert _body_lines(long.body[0]) == 16 > COMMAND_LINES  # type: ignore[arg-type]


def _context_reads(tree: ast.AST) -> list[int]:
    """Lines where a ``ctx`` (click's context) is read: how an option was set is never asked of it."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "ctx" and n.attr in ("get_parameter_source", "params", "meta", "obj")]


def test_no_command_asks_click_how_an_option_was_given():
    """None means "not given" (the model-option block, --max-tokens, --json-arrays, bench's layer options)."""
    for path in sorted((PACKAGE / "cli").rglob("*.py")):
        assert not _context_reads(ast.parse(path.read_text(encoding="utf-8"))), path.name
    planted = ast.parse("def f(ctx):\n    return ctx.get_parameter_source('heads')\n")
    assert _context_reads(planted) == [2]


def test_no_command_reads_options_back_by_name_or_carries_state_in_the_context():
    for path in sorted((PACKAGE / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("params", "meta", "obj"):
                assert not (isinstance(node.value, ast.Name) and node.value.id == "ctx"), (
                    f"{path.name}:{node.lineno} reads ctx.{node.attr}")


def test_only_the_pipeline_assembles_a_run():
    """run_tokens (the core's computation of a trace) is called by the pipeline, and by io for a trained model's
    fixed run; nowhere else in the package does a command or a renderer put a run together."""
    callers = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
                    "run_tokens", "resolve_weights"):
                callers.add(str(path.relative_to(PACKAGE)))
    assert callers <= {"pipeline.py", "attention/trace.py", "models/trained.py", "measures/worked.py"}, callers


@pytest.mark.parametrize("fields", [dict(heads=3, d_model=16), dict(heads=0, d_model=16), dict(heads=32, d_model=16),
                                    dict(heads=2, d_model=16, seed=-1)])
def test_explain_train_and_bench_share_one_validation_of_their_fields(fields):
    """heads, d_model (and seed) are checked by Config's one validation, in its words, wherever they are given."""
    from mhacli.bench.runner import Settings
    from mhacli.attention.config import Config
    from mhacli.attention.errors import UsageError
    from mhacli.grammar.model import TrainConfig

    messages = set()
    for make in (Config, TrainConfig, lambda **given: Settings(**given).check()):
        with pytest.raises(UsageError) as refused:
            make(**fields)
        messages.add(refused.value.for_cli())
    assert len(messages) == 1, messages


def test_each_kind_of_weights_is_one_source_class():
    """run_tokens asks one WeightSource per kind for its inputs: the class follows from the Config and the weights."""
    from types import SimpleNamespace

    from mhacli.attention.config import Config
    from mhacli.attention.errors import UsageError
    from mhacli.attention.trace import (DesignedWeights, Inputs, OwnWeights, RandomWeights, TrainedWeights,
                                        run_tokens, source_for)
    from mhacli.models.state_dict import AttentionWeights

    assert type(source_for(Config())) is RandomWeights
    assert type(source_for(Config(weights="designed"))) is DesignedWeights
    random = run_tokens(["a", "b", "c"], Config(heads=2, d_model=8))
    mine = AttentionWeights(np.asarray(random.W_q), np.asarray(random.W_k), np.asarray(random.W_v),
                            np.asarray(random.W_o), heads=2)
    assert type(source_for(Config(d_model=8), weights=mine)) is OwnWeights
    # your weights over the same toy embedding give the same trace as the random weights they were copied from
    again = run_tokens(["a", "b", "c"], Config(heads=2, d_model=8, weights="pytorch"), weights=mine)
    np.testing.assert_array_equal(again.weights, random.weights)
    e, p = np.asarray(random.embeddings), np.asarray(random.positions)
    model = SimpleNamespace(run_inputs=lambda tokens: Inputs(e, p, mine.w_q, mine.w_k, mine.w_v, mine.w_o,
                                                             rules=("first", "second")))
    assert type(source_for(Config(d_model=8), model=model)) is TrainedWeights
    trained = run_tokens(["a", "b", "c"], Config(heads=2, d_model=8, weights="trained"), model=model)
    np.testing.assert_array_equal(trained.weights, random.weights)
    assert trained.rules == ("first", "second")
    assert not hasattr(trained, "parse") and not hasattr(trained, "mapped")  # the grammar's reading is the Run's
    with pytest.raises(UsageError, match="needs a trained model file"):
        source_for(Config(weights="trained"))


def test_the_windows_carry_their_queries_ranked_and_the_page_its_first():
    """The magnifiers and the page read which queries to show from the pipeline: every query of the window,
    once, and the page opens on the first of its own window's ranking."""
    from mhacli.pipeline import paged, shown

    result = prepare(" ".join(f"w{i % 7}" for i in range(30)), heads=4).run(single=True)
    for max_tokens, query in ((40, None), (8, None), (8, 25)):
        windows = shown(result, max_tokens, query)
        for window in (windows.figures, windows.magnified):
            assert window is not None
            inside = range(window.view.start, window.view.stop)
            assert sorted(window.showcase) == list(inside) or set(window.showcase) < set(inside)
            assert len(set(window.showcase)) == len(window.showcase) > 0
    for max_tokens in (1, 5, 200):
        page = paged(result, max_tokens).page
        assert page is not None and 0 <= page.start_query < min(30, max_tokens)


def _exits(tree: ast.AST) -> list[str]:
    """The functions of ``tree`` that end the process themselves (``sys.exit``)."""
    return [f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "exit"
            and getattr(n.func.value, "id", None) == "sys"]


def test_one_exit_path():
    """Every run ends in MhaGroup.main (as httpie's raw_main): the console script only runs it as the process."""
    found = [name for path in sorted((PACKAGE / "cli").rglob("*.py"))
             for name in _exits(ast.parse(path.read_text(encoding="utf-8")))]
    assert found == ["main"]  # MhaGroup.main; the module-level main() makes no exit of its own
    assert _exits(ast.parse("import sys\ndef main():\n    sys.exit(2)\n")) == ["main"]  # the check can see one
    result = CliRunner().invoke(app, ["explain", "the cat", "--heads", "3"])
    assert result.exit_code == 2 and "not divisible" in result.output
