"""What several commands do the same way: build the Config, check figure options, draw the figures.

Heavy modules (numpy through the core, matplotlib through the figures) are
imported inside these functions, so ``mha --help`` stays quick.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mhacli.cli.output import notes, spinner
from mhacli.core.config import Config
from mhacli.core.errors import UsageError

if TYPE_CHECKING:
    from mhacli.core.analysis import Analysis
    from mhacli.core.compare import Comparison
    from mhacli.core.trace import Trace

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
    if isinstance(given, str) and given not in ("random", "designed"):
        from mhacli.io.weights import resolve_weights

        own = resolve_weights(given)
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
            source = ctx.get_parameter_source("d_model")
            if source is None or source.name == "DEFAULT":
                params["d_model"] = own.d_model
    return Config(**params)


def run_trace(body: str, config: Config, ctx: typer.Context | None = None) -> Trace:
    """The core's run of ``body`` under ``config`` (with the weights file config_from read, if any)."""
    from mhacli.core.trace import run

    options = asdict(config)
    own = ctx.meta.get(_OWN_WEIGHTS) if ctx is not None else None
    if own is not None:
        options["weights"] = own
    trace = run(body, **options)
    if own is not None and hasattr(own, "stand_ins"):  # a trained model: say what it does with these tokens
        from mhacli.io.trained import trained_notes

        notes(trained_notes(own, trace.tokens))
    return trace


def check_size(body: str, config: Config, json: bool = False) -> None:
    """Refuse an empty or oversized text before any array exists (and designed weights' limits)."""
    from mhacli.io.inputs import count_tokens

    n = count_tokens(body, config, json=json)
    if config.weights == "designed":
        from mhacli.core.designed import check_designable

        check_designable(n, config)


def check_figure_options(plots: bool, out: Path, fmt: str, dpi: int) -> tuple[str, int]:
    """Refuse a bad --format, --dpi or --out before any work; create --out when figures are on."""
    from mhacli.io.files import prepare_out_dir
    from mhacli.render.figures import check_dpi, check_format

    fmt, dpi = check_format(fmt), check_dpi(dpi)
    if plots:
        prepare_out_dir(out)
    return fmt, dpi


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


def write_figures(trace: Trace, out: Path, fmt: str, dpi: int, query: int | None, max_tokens: int,
                  hide_rules: bool = False, analysis: Analysis | None = None) -> list[str]:
    """Draw head-1 … head-h, heads and magnifiers into ``out`` (after the walkthrough is on screen).

    The one call of the figure module's per-run API: matplotlib is imported
    here, after the first line has appeared.
    """
    from mhacli.render.figures import save_figures

    with spinner("drawing figures…"):
        saved = save_figures(trace, single_head(trace), out, fmt=fmt, dpi=dpi, query=query, max_tokens=max_tokens,
                             hide_rules=hide_rules, analysis=analysis)
    notes(list(getattr(saved, "notices", [])))
    return [str(p) for p in saved]


def write_compare(trace: Trace, single: Trace, out: Path, fmt: str, dpi: int, max_tokens: int,
                  hide_rules: bool = False, comparison: Comparison | None = None) -> list[str]:
    """Draw single-vs-multi into ``out``."""
    from mhacli.render.figures import save_compare

    with spinner("drawing figures…"):
        saved = save_compare(trace, single, out, fmt=fmt, dpi=dpi, max_tokens=max_tokens, comparison=comparison,
                             hide_rules=hide_rules)
    notes(list(getattr(saved, "notices", [])))
    return [str(p) for p in saved]


def source_args(text: str | None, file: Path | None, sample: str | None) -> str:
    """How the text was given, as it would be typed again (for 'what next' hints)."""
    import shlex

    from mhacli.core.tokenize import printable

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


__all__ = ["check_figure_options", "check_size", "config_args", "config_from", "html_max_tokens",
           "query_position", "run_trace", "single_head", "source_args", "write_compare", "write_figures"]
