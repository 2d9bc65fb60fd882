"""The commands that run attention or read a saved run: explain, show, compare, verify."""

from __future__ import annotations

from mhacli.cli import build, publish
from mhacli.cli.options import (DPI, BatchIndexOpt, DpiOpt, FiguresFormatOpt, FiguresOutOpt, FileOpt, HideRulesOpt,
                                HtmlOpt, JsonArraysOpt, JsonOpt, LayerOpt, MaxTokensOpt, NumbersJsonOpt, PlotsOpt,
                                QueryOpt, QuietOpt, RawTokensOpt, SampleOpt, SaveNpzOpt, ShowFileArg, ShowValuesOpt,
                                TextArg, TraceArg, VerifyQuietOpt, WorkedOpt, model_block)
from mhacli.cli.output import set_quiet
from mhacli.request import ModelOptions  # the type of the model-option block, read by model_block at import


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
    publish.explain(build.request(figures=True, **locals()))


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
    publish.show(build.request(read_text=False, figures=True, **options), trace_file, layer, batch_index, raw_tokens)


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
    publish.compare(build.request(figures=True, **locals()))


def verify(trace_file: TraceArg, json_out: NumbersJsonOpt = False, quiet: VerifyQuietOpt = False) -> None:
    """Recompute a saved .npz independently and print the largest difference of each array.

    Uses a plain per-head loop, and PyTorch's multi_head_attention_forward when
    PyTorch is installed. Exits with 1 if any difference exceeds the tolerance
    (1e-9 for float64).

    Example: [bold]mha verify cat.npz[/bold]
    """
    set_quiet(quiet)
    publish.verify(trace_file, json_out)
