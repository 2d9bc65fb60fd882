"""The one flow of a command: build its request (:func:`request`), plan every output before any work, run the
pipeline once, print, then :func:`publish` the files. Heavy modules are imported inside, so ``mha --help`` is quick.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from mhacli.attention.config import Config
from mhacli.attention.errors import UsageError
from mhacli.cli.options import FORMAT, MAX_TOKENS, OUT_DIR
from mhacli.cli.output import figure_progress, notes, report_written
from mhacli.request import DPI, ModelOptions, Outputs, Request, Source

if TYPE_CHECKING:
    from mhacli.attention.trace import Trace
    from mhacli.io.outputs import OutputPlan
    from mhacli.pipeline import Prepared, Run


def request(*, model: ModelOptions | None = None, text: str | None = None, file: Path | None = None,
            sample: str | None = None, read_text: bool = True, worked: bool = False, quiet: bool = False,
            max_tokens: int | None = None, show_values: bool = False, hide_rules: bool = False,
            out: Path | None = None, plots: bool = True, fmt: str | None = None, dpi: int = DPI,
            query: str | None = None, html: str | None = None, json_out: bool = False, json_arrays: bool | None = None,
            save_npz: str | None = None, figures: bool = False, default_sample: str | None = None) -> Request:
    """The request of one command: the text read (unless ``read_text`` is False), every output option checked;
    None means "not given". ``figures``: drawn into --out (default mha-output), except with --json when neither
    --out nor --format was typed. ``default_sample``: the text when none is given (the lesson's, the quiz's)."""
    from mhacli.io.inputs import check_query, resolve_text
    from mhacli.render.figures import check_dpi, check_format

    if worked and (text is not None or file is not None or sample is not None):
        raise UsageError("--worked brings its own three tokens; drop the text, --file or --sample.")
    if worked and model is not None and model.words:
        raise UsageError("--worked brings its own three tokens and weights; drop --words.")
    if default_sample is not None and text is None and file is None and sample is None:
        sample = default_sample
    if json_arrays is not None and not json_out:
        raise UsageError("--json-arrays and --no-json-arrays shape the --json document; add --json or drop them.")
    if figures:
        if json_out and out is None and fmt is None:
            plots = False
        out = OUT_DIR if out is None else out
    fmt = FORMAT if fmt is None else fmt
    body = resolve_text(text, file, sample) if read_text and not worked else None
    check_query(query)
    outputs = Outputs(quiet=quiet, max_tokens=MAX_TOKENS if max_tokens is None else max_tokens,
                      show_values=show_values, hide_rules=hide_rules, out=out if plots else None,
                      fmt=check_format(fmt), dpi=check_dpi(dpi), query=query, html=html, page_max_tokens=max_tokens,
                      json=json_out, json_arrays=json_arrays is not False, save_npz=save_npz)
    return Request(model=model or ModelOptions(), text=body, source=Source(text, file, sample), outputs=outputs,
                   worked=worked)


def prepare_run(body: str, options: dict[str, object], json: bool = False) -> Prepared:
    """The pipeline's first step for a command: weights resolved, Config built, tokens counted and checked."""
    from mhacli.pipeline import prepare

    return prepare(body, json=json, **options)


def finish_run(prepared: Prepared, *, single: bool = False, compare: bool = False) -> Run:
    """The pipeline's second step: the trace and its measures; what the weights say about the tokens is noted."""
    result = prepared.run(single=single, compare=compare)
    notes(list(result.notes))
    return result


def plan_outputs(*, plots: bool, out: Path | None, fmt: str, heads: int, compare: bool = False, split: bool = True,
                 names: Sequence[str] | None = None, inputs: Sequence[tuple[str, object]] = (),
                 **files: object) -> OutputPlan:
    """Every output of the run resolved once, before any work (:func:`mhacli.io.outputs.plan_outputs`): a clobbered
    file is a usage error now, not a loss later. ``names`` overrides the figure names (train's, bench's);
    ``split=False`` for a view. Nothing is created (:func:`open_figures` makes --out)."""
    from mhacli.io.outputs import figure_names
    from mhacli.io.outputs import plan_outputs as plan

    wanted: Sequence[str] = ()
    if plots and out is not None:
        wanted = names if names is not None else figure_names(heads, fmt, compare=compare, split=split)
    return plan(out=out, figure_names=wanted, inputs=inputs, **files)


def open_figures(plan: OutputPlan, config: Config, n_tokens: int, max_tokens: int, fmt: str, dpi: int) -> None:
    """When the run draws figures: refuse, before anything is drawn, figures that would not fit in memory
    beside the run's arrays (pixels x dpi²), then create --out."""
    if plan.out is None or not plan.figures:
        return
    from mhacli.io.files import prepare_out_dir
    from mhacli.render.sizes import check_figures_fit

    # The arrays stay alive while the figures are drawn; both plans count Python and its libraries
    # once (planned_bytes(0) less the weights is that baseline), so it is taken out of this one.
    arrays = config.planned_bytes(n_tokens) - config.planned_bytes(0) + config.weight_bytes()
    check_figures_fit(config.heads, min(n_tokens, max_tokens), dpi, fmt, besides=arrays)
    prepare_out_dir(plan.out)


def read_files(file: Path | None, weights: str | None = None) -> list[tuple[str, object]]:
    """The files a run reads, as (option, path), so that no output is planned over one of them."""
    from mhacli.attention.config import WEIGHT_KINDS

    read: list[tuple[str, object]] = [("--file", file)]
    if weights is not None and weights not in WEIGHT_KINDS:
        read.append(("--weights", weights))
    return read


def shown_folder(folder: Path | None) -> str | None:
    """A folder named in the renderers' notes ('the heatmaps are in …'), its escape sequences spelled out."""
    from mhacli.attention.messages import printable

    return printable(folder) if folder is not None else None


def query_position(trace: Trace, query: str | None) -> int | None:
    """``--query`` as a position in the trace (a number, or a token's text)."""
    from mhacli.render.figures import resolve_query

    return resolve_query(trace.tokens, query)


def draw(result: Run, out: Path, outputs: Outputs, query: int | None) -> list[str]:
    """Draw the run's figures into ``out`` once the terminal has its text (matplotlib is imported here): a
    comparison's single-vs-multi (every query: its window has none), else head-1 … head-h, heads, magnifiers and
    split (no split for an attention view)."""
    from mhacli.io.outputs import figure_names
    from mhacli.pipeline import shown
    from mhacli.render.figures import save_compare, save_figures

    if result.comparison is not None:
        count, save, window = 1, save_compare, shown(result, outputs.max_tokens)
    else:
        count = len(figure_names(result.trace.num_heads, outputs.fmt, split=result.config is not None))
        save, window = save_figures, shown(result, outputs.max_tokens, query)
    with figure_progress(count) as progress:
        saved = save(window, out, fmt=outputs.fmt, dpi=outputs.dpi, hide_rules=outputs.hide_rules,
                     on_saved=progress)
    notes(list(getattr(saved, "notices", [])))
    return [str(p) for p in saved]


def source_args(text: str | None, file: Path | None, sample: str | None) -> str:
    """How the text was given, as it would be typed again (for 'what next' hints)."""
    import shlex

    from mhacli.attention.messages import printable

    # printable: the text or a file name may hold escape sequences; they are shown, not obeyed.
    if file is not None:
        return printable(f"--file {shlex.quote(str(file))}")
    if sample is not None:
        return printable(f"--sample {shlex.quote(sample)}")
    shown = text or ""
    if len(shown) > 60:  # a long text is recalled, not reprinted
        shown = shown[:59] + "…"
    return printable(typed_quote(shown))


def typed_quote(text: str) -> str:
    """``text`` quoted for a POSIX shell as a person types it: "The animal didn't …" in double quotes when nothing
    in it expands there, else as shlex.quote does."""
    import shlex

    if "'" in text and not any(ch in text for ch in '"$`\\!'):
        return f'"{text}"'
    return shlex.quote(text)


def config_args(config: Config, skip: tuple[str, ...] = ()) -> str:
    """The options that differ from the defaults, as they would be typed again."""
    default = Config()
    out = []
    for name in ("heads", "d_model", "seed", "tokenizer", "weights"):
        if name not in skip and getattr(config, name) != getattr(default, name):
            out.append(f"--{name.replace('_', '-')} {getattr(config, name)}")
    if config.groups != config.heads and config.weights == "random":  # other weights fix their own g
        out.append(f"--kv-heads {config.groups}")
    if config.causal:
        out.append("--causal")
    if not config.positions:
        out.append("--no-positions")
    return " ".join(out)


def publish(result: Run, outputs: Outputs, plan: OutputPlan, position: int | None, report: bool = True) -> list[str]:
    """Every file of a run, in order (its figures, --save-npz, --html), then the list of what was written
    (``report=False``: returned unsaid; compare's JSON carries it, demo adds one figure)."""
    written = draw(result, plan.out, outputs, position) if plan.out is not None else []
    if plan.save_npz is not None:
        from mhacli.io.export import save_npz

        written.append(str(save_npz(result, plan.save_npz)))
    if plan.html is not None:
        from mhacli.pipeline import paged
        from mhacli.render.html import DEFAULT_MAX_TOKENS, write_html

        page = DEFAULT_MAX_TOKENS if outputs.page_max_tokens is None else outputs.page_max_tokens
        written.append(str(write_html(paged(result, page), plan.html, hide_rules=outputs.hide_rules)))
    if report:
        report_written(written, to_stderr=outputs.json)
    return written


def plan_request(request: Request, heads: int, inputs: list[tuple[str, object]], **kinds: bool) -> OutputPlan:
    """Every output the request names, planned once (:func:`plan_outputs`)."""
    o = request.outputs
    return plan_outputs(plots=o.out is not None, out=o.out, fmt=o.fmt, heads=heads, save_npz=o.save_npz,
                        html=o.html, inputs=inputs, **kinds)  # type: ignore[arg-type]


__all__ = ["config_args", "finish_run", "open_figures", "plan_outputs", "prepare_run", "publish", "query_position",
           "read_files", "request", "shown_folder", "source_args", "draw", "plan_request"]
