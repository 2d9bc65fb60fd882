"""What several commands do the same way: build the Config, check figure options, draw the figures.

Heavy modules (numpy through the core, matplotlib through the figures) are
imported inside these functions, so ``mha --help`` stays quick.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, cast

import typer

from mhacli.cli.output import figure_progress, notes
from mhacli.core.config import Config
from mhacli.core.errors import UsageError

if TYPE_CHECKING:
    from mhacli.core.analysis import Analysis
    from mhacli.core.compare import Comparison
    from mhacli.core.trace import Trace
    from mhacli.core.view import AttentionView
    from mhacli.io.outputs import OutputPlan

_CONFIG_FIELDS = frozenset(f.name for f in fields(Config))


_OWN_WEIGHTS = "mhacli.own_weights"  # where config_from keeps weights read from a file, for run_trace


def config_from(ctx: typer.Context) -> Config:
    """The run's Config, built in this one place: the command's options named like Config's fields.

    A field the command has no option for keeps Config's default (``mha quiz``
    has no --tokenizer: it is always "word").  ``--weights FILE`` is read here,
    once: the run then takes d from the file unless --d-model was given.
    """
    params = {name: value for name, value in ctx.params.items() if name in _CONFIG_FIELDS}
    given = params.get("weights")
    layer = ctx.params.get("layer")  # --layer N: one self-attention layer of a weights file holding several
    if isinstance(given, str) and given not in ("random", "designed"):
        from mhacli.io.weights import resolve_weights

        heads_given = _explicit(ctx, "heads")  # a state dict records no head count: --heads, or a refusal
        own = resolve_weights(given, heads=params.get("heads") if heads_given else None, layer=layer)
        ctx.meta[_OWN_WEIGHTS] = own
        trained = getattr(own, "config", None)  # a model from `mha train` brings its heads, width and mask
        if trained is not None:
            params["weights"] = "trained"
            for name in ("heads", "d_model", "causal"):
                source = ctx.get_parameter_source(name)
                explicit = source is not None and source.name != "DEFAULT"
                if explicit and params.get(name) != getattr(trained, name):
                    raise UsageError("the trained model has {%s}; leave {%s:name} out to use it." % (name, name),
                                     **{name: getattr(trained, name)})
                params[name] = getattr(trained, name)
        else:
            params["weights"] = "pytorch"
            params["heads"] = own.heads
            if own.causal and not _explicit(ctx, "causal"):
                params["causal"] = True  # GPT-2's layers only ever saw earlier tokens
            if not _explicit(ctx, "d_model"):
                params["d_model"] = own.d_model
    elif layer is not None:
        raise UsageError("--layer picks one layer of a weights file holding several (--weights FILE); "
                         "drop it, or give the file.")
    return Config(**params)


def _explicit(ctx: typer.Context, name: str) -> bool:
    """Whether the user gave option ``name`` (not its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def run_trace(body: str, config: Config, ctx: typer.Context | None = None) -> Trace:
    """The core's run of ``body`` under ``config`` (with the weights file config_from read, if any)."""
    from mhacli.core.trace import run

    options = asdict(config)
    own = ctx.meta.get(_OWN_WEIGHTS) if ctx is not None else None
    if own is not None:
        options["weights"] = own
    trace = run(body, **options)
    if own is not None and getattr(own, "name", None):  # one layer of several: say which ran (GPT-2: causal)
        causal = ", causal as the model was trained" if own.causal and config.causal else ""
        notes([f"ran the self-attention {own.name}{causal}."])
    if own is not None and hasattr(own, "stand_ins"):  # a trained model: say what it does with these tokens
        from mhacli.io.trained import trained_notes

        notes(trained_notes(own, trace.tokens))
    return trace


def check_size(body: str, config: Config, json: bool = False) -> int:
    """Refuse an empty or oversized text before any array exists (and designed weights' limits); N."""
    from mhacli.io.inputs import count_tokens

    n = count_tokens(body, config, json=json)
    if config.weights == "designed":
        from mhacli.core.designed import check_designable

        check_designable(n, config)
    return n


def plan_outputs(*, plots: bool, out: Path | None, fmt: str, dpi: int, heads: int, compare: bool = False,
                 split: bool = True, names: Sequence[str] | None = None, inputs: Sequence[tuple[str, object]] = (),
                 **files: object) -> tuple[OutputPlan, str, int]:
    """Refuse a bad --format or --dpi, then resolve every output of the run once, before any work.

    Every path the run will write (the figures in --out, --save-npz, --html,
    --save) is decided here by :func:`mhacli.io.outputs.plan_outputs`: a
    trailing slash, a link in --out, an output over an input or over another
    output is a usage error now, not a clobbered file later.  ``names``
    overrides the figure names (train's and bench's own figures); ``split=False`` for an
    attention view, which has no split figure.  Nothing is
    created: :func:`open_figures` makes --out once the memory plan agrees.
    Returns the plan and the checked format and dpi.
    """
    from mhacli.io.outputs import figure_names
    from mhacli.io.outputs import plan_outputs as plan
    from mhacli.render.figures import check_dpi, check_format

    fmt, dpi = check_format(fmt), check_dpi(dpi)
    wanted: Sequence[str] = ()
    if plots and out is not None:
        wanted = names if names is not None else figure_names(heads, fmt, compare=compare, split=split)
    return plan(out=out, figure_names=wanted, inputs=inputs, **files), fmt, dpi


def open_figures(plan: OutputPlan, config: Config, n_tokens: int, max_tokens: int, fmt: str, dpi: int) -> None:
    """When the run draws figures: refuse, before anything is drawn, figures that would not fit in memory
    beside the run's arrays (pixels x dpi²), then create --out."""
    if plan.out is None or not plan.figures:
        return
    from mhacli.core.config import check_figures_fit
    from mhacli.io.files import prepare_out_dir

    # The arrays stay alive while the figures are drawn; both plans count Python and its libraries
    # once (planned_bytes(0) less the weights is that baseline), so it is taken out of this one.
    arrays = config.planned_bytes(n_tokens) - config.planned_bytes(0) + config.weight_bytes()
    check_figures_fit(config.heads, min(n_tokens, max_tokens), dpi, fmt, besides=arrays)
    prepare_out_dir(plan.out)


def read_files(file: Path | None, weights: str | None = None) -> list[tuple[str, object]]:
    """The files a run reads, as (option, path), so that no output is planned over one of them."""
    from mhacli.core.config import WEIGHT_KINDS

    read: list[tuple[str, object]] = [("--file", file)]
    if weights is not None and weights not in WEIGHT_KINDS:
        read.append(("--weights", weights))
    return read


def checked_query(query: str | None) -> str | None:
    """``--query`` refused at once when no text could have that position (thousands of digits)."""
    from mhacli.io.inputs import check_query

    return check_query(query)


def shown_folder(folder: Path | None) -> str | None:
    """A folder named in the renderers' notes ('the heatmaps are in …'), escaped: an --out name may hold
    escape sequences, which are spelled out, never obeyed."""
    from mhacli.core.messages import printable

    return printable(folder) if folder is not None else None


def query_position(trace: Trace, query: str | None) -> int | None:
    """``--query`` as a position in the trace (a number, or a token's text)."""
    from mhacli.render.figures import resolve_query

    return resolve_query(trace.tokens, query)


def single_head(trace: Trace) -> Trace:
    """The same X and weight matrices run as ONE head of size d: the magnifier's contrast."""
    from mhacli.core.compare import single_head as one_head

    return one_head(trace)


def html_max_tokens(ctx: typer.Context, max_tokens: int) -> int:
    """The page's window: 200 tokens (it stays quick up to there) unless --max-tokens was given."""
    from mhacli.render.html import DEFAULT_MAX_TOKENS

    given = ctx.get_parameter_source("max_tokens").name != "DEFAULT"  # type: ignore[union-attr]
    return max_tokens if given else DEFAULT_MAX_TOKENS


def write_figures(trace: Trace | AttentionView, out: Path, fmt: str, dpi: int, query: int | None, max_tokens: int,
                  hide_rules: bool = False, analysis: Analysis | None = None) -> list[str]:
    """Draw head-1 … head-h, heads, magnifiers and split into ``out`` (after the walkthrough is on screen).

    The one call of the figure module's per-run API: matplotlib is imported
    here, after the first line has appeared.  An attention view (``mha show
    FILE.npz``) has no single-head contrast and no split figure.
    """
    from mhacli.io.outputs import figure_names
    from mhacli.render.figures import save_figures
    from mhacli.render.labels import is_view

    view = is_view(trace)
    single = None if view else single_head(cast("Trace", trace))
    with figure_progress(len(figure_names(trace.num_heads, fmt, split=not view))) as progress:
        saved = save_figures(trace, single, out, fmt=fmt, dpi=dpi, query=query, max_tokens=max_tokens,
                             hide_rules=hide_rules, analysis=analysis, on_saved=progress)
    notes(list(getattr(saved, "notices", [])))
    return [str(p) for p in saved]


def write_compare(trace: Trace, single: Trace, out: Path, fmt: str, dpi: int, max_tokens: int,
                  hide_rules: bool = False, comparison: Comparison | None = None) -> list[str]:
    """Draw single-vs-multi into ``out``."""
    from mhacli.render.figures import save_compare

    with figure_progress(1) as progress:
        saved = save_compare(trace, single, out, fmt=fmt, dpi=dpi, max_tokens=max_tokens, comparison=comparison,
                             hide_rules=hide_rules, on_saved=progress)
    notes(list(getattr(saved, "notices", [])))
    return [str(p) for p in saved]


def source_args(text: str | None, file: Path | None, sample: str | None) -> str:
    """How the text was given, as it would be typed again (for 'what next' hints)."""
    import shlex

    from mhacli.core.messages import printable

    # printable: the text or a file name may hold escape sequences; they are shown, not obeyed.
    if file is not None:
        return printable(f"--file {shlex.quote(str(file))}")
    if sample is not None:
        return printable(f"--sample {shlex.quote(sample)}")
    shown = text or ""
    if len(shown) > 60:  # a long text is recalled, not reprinted
        shown = shown[:59] + "…"
    return printable(shlex.quote(shown))


def config_args(config: Config, skip: tuple[str, ...] = ()) -> str:
    """The options that differ from the defaults, as they would be typed again."""
    default = Config()
    out = []
    for name in ("heads", "d_model", "seed", "tokenizer", "weights"):
        if name not in skip and getattr(config, name) != getattr(default, name):
            out.append(f"--{name.replace('_', '-')} {getattr(config, name)}")
    if config.causal:
        out.append("--causal")
    if not config.positions:
        out.append("--no-positions")
    return " ".join(out)


__all__ = ["check_size", "checked_query", "config_args", "config_from", "html_max_tokens", "open_figures",
           "plan_outputs", "query_position", "read_files", "run_trace", "shown_folder", "single_head", "source_args",
           "write_compare", "write_figures"]
