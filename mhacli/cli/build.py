"""A command's options made into one frozen :class:`~mhacli.request.Request`, checked once, before any work."""

from __future__ import annotations

from pathlib import Path

from mhacli.cli.options import DPI, FORMAT, MAX_TOKENS, OUT_DIR
from mhacli.attention.errors import UsageError
from mhacli.request import ModelOptions, Outputs, Request, Source


def request(*, model: ModelOptions | None = None, text: str | None = None, file: Path | None = None,
            sample: str | None = None, read_text: bool = True, worked: bool = False, quiet: bool = False,
            max_tokens: int | None = None, show_values: bool = False, hide_rules: bool = False,
            out: Path | None = None, plots: bool = True, fmt: str | None = None, dpi: int = DPI,
            query: str | None = None, html: str | None = None, json_out: bool = False, json_arrays: bool | None = None,
            save_npz: str | None = None, figures: bool = False) -> Request:
    """The request of one command: the text read (unless ``read_text`` is False: a saved run, --worked), every
    output option checked (--json-arrays without --json is a usage error, not a no-op; --format, --dpi, --query).
    ``None`` means "not given" throughout. ``figures``: drawn into --out (default mha-output), except with --json
    when neither --out nor --format was typed.
    """
    from mhacli.io.inputs import check_query, resolve_text
    from mhacli.render.figures import check_dpi, check_format

    if worked and (text is not None or file is not None or sample is not None):
        raise UsageError("--worked brings its own three tokens; drop the text, --file or --sample.")
    if worked and model is not None and model.words:
        raise UsageError("--worked brings its own three tokens and weights; drop --words.")
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


__all__ = ["request"]
