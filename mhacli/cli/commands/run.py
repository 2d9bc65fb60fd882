"""The commands that run attention or read a saved run: explain, show, compare, verify."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mhacli.cli.common import (checked_query, finish_run, html_max_tokens, open_figures, plan_outputs, prepare_run,
                               query_position, read_files, shown_folder, write_compare, write_figures)
from mhacli.cli.options import (DEFAULT, DPI, FORMAT, MAX_TOKENS, OUT_DIR, BatchIndexOpt, CausalOpt, DModelOpt,
                                DpiOpt, DtypeOpt, FileOpt, FormatOpt, HeadsOpt, HideRulesOpt, HtmlOpt, JsonArraysOpt,
                                JsonOpt, LayerOpt, MaxTokensOpt, NumbersJsonOpt, OutOpt, PlotsOpt, PositionsOpt,
                                QueryOpt, QuietOpt, SampleOpt, SaveNpzOpt, SeedOpt, ShowFileArg, ShowValuesOpt, TextArg,
                                TokenizerOpt, TraceArg, VerifyQuietOpt, WeightsLayerOpt, WeightsOpt, WordsOpt,
                                WorkedOpt, model_options)
from mhacli.cli.output import console, json_document, json_text, print_all, report_written, set_quiet, write_stdout
from mhacli.core.errors import UsageError
from mhacli.io.inputs import resolve_text

if TYPE_CHECKING:
    from mhacli.core.analysis import Analysis
    from mhacli.core.view import AttentionView
    from mhacli.io.outputs import OutputPlan
    from mhacli.pipeline import Run


def _walkthrough(result: Run, max_tokens: int, show_values: bool, query: int | None,
                 figures_at: Path | None, hide_rules: bool = False) -> None:
    """Every step of the run, then where each head looks (the grids name the figures' folder)."""
    from mhacli.pipeline import shown
    from mhacli.render.grid import head_grids
    from mhacli.render.terminal import walkthrough

    trace, analysis = result.trace, result.analysis
    assert result.split_diff is not None  # a run of the tool (a view has no walkthrough)
    print_all(*walkthrough(trace, analysis, result.split_diff, max_tokens=max_tokens, show_values=show_values,
                           width=console.width, hide_rules=hide_rules))
    console.print()
    view = shown(result, max_tokens, query).figures.view  # type: ignore[union-attr]
    console.print(head_grids(trace, analysis, width=console.width, view=view,
                             figures_at=shown_folder(figures_at), hide_rules=hide_rules))
    console.print()


def _write_html(result: Run, html: Path | None, max_tokens: int, hide_rules: bool = False) -> list[str]:
    if html is None:
        return []
    from mhacli.pipeline import paged
    from mhacli.render.html import write_html

    return [str(write_html(paged(result, max_tokens), html, hide_rules=hide_rules))]


def _print_json(result: Run, arrays: bool) -> None:
    from mhacli.io.export import trace_document

    document = trace_document(result.trace, arrays=arrays, analysis=result.analysis)
    write_stdout(json_text(document) + "\n")


def _write_all(ctx: typer.Context, result: Run, plan: OutputPlan, fmt: str, dpi: int, position: int | None,
               max_tokens: int, hide_rules: bool, to_stderr: bool) -> None:
    """Every file of a run, in order (figures, --save-npz, --html), then the list of what was written."""
    written = (write_figures(result, plan.out, fmt, dpi, position, max_tokens, hide_rules)
               if plan.out is not None else [])
    if plan.save_npz is not None:
        from mhacli.io.export import save_npz as write_npz

        written.append(str(write_npz(result.trace, plan.save_npz)))
    written += _write_html(result, plan.html, html_max_tokens(ctx, max_tokens), hide_rules)
    report_written(written, to_stderr=to_stderr)


def _no_arrays_without_json(ctx: typer.Context, json_out: bool) -> None:
    source = ctx.get_parameter_source("json_arrays")
    if not json_out and source is not None and source.name != "DEFAULT":
        raise UsageError("--json-arrays and --no-json-arrays shape the --json document; add --json or drop them.")


def explain(
    ctx: typer.Context,
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    heads: HeadsOpt = DEFAULT.heads,
    d_model: DModelOpt = DEFAULT.d_model,
    seed: SeedOpt = DEFAULT.seed,
    tokenizer: TokenizerOpt = DEFAULT.tokenizer,
    positions: PositionsOpt = DEFAULT.positions,
    causal: CausalOpt = DEFAULT.causal,
    weights: WeightsOpt = DEFAULT.weights,
    layer: WeightsLayerOpt = None,
    words: WordsOpt = None,
    dtype: DtypeOpt = DEFAULT.dtype,
    show_values: ShowValuesOpt = False,
    worked: WorkedOpt = False,
    save_npz: SaveNpzOpt = None,
    json_out: JsonOpt = False,
    json_arrays: JsonArraysOpt = True,
    max_tokens: MaxTokensOpt = MAX_TOKENS,
    html: HtmlOpt = None,
    quiet: QuietOpt = False,
    out: OutOpt = OUT_DIR,
    plots: PlotsOpt = True,
    fmt: FormatOpt = FORMAT,
    dpi: DpiOpt = DPI,
    query: QueryOpt = None,
    hide_rules: HideRulesOpt = False,
) -> None:
    """Walk through multi-head attention on TEXT, step by step.

    Tokenizes the text, embeds it, runs real multi-head attention and prints
    every step with its formula, shape and cost, then where each head looks.

    Example: [bold]mha explain "The animal didn't cross the street because it was too tired" --heads 4[/bold]
    """
    set_quiet(quiet)
    if worked and (text is not None or file is not None or sample is not None):
        raise UsageError("--worked brings its own three tokens; drop the text, --file or --sample.")
    if worked and words:
        raise UsageError("--worked brings its own three tokens and weights; drop --words.")
    _no_arrays_without_json(ctx, json_out)
    options = model_options(ctx, heads=heads, d_model=d_model, seed=seed, tokenizer=tokenizer, positions=positions,
                            causal=causal, weights=weights, dtype=dtype, layer=layer, words=words)
    if worked:
        from mhacli.core.config import Config
        from mhacli.core.worked import HEADS, worked_example
        from mhacli.pipeline import result_of

        config = Config(**{k: v for k, v in options.items() if k not in ("weights", "layer")})  # type: ignore[arg-type]
        checked_query(query)
        trace = worked_example(config.seed, config.causal)
        plan, fmt, dpi = plan_outputs(plots=plots, out=out, fmt=fmt, dpi=dpi, heads=HEADS, save_npz=save_npz,
                                      html=html, inputs=read_files(file, weights))
        open_figures(plan, trace.config, trace.n_tokens, max_tokens, fmt, dpi)
        result = result_of(trace, single=plan.out is not None)
    else:
        prepared = prepare_run(resolve_text(text, file, sample), options, json=json_out and json_arrays)
        checked_query(query)
        plan, fmt, dpi = plan_outputs(plots=plots, out=out, fmt=fmt, dpi=dpi, heads=prepared.config.heads,
                                      save_npz=save_npz, html=html, inputs=read_files(file, weights))
        # Refuse what would not fit before any array exists, the figures' pixels included.
        open_figures(plan, prepared.config, prepared.n_tokens, max_tokens, fmt, dpi)
        result = finish_run(prepared, single=plan.out is not None)
    position = query_position(result.trace, query)
    if json_out:
        _print_json(result, json_arrays)
    elif worked:
        from mhacli.render.worked import worked_view

        print_all(*worked_view(result.trace))
    else:
        _walkthrough(result, max_tokens, show_values, position, plan.out, hide_rules)
        from mhacli.render.card import explain_card  # a grammar model's report card, once (issue 28)
        print_all(*explain_card(prepared.model, result.trace, hide_rules))
    _write_all(ctx, result, plan, fmt, dpi, position, max_tokens, hide_rules, json_out)


def _pick_layer(path: Path, layer: str | None, batch_index: int | None = None) -> AttentionView:
    """The attention file's view at ``--layer``: a number (1 = first) or one of its layer names."""
    from mhacli.core.messages import shown, shown_path
    from mhacli.core.checks import layer_index
    from mhacli.core.numbers import RULE, looks_numeric, too_big, whole_number
    from mhacli.io.attention_file import load_attention

    # read and checked once; a layer is picked from it, never by reading again
    view = load_attention(path, batch_index=batch_index)
    if layer is None:
        return view
    text, index = layer.strip(), layer_index(layer, view.layer_names)  # the one rule, as explain's --layer
    if index is not None or whole_number(text) is not None:
        return view.at_layer(whole_number(text) - 1 if index is None else index)  # type: ignore[operator]
    names = ", ".join(view.layer_names[:8]) + (", …" if view.n_layers > 8 else "")
    if looks_numeric(text) and not too_big(text):  # '²', '+-2': meant as a number, so say the rule
        raise UsageError(f"--layer must be {RULE} from 1 to {view.n_layers}, or a layer's name "
                         f"({names}); got {shown(text)}.")
    raise UsageError(f"--layer {shown(text)} is not a layer of {shown_path(path)}; give a number from 1 to "
                     f"{view.n_layers} or one of its names: {names}.")


def _view_json(view: AttentionView, analysis: Analysis) -> str:
    """The shown layer of a view as one JSON document: tokens, weights and the per-query measures."""
    document = {"kind": "attention", "source": view.source, "layer": view.layer + 1,
                "layer_names": list(view.layer_names), "tokens": list(view.tokens), "causal": view.causal,
                "head_names": list(view.head_names) if view.head_names else None,
                "weights": view.weights.tolist(), **analysis.to_dict()}
    return json_document("view", document)


def _show_attention(ctx: typer.Context, path: Path, layer: str | None, max_tokens: int, show_values: bool,
                    json_out: bool, html: str | None, out: Path, plots: bool, fmt: str, dpi: int,
                    query: str | None, hide_rules: bool = False, batch_index: int | None = None) -> None:
    """``mha show`` of your model's attention: the grids, the figures and the page of one layer."""
    from mhacli.pipeline import result_of
    from mhacli.render.figures import resolve_query

    if show_values:
        raise UsageError("--show-values prints a run's matrices; an attention file holds only the weights "
                         "(drop --show-values).")
    view = _pick_layer(path, layer, batch_index)
    plan, fmt, dpi = plan_outputs(plots=plots, out=out, fmt=fmt, dpi=dpi, heads=view.num_heads, split=False,
                                  html=html, inputs=[("the attention file", path)])
    position = resolve_query(view.tokens, query)
    if plan.out is not None and plan.figures:
        from mhacli.io.files import prepare_out_dir
        from mhacli.render.sizes import check_figures_fit

        check_figures_fit(view.num_heads, min(view.n_tokens, max_tokens), dpi, fmt, besides=view.layers.nbytes)
        prepare_out_dir(plan.out)
    result = result_of(view, layers=plan.html is not None)  # once: the JSON or the grids, figures and page read it
    if json_out:
        write_stdout(_view_json(view, result.analysis) + "\n")
    else:
        from mhacli.pipeline import shown
        from mhacli.render.grid import head_grids

        console.print(head_grids(view, result.analysis, width=console.width,
                                 view=shown(result, max_tokens, position).figures.view,  # type: ignore[union-attr]
                                 figures_at=shown_folder(plan.out), hide_rules=hide_rules,
                                 title=f"Each head's weights, {view.layer_names[view.layer]} "
                                       f"({view.layer + 1} of {view.n_layers})"))
        console.print()
    _write_all(ctx, result, plan, fmt, dpi, position, max_tokens, hide_rules, json_out)


def show(
    ctx: typer.Context,
    trace_file: ShowFileArg,
    max_tokens: MaxTokensOpt = MAX_TOKENS,
    show_values: ShowValuesOpt = False,
    json_out: JsonOpt = False,
    json_arrays: JsonArraysOpt = True,
    html: HtmlOpt = None,
    quiet: QuietOpt = False,
    out: OutOpt = OUT_DIR,
    plots: PlotsOpt = True,
    fmt: FormatOpt = FORMAT,
    dpi: DpiOpt = DPI,
    query: QueryOpt = None,
    layer: LayerOpt = None,
    hide_rules: HideRulesOpt = False,
    batch_index: BatchIndexOpt = None,
) -> None:
    """Re-render the walkthrough and the figures from a saved .npz, without recomputing attention.

    Also draws your own model's attention saved as an npz of 'weights' (layers × heads × N × N)
    and 'tokens' (docs/your-model.md), one layer at a time (--layer).

    Example: [bold]mha explain "the cat sat on the mat" --save-npz cat.npz && mha show cat.npz --html cat.html[/bold]
    """
    set_quiet(quiet)
    _no_arrays_without_json(ctx, json_out)
    checked_query(query)
    inputs = [("the trace file", trace_file)]
    # --html, --format and --dpi before the file is read; the figures' names need its head count.
    plan_outputs(plots=False, out=None, fmt=fmt, dpi=dpi, heads=1, html=html, inputs=inputs)
    from mhacli.io.attention_file import is_attention_file

    if is_attention_file(trace_file):
        _show_attention(ctx, trace_file, layer, max_tokens, show_values, json_out, html, out, plots, fmt, dpi, query,
                        hide_rules, batch_index)
        return
    if batch_index is not None:
        raise UsageError("--batch-index picks one sequence of an attention file holding a batch; "
                         "a saved run of mha explain has one (drop --batch-index).")
    if layer is not None:
        raise UsageError("--layer picks a layer of an attention file ('weights' and 'tokens'); "
                         "a saved run of mha explain has one layer (drop --layer).")
    from mhacli.io.export import load_trace

    trace = load_trace(trace_file)
    plan, fmt, dpi = plan_outputs(plots=plots, out=out, fmt=fmt, dpi=dpi, heads=trace.num_heads, html=html,
                                  inputs=inputs)
    position = query_position(trace, query)
    open_figures(plan, trace.config, trace.n_tokens, max_tokens, fmt, dpi)
    from mhacli.pipeline import result_of

    result = result_of(trace, single=plan.out is not None)  # once: the walkthrough, grids, figures, page read it
    if json_out:
        _print_json(result, json_arrays)
    else:
        _walkthrough(result, max_tokens, show_values, position, plan.out, hide_rules)
    _write_all(ctx, result, plan, fmt, dpi, position, max_tokens, hide_rules, json_out)


def compare(
    ctx: typer.Context,
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    heads: HeadsOpt = DEFAULT.heads,
    d_model: DModelOpt = DEFAULT.d_model,
    seed: SeedOpt = DEFAULT.seed,
    tokenizer: TokenizerOpt = DEFAULT.tokenizer,
    positions: PositionsOpt = DEFAULT.positions,
    causal: CausalOpt = DEFAULT.causal,
    weights: WeightsOpt = DEFAULT.weights,
    layer: WeightsLayerOpt = None,
    words: WordsOpt = None,
    max_tokens: MaxTokensOpt = MAX_TOKENS,
    json_out: NumbersJsonOpt = False,
    quiet: QuietOpt = False,
    out: OutOpt = OUT_DIR,
    plots: PlotsOpt = True,
    fmt: FormatOpt = FORMAT,
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
    set_quiet(quiet)
    prepared = prepare_run(resolve_text(text, file, sample), model_options(
        ctx, heads=heads, d_model=d_model, seed=seed, tokenizer=tokenizer, positions=positions, causal=causal,
        weights=weights, layer=layer, words=words))
    config = prepared.config
    plan, fmt, dpi = plan_outputs(plots=plots, out=out, fmt=fmt, dpi=dpi, heads=config.heads, compare=True,
                                  inputs=read_files(file, weights))
    open_figures(plan, config, prepared.n_tokens, max_tokens, fmt, dpi)  # compare's JSON is a few numbers
    result = finish_run(prepared, compare=True)
    trace, single, comparison = result.trace, result.single, result.comparison
    # asked for with compare=True: both are there, with both analyses
    assert single is not None and comparison is not None and comparison.analysis is not None
    assert comparison.single_analysis is not None
    if not json_out:
        from mhacli.render.compare import comparison_panel
        from mhacli.render.grid import head_grids

        from mhacli.pipeline import shown

        figures_at = shown_folder(plan.out)
        apart = comparison.apart is not None
        window = shown(result, max_tokens).figures.view  # type: ignore[union-attr]
        print_all(comparison_panel(comparison, hide_rules=hide_rules), "",
                  head_grids(single, comparison.single_analysis, width=console.width, view=window,
                             figures_at=figures_at, single=True, hide_rules=hide_rules,
                             title=f"One head of size d = {trace.d_model}" + (", trained alone" if apart else "")),
                  "", head_grids(trace, comparison.analysis, width=console.width, view=window,
                                 figures_at=figures_at, title=f"{trace.num_heads} heads of size d/h = {trace.d_k}",
                                 hide_rules=hide_rules), "")
    written = (write_compare(result, plan.out, fmt, dpi, max_tokens, hide_rules)
               if plan.out is not None else [])
    if json_out:
        write_stdout(json_document("compare", {**comparison.to_dict(), "files": written}) + "\n")
    report_written(written, to_stderr=json_out)


def verify(trace_file: TraceArg, json_out: NumbersJsonOpt = False, quiet: VerifyQuietOpt = False) -> None:
    """Recompute a saved .npz independently and print the largest difference of each array.

    Uses a plain per-head loop, and PyTorch's multi_head_attention_forward when
    PyTorch is installed. Exits with 1 if any difference exceeds the tolerance
    (1e-9 for float64).

    Example: [bold]mha verify cat.npz[/bold]
    """
    set_quiet(quiet)
    from mhacli.core.errors import RunError
    from mhacli.core.verify import verify as run_checks
    from mhacli.io.export import load_trace
    from mhacli.render.terminal import verify_table

    from mhacli.io.torch_import import torch_or_none, torch_reason

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
