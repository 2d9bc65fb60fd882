"""The commands that run attention or read a saved run: explain, show, compare, verify."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mhacli.cli.common import (check_size, checked_query, config_from, html_max_tokens, open_figures, plan_outputs,
                               query_position, read_files, run_trace, shown_folder, single_head, write_compare,
                               write_figures)
from mhacli.cli.options import (DEFAULT, DPI, FORMAT, MAX_TOKENS, OUT_DIR, BatchIndexOpt, CausalOpt, DModelOpt,
                                DpiOpt, DtypeOpt, FileOpt, FormatOpt, HeadsOpt, HideRulesOpt, HtmlOpt, JsonArraysOpt,
                                JsonOpt, LayerOpt, MaxTokensOpt, NumbersJsonOpt, OutOpt, PlotsOpt, PositionsOpt,
                                QueryOpt, QuietOpt,
                                SampleOpt, SaveNpzOpt, SeedOpt, ShowFileArg, ShowValuesOpt, TextArg, TokenizerOpt,
                                TraceArg, WeightsLayerOpt, WeightsOpt, WorkedOpt)
from mhacli.cli.output import console, json_document, json_text, print_all, report_written, set_quiet, write_stdout
from mhacli.core.errors import UsageError
from mhacli.io.inputs import resolve_text

if TYPE_CHECKING:
    from mhacli.core.analysis import Analysis
    from mhacli.core.trace import Trace
    from mhacli.core.view import AttentionView


def _walkthrough(trace: Trace, analysis: Analysis, max_tokens: int, show_values: bool, query: int | None,
                 figures_at: Path | None, hide_rules: bool = False) -> None:
    """Every step of the run, then where each head looks (the grids name the figures' folder)."""
    from mhacli.render.grid import head_grids
    from mhacli.render.terminal import walkthrough

    print_all(*walkthrough(trace, max_tokens=max_tokens, show_values=show_values, width=console.width,
                           analysis=analysis, hide_rules=hide_rules))
    console.print()
    console.print(head_grids(trace, width=console.width, max_tokens=max_tokens, query=query,
                             figures_at=shown_folder(figures_at), analysis=analysis, hide_rules=hide_rules))
    console.print()


def _write_html(trace: Trace | AttentionView, html: Path | None, max_tokens: int, hide_rules: bool = False,
                analysis: Analysis | None = None) -> list[str]:
    if html is None:
        return []
    from mhacli.render.html import write_html

    return [str(write_html(trace, html, max_tokens=max_tokens, hide_rules=hide_rules, analysis=analysis))]


def _print_json(trace: Trace, arrays: bool, analysis: Analysis) -> None:
    from mhacli.io.export import trace_document

    write_stdout(json_text(trace_document(trace, arrays=arrays, analysis=analysis)) + "\n")


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
    _no_arrays_without_json(ctx, json_out)
    body = "" if worked else resolve_text(text, file, sample)
    config = config_from(ctx)
    checked_query(query)
    from mhacli.core import worked as hand_sized

    plan, fmt, dpi = plan_outputs(plots=plots, out=out, fmt=fmt, dpi=dpi,
                                  heads=hand_sized.HEADS if worked else config.heads, save_npz=save_npz,
                                  html=html, inputs=read_files(file, weights))
    if worked:
        from mhacli.core.worked import worked_example

        trace = worked_example(config.seed, config.causal)
        open_figures(plan, trace.config, trace.n_tokens, max_tokens, fmt, dpi)
    else:
        # Refuse what would not fit before any array exists, the figures' pixels included.
        n = check_size(body, config, json=json_out and json_arrays)
        open_figures(plan, config, n, max_tokens, fmt, dpi)
        trace = run_trace(body, config, ctx)
    position = query_position(trace, query)
    from mhacli.core.analysis import analyse

    analysis = analyse(trace)  # once per run: the walkthrough, grids, figures and page all read it
    if json_out:
        _print_json(trace, json_arrays, analysis)
    elif worked:
        from mhacli.render.worked import worked_view

        print_all(*worked_view(trace))
    else:
        _walkthrough(trace, analysis, max_tokens, show_values, position, plan.out, hide_rules)
    written = (write_figures(trace, plan.out, fmt, dpi, position, max_tokens, hide_rules, analysis)
               if plan.out is not None else [])
    if plan.save_npz is not None:
        from mhacli.io.export import save_npz as write_npz

        written.append(str(write_npz(trace, plan.save_npz)))
    written += _write_html(trace, plan.html, html_max_tokens(ctx, max_tokens), hide_rules, analysis)
    report_written(written, to_stderr=json_out)


def _pick_layer(path: Path, layer: str | None, batch_index: int | None = None) -> AttentionView:
    """The attention file's view at ``--layer``: a number (1 = first) or one of its layer names."""
    from mhacli.core.messages import shown, shown_path
    from mhacli.core.numbers import RULE, looks_numeric, whole_number
    from mhacli.io.attention_file import load_attention

    # read and checked once; a layer is picked from it, never by reading again
    view = load_attention(path, batch_index=batch_index)
    if layer is None:
        return view
    text = layer.strip()
    number = whole_number(text)
    if number is not None:
        return view.at_layer(number - 1)
    for wanted in (text, text.casefold()):
        for k, name in enumerate(view.layer_names):
            if (name if wanted is text else name.casefold()) == wanted:
                return view.at_layer(k)
    names = ", ".join(view.layer_names[:8]) + (", …" if view.n_layers > 8 else "")
    if looks_numeric(text):  # '²', '+-2', 5,000 digits: meant as a number, so say the rule
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
    from mhacli.core.analysis import analyse
    from mhacli.render.figures import resolve_query

    if show_values:
        raise UsageError("--show-values prints a run's matrices; an attention file holds only the weights "
                         "(drop --show-values).")
    view = _pick_layer(path, layer, batch_index)
    plan, fmt, dpi = plan_outputs(plots=plots, out=out, fmt=fmt, dpi=dpi, heads=view.num_heads, split=False,
                                  html=html, inputs=[("the attention file", path)])
    position = resolve_query(view.tokens, query)
    if plan.out is not None and plan.figures:
        from mhacli.core.config import check_figures_fit
        from mhacli.io.files import prepare_out_dir

        check_figures_fit(view.num_heads, min(view.n_tokens, max_tokens), dpi, fmt, besides=view.layers.nbytes)
        prepare_out_dir(plan.out)
    analysis = analyse(view)  # once: the JSON or the grids, the figures and the page all read it
    if json_out:
        write_stdout(_view_json(view, analysis) + "\n")
    else:
        from mhacli.render.grid import head_grids

        console.print(head_grids(view, width=console.width, max_tokens=max_tokens, query=position,
                                 figures_at=shown_folder(plan.out), hide_rules=hide_rules, analysis=analysis,
                                 title=f"Each head's weights, {view.layer_names[view.layer]} "
                                       f"({view.layer + 1} of {view.n_layers})"))
        console.print()
    written = (write_figures(view, plan.out, fmt, dpi, position, max_tokens, hide_rules, analysis)
               if plan.out is not None else [])
    written += _write_html(view, plan.html, html_max_tokens(ctx, max_tokens), hide_rules, analysis)
    report_written(written, to_stderr=json_out)


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
    from mhacli.core.analysis import analyse

    analysis = analyse(trace)  # once per run: the walkthrough, grids, figures and page all read it
    if json_out:
        _print_json(trace, json_arrays, analysis)
    else:
        _walkthrough(trace, analysis, max_tokens, show_values, position, plan.out, hide_rules)
    written = (write_figures(trace, plan.out, fmt, dpi, position, max_tokens, hide_rules, analysis)
               if plan.out is not None else [])
    written += _write_html(trace, plan.html, html_max_tokens(ctx, max_tokens), hide_rules, analysis)
    report_written(written, to_stderr=json_out)


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
    body = resolve_text(text, file, sample)
    config = config_from(ctx)
    plan, fmt, dpi = plan_outputs(plots=plots, out=out, fmt=fmt, dpi=dpi, heads=config.heads, compare=True,
                                  inputs=read_files(file, weights))
    n = check_size(body, config)  # compare's JSON is a few numbers, not the arrays: plan without it
    open_figures(plan, config, n, max_tokens, fmt, dpi)

    from mhacli.core.compare import compare as measure

    trace = run_trace(body, config, ctx)
    apart = None
    shipped = ctx.params.get("weights")
    if shipped in ("trained", "grammar"):  # a shipped model has a one-head twin trained alone on its task
        from mhacli.io.trained import shipped_apart, trained_trace

        alone, apart = shipped_apart(shipped)
        single = trained_trace(alone, trace.tokens)
    else:
        single = single_head(trace)
    comparison = measure(trace, single, apart)
    if json_out:
        written = (write_compare(trace, single, plan.out, fmt, dpi, max_tokens, hide_rules, comparison)
                   if plan.out is not None else [])
        write_stdout(json_document("compare", {**comparison.to_dict(), "files": written}) + "\n")
    else:
        from mhacli.render.compare import comparison_panel
        from mhacli.render.grid import head_grids

        figures_at = shown_folder(plan.out)
        print_all(comparison_panel(comparison, hide_rules=hide_rules), "",
                  head_grids(single, width=console.width, max_tokens=max_tokens, figures_at=figures_at,
                             title=f"One head of size d = {trace.d_model}" + (", trained alone" if apart else ""),
                             single=True,
                             analysis=comparison.single_analysis, hide_rules=hide_rules), "",
                  head_grids(trace, width=console.width, max_tokens=max_tokens, figures_at=figures_at,
                             title=f"{trace.num_heads} heads of size d/h = {trace.d_k}",
                             analysis=comparison.analysis, hide_rules=hide_rules), "")
        written = (write_compare(trace, single, plan.out, fmt, dpi, max_tokens, hide_rules, comparison)
                   if plan.out is not None else [])
    report_written(written, to_stderr=json_out)


def verify(trace_file: TraceArg, json_out: NumbersJsonOpt = False, quiet: QuietOpt = False) -> None:
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

    trace = load_trace(trace_file)
    checks = run_checks(trace)
    failed = [c for c in checks if not c.ok]
    if json_out:
        document = {"file": str(trace_file), "ok": not failed,
                    "checks": [{"reference": c.reference, "array": c.array, "max_diff": c.max_diff,
                                "tolerance": c.tolerance, "ok": c.ok} for c in checks]}
        write_stdout(json_document("verify", document) + "\n")
    else:
        print_all(verify_table(trace, checks))
    if failed:
        # Count arrays, not checks: PyTorch, when installed, re-checks some arrays, and the
        # message should read the same with or without it.
        bad = sorted({c.array for c in failed})
        total = len({c.array for c in checks})
        raise RunError(f"{len(bad)} of {total} arrays differ by more than {failed[0].tolerance:g} "
                       f"({', '.join(bad)}): the arrays in this file are not what its weights compute; "
                       "it was changed after 'mha explain' wrote it.")
