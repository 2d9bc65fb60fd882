"""Writing the figures of a run atomically, in order: PNGs from the canvas, SVG and PDF by savefig."""

from __future__ import annotations

import io
import re
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, cast

from mhacli.io.files import atomic_write
from mhacli.render.figures.head import HeadFigure
from mhacli.render.figures.heads import build_heads
from mhacli.render.figures.layout import RENDER_RC, Pen, drawing
from mhacli.render.figures.magnifiers import build_magnifiers
from mhacli.render.figures.single_vs_multi import build_compare
from mhacli.render.figures.split import split_figure
from mhacli.render.figures.view import DPI, check_dpi, check_format

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mhacli.attention.trace import Trace
    from mhacli.pipeline import Run, Window

#: zlib level of the PNG writer: the figures' flat paper and cells compress well unfiltered at level 1
#: (measurements in docs/performance.md).
PNG_COMPRESSION = 1


class Saved(list):  # type: ignore[type-arg]
    """The paths written, in order, and notices to print once (missing glyphs, leftover files)."""

    def __init__(self, paths: Sequence[Path] = (), notices: Sequence[str] = ()) -> None:
        super().__init__(paths)
        self.notices: list[str] = list(notices)


def save(fig: Figure, path: Path, fmt: str, dpi: int) -> Path:
    """Write ``fig`` atomically (a temporary sibling, then a rename): never a half-written image."""
    return atomic_write(Path(path), partial(_encode, fig, fmt=fmt, dpi=dpi))


def _encode(fig: Figure, handle: IO[bytes], fmt: str, dpi: int) -> None:
    """``fig`` as a ``fmt`` file into ``handle``, with the options that make the same figure the same bytes."""
    import matplotlib

    if fmt == "png":
        with matplotlib.rc_context(RENDER_RC):  # type: ignore[arg-type]
            write_png(fig, handle, dpi)
        return
    options: dict[str, Any] = {  # type: ignore[assignment]
        "svg": {"metadata": {"Date": None}},  # no date inside: same figure, same bytes
        "pdf": {"metadata": {"CreationDate": None}},
    }[fmt]
    with matplotlib.rc_context(RENDER_RC):  # type: ignore[arg-type]
        fig.savefig(handle, format=fmt, dpi=dpi, **options)


def write_png(fig: Figure, handle: IO[bytes], dpi: int) -> None:
    """``fig`` drawn on its canvas at ``dpi`` (:func:`~.inline.rgba`), written as an RGB PNG (see PNG_COMPRESSION)."""
    from mhacli.render.figures.inline import rgba

    pixels, width, height = rgba(fig, dpi)
    handle.write(png_bytes(pixels, width, height, dpi))


def png_bytes(rgba: bytes | memoryview, width: int, height: int, dpi: float) -> bytes:
    """RGBA pixels (row by row, top first) as an RGB PNG: unfiltered rows, zlib at :data:`PNG_COMPRESSION`, and
    the dpi in a pHYs chunk (as Pillow writes it: dots per metre, rounded)."""
    import struct
    import zlib

    from PIL import Image  # matplotlib's own dependency, loaded with it

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    # Pillow drops the alpha channel in C, 3.5 times quicker than a strided numpy copy; each row is then compressed
    # behind its filter type (0, none) straight from those bytes. Pillow reads any buffer, a memoryview too.
    rgb = memoryview(Image.frombuffer("RGBA", (width, height), rgba, "raw", "RGBA", 0, 1)  # type: ignore[arg-type]
                     .convert("RGB").tobytes())
    stream, stride, none = zlib.compressobj(PNG_COMPRESSION), 3 * width, b"\x00"
    data = [part for row in range(height) for part in (stream.compress(none),
                                                       stream.compress(rgb[row * stride:(row + 1) * stride]))]
    data.append(stream.flush())
    per_metre = int(dpi / 0.0254 + 0.5)
    return b"".join((b"\x89PNG\r\n\x1a\n",
                     chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)),  # 8-bit RGB
                     chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1)),
                     chunk(b"IDAT", b"".join(data)),
                     chunk(b"IEND", b"")))


def leftovers(out_dir: Path, heads: int, fmt: str) -> str | None:
    """head-K files from an earlier run with more heads: left alone, but named so nobody mixes them up."""
    def number(p: Path) -> int:
        return int(p.name.split("-")[1].split(".")[0])

    extra = sorted((p for p in out_dir.glob(f"head-*.{fmt}")
                    if re.fullmatch(rf"head-(\d+)\.{fmt}", p.name) and number(p) > heads), key=number)
    if not extra:
        return None
    names = extra[0].name if len(extra) == 1 else f"{extra[0].name} … {extra[-1].name}"
    return (f"{out_dir} also holds {names} from an earlier run with more heads; this run has "
            f"{heads} head{'s' if heads != 1 else ''}, so those files are not from it (left untouched).")


def _save_all(named: Callable[[Pen, float | None], Iterable[tuple[str, Figure]]], out_dir: Path, fmt: str, dpi: int,
              on_saved: Callable[[Path], None] | None) -> Saved:
    """Each (name, figure) of ``named(pen, raster_dpi)`` written into ``out_dir`` (created if missing) as it is
    drawn; ``on_saved(path)`` per file. Returns the paths, with the notices drawing gave (undrawable characters)."""
    fmt, dpi = check_format(fmt), check_dpi(dpi)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    saved = Saved()
    with drawing() as pen:
        for name, fig in named(pen, dpi if fmt == "png" else None):
            saved.append(save(fig, out / f"{name}.{fmt}", fmt, dpi))
            if on_saved is not None:
                on_saved(saved[-1])
    saved.notices[:0] = pen.notices()
    return saved


def save_figures(result: Run, out_dir: Path, fmt: str = "png", dpi: int = DPI, *, hide_rules: bool = False,
                 on_saved: Callable[[Path], None] | None = None) -> Saved:
    """Write ``head-1 … head-h``, ``heads``, ``magnifiers`` and ``split`` (not for a view) into ``out_dir``; a
    leftover head-K file is named in the notices."""
    _window(result.figures), _window(result.magnified)  # refused before anything is drawn
    saved = _save_all(lambda pen, raster: _figures(result, pen, hide_rules, raster), out_dir, fmt, dpi, on_saved)
    leftover = leftovers(Path(out_dir), result.trace.num_heads, check_format(fmt))
    if leftover:
        saved.notices.append(leftover)
    return saved


def save_compare(result: Run, out_dir: Path, fmt: str = "png", dpi: int = DPI, *, hide_rules: bool = False,
                 on_saved: Callable[[Path], None] | None = None) -> Saved:
    """Write ``single-vs-multi`` into ``out_dir``, from a run with its one-head twin and their comparison."""
    single, comparison, window = result.single, result.comparison, _window(result.figures)
    if single is None or comparison is None:
        raise ValueError("save_compare draws a run made with compare=True (its single head and comparison)")
    return _save_all(lambda pen, _: [("single-vs-multi", build_compare(result.trace, single, comparison, window, pen,
                                                                        hide_rules=hide_rules))],
                     out_dir, fmt, dpi, on_saved)


def _figures(result: Run, pen: Pen, hide_rules: bool,
             raster_dpi: float | None = None) -> Iterator[tuple[str, Figure]]:
    """Each figure of the run by name, in the order the files are written, drawn as it is asked for; built at
    ``raster_dpi``, the dpi of the PNGs they become, so the renderer that measures their texts draws them."""
    from mhacli.render.labels import is_view

    trace, figures, magnified = result.trace, _window(result.figures), _window(result.magnified)

    def at_dpi(build: Callable[[], Any]) -> Any:
        import matplotlib

        with matplotlib.rc_context({"figure.dpi": raster_dpi} if raster_dpi else {}):
            return build()

    # One per-head figure, updated for each head: its layout, labels and colour bar are built once.
    per_head = at_dpi(lambda: HeadFigure(trace, figures, pen, hide_rules))
    for i in range(trace.num_heads):
        yield f"head-{i + 1}", per_head.show(i)
    yield "heads", at_dpi(lambda: build_heads(trace, figures, pen, hide_rules))
    yield "magnifiers", at_dpi(lambda: build_magnifiers(trace, None if is_view(trace) else result.single, magnified,
                                                        pen, hide_rules))
    if not is_view(trace):
        yield "split", split_figure(cast("Trace", trace), hide_rules=hide_rules, pen=pen, dpi=raster_dpi)


def _file_bytes(fig: Figure, fmt: str, dpi: int) -> bytes:
    """``fig`` as the bytes of its file, as :func:`save` writes them."""
    buffer = io.BytesIO()
    _encode(fig, buffer, fmt, dpi)
    return buffer.getvalue()


def drawn_one_vs_many(pairs: Sequence[Any], fmt: str, dpi: int, hide_rules: bool) -> bytes:
    """``mha demo``'s last slide (:func:`~mhacli.render.figures.one_vs_many.one_vs_many_figure`) as file bytes."""
    from mhacli.render.figures.one_vs_many import one_vs_many_figure

    return _file_bytes(one_vs_many_figure(pairs, hide_rules=hide_rules), check_format(fmt), check_dpi(dpi))


def _window(window: Window | None) -> Window:
    """A window the pipeline chose; a result drawn without one is the caller's mistake, said plainly."""
    if window is None:
        raise ValueError("the figures draw a result whose windows are chosen: pass mhacli.pipeline.shown(result)")
    return window
