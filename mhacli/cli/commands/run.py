"""The commands that run attention or read a saved run: explain, show, compare, verify, each with its flow."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mhacli.attention.errors import UsageError
from mhacli.cli import flow
from mhacli.cli.flow import (finish_run, open_figures, plan_outputs, plan_request, prepare_run, publish, query_position,
                             read_files, shown_folder)
from mhacli.cli.options import (BatchIndexOpt, DpiOpt, FiguresFormatOpt, FiguresOutOpt, FileOpt, HideRulesOpt,
                                HtmlOpt, JsonArraysOpt, JsonOpt, LayerOpt, MaxTokensOpt, NumbersJsonOpt, PlotsOpt,
                                QueryOpt, QuietOpt, RawTokensOpt, SampleOpt, SaveNpzOpt, ShowFileArg, ShowValuesOpt,
                                TextArg, TraceArg, VerifyQuietOpt, WorkedOpt, model_block)
from mhacli.cli.output import console, json_document, json_text, print_all, report_written, set_quiet, write_stdout
from mhacli.request import DPI, ModelOptions  # the type of the model-option block, read by model_block at import

if TYPE_CHECKING:
    from mhacli.measures.analysis import Analysis
    from mhacli.measures.view import AttentionView
    from mhacli.io.outputs import OutputPlan
    from mhacli.pipeline import Run
    from mhacli.request import Outputs, Request


@model_block()
def explain(
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    model: ModelOptions = None,  # type: ignore[assignment]  # the model-option block (options.MODEL_BLOCK)
    show_values: ShowValuesOpt = False,
    worked: WorkedOpt = False,
    save_npz: SaveNpzOpt = None,
    json_out: JsonOpt = False,
    json_arrays: JsonArraysOpt = None,
    max_tokens: MaxTokensOpt = None,
    html: HtmlOpt = None,
    quiet: QuietOpt = False,
    out: FiguresOutOpt = None,
    plots: PlotsOpt = True,
    fmt: FiguresFormatOpt = None,
    dpi: DpiOpt = DPI,
    query: QueryOpt = None,
    hide_rules: HideRulesOpt = False,
) -> None:
    """Walk through multi-head attention on TEXT, step by step.

    Tokenizes the text, embeds it, runs real multi-head attention and prints
    every step with its formula, shape and cost, then where each head looks.

    Example: [bold]mha explain "The animal didn't cross the street because it was too tired" --heads 4[/bold]

    Your own model: [bold]mha explain "the cat sat" --weights enc.pt --layer 1 --heads 4[/bold]
    """
    _explain(flow.request(figures=True, **locals()))


def show(
    trace_file: ShowFileArg,
    max_tokens: MaxTokensOpt = None,
    show_values: ShowValuesOpt = False,
    json_out: JsonOpt = False,
    json_arrays: JsonArraysOpt = None,
    html: HtmlOpt = None,
    quiet: QuietOpt = False,
    out: FiguresOutOpt = None,
    plots: PlotsOpt = True,
    fmt: FiguresFormatOpt = None,
    dpi: DpiOpt = DPI,
    query: QueryOpt = None,
    layer: LayerOpt = None,
    hide_rules: HideRulesOpt = False,
    batch_index: BatchIndexOpt = None,
    raw_tokens: RawTokensOpt = False,
) -> None:
    """Re-render the walkthrough and the figures from a saved .npz, without recomputing attention.

    Also draws your own model's attention, saved as an npz of 'weights'
    (layers × heads × N × N) and 'tokens' (docs/your-model.md), one layer at a
    time (--layer, counted from 0 as outputs.attentions is).

    Example: [bold]mha explain "the cat sat on the mat" --save-npz cat.npz && mha show cat.npz --html cat.html[/bold]
    """
    options = {k: v for k, v in locals().items() if k not in ("trace_file", "layer", "batch_index", "raw_tokens")}
    _show(flow.request(read_text=False, figures=True, **options), trace_file, layer, batch_index, raw_tokens)


@model_block("heads", "d_model", "seed", "tokenizer", "positions", "causal", "weights", "layer", "words", "kv_heads")
def compare(
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    model: ModelOptions = None,  # type: ignore[assignment]  # the model-option block (options.MODEL_BLOCK)
    max_tokens: MaxTokensOpt = None,
    json_out: NumbersJsonOpt = False,
    quiet: QuietOpt = False,
    out: FiguresOutOpt = None,
    plots: PlotsOpt = True,
    fmt: FiguresFormatOpt = None,
    dpi: DpiOpt = DPI,
    hide_rules: HideRulesOpt = False,
) -> None:
    """One magnifier against h: a single head of size d beside h heads of size d/h.

    Same text, embedding, seed and weight matrices; prints, for each token, what
    each of the h heads brings back most against what the single head brings
    back (h heads make h blends per token, one head one), how spread each head's
    attention is (mean row entropy, in bits) and how different the heads are
    (mean pairwise Jensen–Shannon divergence), and saves single-vs-multi.png.

    With --weights trained the single head is one trained alone on the same
    task, with as many parameters, beside the heads trained together.

    Example: [bold]mha compare "the cat sat on the mat" --heads 4[/bold]
    """
    _compare(flow.request(figures=True, **locals()))


def verify(trace_file: TraceArg, json_out: NumbersJsonOpt = False, quiet: VerifyQuietOpt = False) -> None:
    """Recompute a saved .npz independently and print the largest difference of each array.

    Uses a plain per-head loop, and PyTorch's multi_head_attention_forward when
    PyTorch is installed. Exits with 1 if any difference exceeds the tolerance
    (1e-9 for float64).

    Example: [bold]mha verify cat.npz[/bold]
    """
    set_quiet(quiet)
    _verify(trace_file, json_out)


def _walkthrough(result: Run, outputs: Outputs, position: int | None, figures_at: Path | None) -> None:
    """Every step of the run, then where each head looks (the grids name the figures' folder)."""
    from mhacli.pipeline import shown
    from mhacli.render.grid import head_grids
    from mhacli.render.terminal import walkthrough

    trace, analysis, hide = result.trace, result.analysis, outputs.hide_rules
    assert result.split_diff is not None  # a run of the tool (a view has no walkthrough)
    print_all(*walkthrough(trace, analysis, result.split_diff, max_tokens=outputs.max_tokens,
                           show_values=outputs.show_values, width=console.width, hide_rules=hide))
    console.print()
    view = shown(result, outputs.max_tokens, position).figures.view  # type: ignore[union-attr]
    console.print(head_grids(trace, analysis, width=console.width, view=view, figures_at=shown_folder(figures_at),
                             hide_rules=hide))
    console.print()


def _print_json(result: Run, arrays: bool) -> None:
    from mhacli.io.export import trace_document

    write_stdout(json_text(trace_document(result, arrays=arrays)) + "\n")


def _worked(request: Request, plan_inputs: list[tuple[str, object]]) -> tuple[Run, OutputPlan]:
    """explain --worked: the hand-sized example (--seed and --causal apply), as a run of its own."""
    from mhacli.attention.config import Config
    from mhacli.measures.worked import HEADS, worked_example
    from mhacli.pipeline import result_of

    options = {k: v for k, v in request.model.given().items() if k not in ("weights", "layer", "words")}
    config = Config(**options)  # the options given, checked by Config's one validation
    trace = worked_example(config.seed, config.causal)
    plan = plan_request(request, HEADS, plan_inputs)
    open_figures(plan, trace.config, trace.n_tokens, request.outputs.max_tokens, request.outputs.fmt,
                 request.outputs.dpi)
    return result_of(trace, single=plan.out is not None), plan


def _explain(request: Request) -> None:
    """``mha explain``: the walkthrough (or --worked, or --json), the grammar's card, then the files."""
    o = request.outputs
    set_quiet(o.quiet)
    inputs = read_files(request.source.file, request.model.weights)
    if request.worked:
        result, plan = _worked(request, inputs)
    else:
        prepared = prepare_run(request.text or "", request.model.given(), json=o.json and o.json_arrays)
        plan = plan_request(request, prepared.config.heads, inputs)
        # Refuse what would not fit before any array exists, the figures' pixels included.
        open_figures(plan, prepared.config, prepared.n_tokens, o.max_tokens, o.fmt, o.dpi)
        result = finish_run(prepared, single=plan.out is not None)
    position = query_position(result.trace, o.query)
    if o.json:
        _print_json(result, o.json_arrays)
    elif request.worked:
        from mhacli.render.worked import worked_view

        print_all(*worked_view(result.trace))
    else:
        from mhacli.render.card import explain_card  # a grammar model's report card, once (issue 28)

        _walkthrough(result, o, position, plan.out)
        print_all(*explain_card(None if o.hide_rules else result.card))
    publish(result, o, plan, position)


def _pick_layer(path: Path, layer: str | None, batch_index: int | None = None,
                raw_tokens: bool = False) -> AttentionView:
    """The attention file's view at ``--layer``: a number (0 = first) or one of its layer names (``raw_tokens``:
    its tokens as the tokenizer wrote them, markers and all)."""
    from mhacli.attention.checks import layer_index
    from mhacli.attention.messages import shown, shown_path
    from mhacli.attention.numbers import RULE, looks_numeric, too_big, whole_number
    from mhacli.models.attention_file import load_attention

    # read and checked once; a layer is picked from it, never by reading again
    view = load_attention(path, batch_index=batch_index, raw_tokens=raw_tokens)
    if layer is None:
        return view
    text, index = layer.strip(), layer_index(layer, view.layer_names)  # the one rule, as explain's --layer
    if index is not None or whole_number(text) is not None:
        return view.at_layer(whole_number(text) if index is None else index)  # type: ignore[arg-type]
    names = ", ".join(view.layer_names[:8]) + (", …" if view.n_layers > 8 else "")
    if looks_numeric(text) and not too_big(text):  # '²', '+-2': meant as a number, so say the rule
        raise UsageError(f"--layer must be {RULE} from 0 to {view.n_layers - 1}, or a layer's name "
                         f"({names}); got {shown(text)}.")
    raise UsageError(f"--layer {shown(text)} is not a layer of {shown_path(path)}; give a number from 0 to "
                     f"{view.n_layers - 1} or one of its names: {names}.")


def _view_json(view: AttentionView, analysis: Analysis) -> str:
    """The shown layer of a view as one JSON document: tokens, weights and the per-query measures."""
    document = {"kind": "attention", "source": view.source, "layer": view.layer,
                "layer_names": list(view.layer_names), "tokens": list(view.tokens), "causal": view.causal,
                "kv_heads": view.kv_heads,  # g key/value groups (h unless the file or from_attention said otherwise)
                "head_names": list(view.head_names) if view.head_names else None,
                "weights": view.weights.tolist(), **analysis.to_dict()}
    return json_document("view", document)


def _show_attention(request: Request, path: Path, layer: str | None, batch_index: int | None,
                    raw_tokens: bool = False) -> None:
    """``mha show`` of your model's attention: the grids, the figures and the page of one layer."""
    from mhacli.attention.messages import layer_of
    from mhacli.pipeline import result_of, shown
    from mhacli.render.figures import resolve_query

    o = request.outputs
    if o.show_values:
        raise UsageError("--show-values prints a run's matrices; an attention file holds only the weights "
                         "(drop --show-values).")
    view = _pick_layer(path, layer, batch_index, raw_tokens)
    plan = plan_request(request, view.num_heads, [("the attention file", path)], split=False)
    position = resolve_query(view.tokens, o.query)
    if plan.out is not None and plan.figures:
        from mhacli.io.files import prepare_out_dir
        from mhacli.render.sizes import check_figures_fit

        check_figures_fit(view.num_heads, min(view.n_tokens, o.max_tokens), o.dpi, o.fmt, besides=view.layers.nbytes)
        prepare_out_dir(plan.out)
    result = result_of(view, layers=plan.html is not None)  # once: the JSON or the grids, figures and page read it
    if o.json:
        write_stdout(_view_json(view, result.analysis) + "\n")
    else:
        from mhacli.render.grid import head_grids

        console.print(head_grids(view, result.analysis, width=console.width,
                                 view=shown(result, o.max_tokens, position).figures.view,  # type: ignore[union-attr]
                                 figures_at=shown_folder(plan.out), hide_rules=o.hide_rules,
                                 title=f"Each head's weights, {view.layer_names[view.layer]} "
                                       f"({layer_of(view.layer, view.n_layers)})"))
        console.print()
    publish(result, o, plan, position)


def _show(request: Request, trace_file: Path, layer: str | None, batch_index: int | None,
          raw_tokens: bool = False) -> None:
    """``mha show``: a saved run's walkthrough, grids and files, or one layer of your model's attention."""
    from mhacli.models.attention_file import is_attention_file
    from mhacli.pipeline import result_of

    o = request.outputs
    set_quiet(o.quiet)
    inputs: list[tuple[str, object]] = [("the trace file", trace_file)]
    # --html before the file is read; the figures' names need its head count.
    plan_outputs(plots=False, out=None, fmt=o.fmt, heads=1, html=o.html, inputs=inputs)
    if is_attention_file(trace_file):
        return _show_attention(request, trace_file, layer, batch_index, raw_tokens)
    from mhacli.io.export import load_saved

    trace, parse, mapped = load_saved(trace_file)  # a missing or unreadable file is said as such first
    if batch_index is not None:
        raise UsageError("--batch-index picks one sequence of an attention file holding a batch; "
                         "a saved run of mha explain has one (drop --batch-index).")
    if layer is not None:
        raise UsageError("--layer picks a layer of an attention file ('weights' and 'tokens'); "
                         "a saved run of mha explain has one layer (drop --layer).")
    if raw_tokens:
        raise UsageError("--raw-tokens shows an attention file's tokenizer markers (Ġ, ▁, ##); a saved run of "
                         "mha explain holds its tokens as they were written (drop --raw-tokens).")
    plan = plan_request(request, trace.num_heads, inputs)
    position = query_position(trace, o.query)
    open_figures(plan, trace.config, trace.n_tokens, o.max_tokens, o.fmt, o.dpi)
    # once: the walkthrough, grids, figures and page read it
    result = result_of(trace, single=plan.out is not None, parse=parse, mapped=mapped)
    if o.json:
        _print_json(result, o.json_arrays)
    else:
        _walkthrough(result, o, position, plan.out)
    publish(result, o, plan, position)


def _compare(request: Request) -> None:
    """``mha compare``: one head of size d beside h heads of size d/h, printed, drawn or as JSON."""
    o = request.outputs
    set_quiet(o.quiet)
    prepared = prepare_run(request.text or "", request.model.given())
    plan = plan_request(request, prepared.config.heads, read_files(request.source.file, request.model.weights),
                        compare=True)
    open_figures(plan, prepared.config, prepared.n_tokens, o.max_tokens, o.fmt, o.dpi)  # its JSON is a few numbers
    result = finish_run(prepared, compare=True)
    comparison = result.comparison
    assert comparison is not None  # asked for with compare=True
    if not o.json:
        _compare_panels(result, o, plan.out)
    written = publish(result, o, plan, None, report=False)
    if o.json:
        write_stdout(json_document("compare", {**comparison.to_dict(), "files": written}) + "\n")
    report_written(written, to_stderr=o.json)


def _compare_panels(result: Run, o: Outputs, out: Path | None) -> None:
    """The comparison's panel, then the one head's grids above the h heads' grids."""
    from mhacli.pipeline import shown
    from mhacli.render.compare import comparison_panel
    from mhacli.render.grid import head_grids

    trace, single, comparison = result.trace, result.single, result.comparison
    assert single is not None and comparison is not None and comparison.analysis is not None
    assert comparison.single_analysis is not None  # both analyses come with compare=True
    figures_at, apart = shown_folder(out), comparison.apart is not None
    window = shown(result, o.max_tokens).figures.view  # type: ignore[union-attr]
    print_all(comparison_panel(comparison, hide_rules=o.hide_rules), "",
              head_grids(single, comparison.single_analysis, width=console.width, view=window,
                         figures_at=figures_at, single=True, hide_rules=o.hide_rules,
                         title=f"One head of size d = {trace.d_model}" + (", trained alone" if apart else "")),
              "", head_grids(trace, comparison.analysis, width=console.width, view=window,
                             figures_at=figures_at, title=f"{trace.num_heads} heads of size d/h = {trace.d_k}",
                             hide_rules=o.hide_rules), "")


def _verify(trace_file: Path, json_out: bool) -> None:
    """``mha verify``: every array of a saved run recomputed, the differences printed; 1 when one is too large."""
    from mhacli.attention.errors import RunError
    from mhacli.measures.verify import verify as run_checks
    from mhacli.io.export import load_trace
    from mhacli.render.terminal import verify_table

    from mhacli.models.torch_import import torch_or_none, torch_reason

    trace = load_trace(trace_file)
    checks = run_checks(trace, torch_or_none())
    failed = [c for c in checks if not c.ok]
    if json_out:
        document = {"file": str(trace_file), "ok": not failed,
                    "checks": [{"reference": c.reference, "array": c.array, "max_diff": c.max_diff,
                                "tolerance": c.tolerance, "ok": c.ok} for c in checks]}
        write_stdout(json_document("verify", document) + "\n")
    else:
        print_all(verify_table(trace, checks, torch_reason()))
    if failed:
        # Count arrays, not checks: PyTorch, when installed, re-checks some arrays, and the
        # message should read the same with or without it.
        bad = sorted({c.array for c in failed})
        total = len({c.array for c in checks})
        raise RunError(f"{len(bad)} of {total} arrays differ by more than {failed[0].tolerance:g} "
                       f"({', '.join(bad)}): the arrays in this file are not what its weights compute; "
                       "it was changed after 'mha explain' wrote it.")
