"""Figures that read a Trace: one heatmap per head, all heads on one slide, the magnifiers.

* ``head-1.png … head-h.png``: the weights A^i of one head, keys along x (top),
  queries along y, one colour scale from 0 to 1.
* ``heads.png``: every head on the same scale, with the average over heads that
  PyTorch returns by default.
* ``magnifiers.png``: the article's analogy drawn literally — the sentence once
  per head, led by a magnifying glass in that head's colour, each token shaded by
  the attention it receives; above them, the same sentence under one head of size d.
* ``single-vs-multi.png`` (``mha compare``): one head against h, with the two
  numbers of :mod:`mhacli.core.compare`.

matplotlib is imported only inside the functions that draw, through its object
API (``Figure`` with the Agg canvas, never pyplot), so the rest of the tool starts
without it.  Layout is computed by hand in inches from measured label widths:
cheaper than a layout engine, and nothing can be cut off because every margin is
sized from what goes in it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import unicodedata
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from mhacli.render import theme
from mhacli.core.analysis import query_view, summarize_heads
from mhacli.core.errors import UsageError
from mhacli.io.files import atomic_write
from mhacli.core.tokenize import graphemes, label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.collections import QuadMesh
    from matplotlib.patches import PathPatch, Rectangle
    from matplotlib.text import Text

    from mhacli.core.compare import Comparison
    from mhacli.core.trace import Trace

FORMATS = ("png", "svg", "pdf")
DPI_MIN, DPI_MAX = 30, 600

# Fonts tried in order for each character: matplotlib (3.6+) falls back from one
# family to the next glyph by glyph.  Only families that are installed are used.
# Colour emoji fonts (bitmap glyphs) are left out: FreeType cannot scale them.
FALLBACK_FAMILIES = (
    "DejaVu Sans", "Noto Sans", "Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC",
    "Noto Sans CJK KR", "Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
    "Droid Sans Fallback", "Noto Sans Arabic", "Noto Sans Hebrew", "Noto Sans Devanagari",
    "Noto Sans Thai", "Noto Sans Symbols", "Noto Sans Symbols 2", "Noto Emoji", "Symbola",
    "Segoe UI", "Segoe UI Symbol", "Microsoft YaHei", "Yu Gothic", "Malgun Gothic",
    "PingFang SC", "Hiragino Sans", "Apple SD Gothic Neo", "Arial Unicode MS",
)
_GLYPH_WARNING = re.compile(r"Glyph (\d+) .*missing from font")
_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")

PT = 1 / 72  # one typographic point, in inches


# --------------------------------------------------------------------------
# Options checked before any work is done
# --------------------------------------------------------------------------


def check_format(fmt: str) -> str:
    """The figure format, lower-cased; refuse anything but png, svg, pdf."""
    value = str(fmt).lower().lstrip(".")
    if value not in FORMATS:
        raise UsageError(f"unknown figure format {fmt!r}; choose one of: {', '.join(FORMATS)}.")
    return value


def check_dpi(dpi: int) -> int:
    """Dots per inch for raster output, within a range that is readable and fits in memory."""
    if isinstance(dpi, bool) or not isinstance(dpi, int) or not DPI_MIN <= dpi <= DPI_MAX:
        raise UsageError(f"--dpi must be a whole number from {DPI_MIN} to {DPI_MAX}, got {dpi!r}.")
    return dpi


def resolve_query(tokens: Sequence[str], query: int | str | None) -> int | None:
    """The query position chosen by ``--query``: a 0-based position, or a token's text (first match)."""
    if query is None:
        return None
    n = len(tokens)
    text = str(query).strip()
    if isinstance(query, int) or re.fullmatch(r"[+-]?\d+", text):
        pos = int(text)
        if not 0 <= pos < n:
            raise UsageError(f"--query {pos} is outside the sentence; give a position from 0 to {n - 1} "
                             "or one of its tokens.")
        return pos
    for wanted in (text, text.casefold()):
        for p, tok in enumerate(tokens):
            if (tok if wanted is text else tok.casefold()) == wanted:
                return p
    distinct = list(dict.fromkeys(label(t, 16) for t in tokens))
    shown = ", ".join(distinct[:12]) + (", …" if len(distinct) > 12 else "")
    raise UsageError(f"--query {label(text, 24)!r} is not a token of the text; give a position from "
                     f"0 to {n - 1} or one of: {shown}.")


@dataclass(frozen=True)
class View:
    """Which tokens a figure shows: all of them, or a window of ``--max-tokens`` (0-based, stop excluded)."""

    start: int
    stop: int
    n_total: int
    query: int | None = None

    @property
    def n(self) -> int:
        return self.stop - self.start

    @property
    def windowed(self) -> bool:
        return self.n < self.n_total

    @property
    def rows(self) -> slice:
        return slice(self.start, self.stop)

    def note(self) -> str:
        """What the window shows, for titles."""
        return (f"window: tokens {self.start}–{self.stop - 1} of {self.n_total} "
                f"(--max-tokens {self.n})")


def token_view(n_tokens: int, max_tokens: int, query: int | None = None) -> View:
    """The first ``max_tokens`` tokens, or a window centred on the query when it lies beyond them."""
    max_tokens = max(1, int(max_tokens))
    if n_tokens <= max_tokens:
        return View(0, n_tokens, n_tokens, query)
    start = 0
    if query is not None and query >= max_tokens:
        start = min(max(query - max_tokens // 2, 0), n_tokens - max_tokens)
    return View(start, start + max_tokens, n_tokens, query)


# --------------------------------------------------------------------------
# Fonts, safe labels, measuring
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Face:
    """One installed fallback family: the characters it has and its regular and bold files."""

    family: str
    chars: frozenset[int]
    regular: str
    bold: str


@functools.lru_cache(maxsize=1)
def font_faces() -> tuple[Face, ...]:
    """Installed fallback families, in order, with the characters each can draw."""
    from matplotlib import font_manager

    installed = {entry.name for entry in font_manager.fontManager.ttflist}
    faces = []
    for family in FALLBACK_FAMILIES:
        if family not in installed:
            continue
        try:
            regular = font_manager.findfont(font_manager.FontProperties(family=family),
                                            fallback_to_default=False)
            bold = font_manager.findfont(font_manager.FontProperties(family=family, weight="bold"),
                                         fallback_to_default=False)
            chars = frozenset(font_manager.get_font(regular).get_charmap())
        except Exception:  # noqa: BLE001 - a broken font file is skipped, never fatal
            continue
        faces.append(Face(family, chars, regular, bold))
    if not faces:  # matplotlib always ships DejaVu Sans; this is belt and braces
        path = font_manager.findfont("DejaVu Sans")
        faces.append(Face("DejaVu Sans", frozenset(range(0x20, 0x7F)), path, path))
    return tuple(faces)


def _invisible(ch: str) -> bool:
    """Joiners, variation selectors and tags: they shape emoji but draw nothing on their own."""
    cp = ord(ch)
    return (unicodedata.category(ch) == "Cf" or 0xFE00 <= cp <= 0xFE0F or 0xE0000 <= cp <= 0xE0FFF
            or 0x1F3FB <= cp <= 0x1F3FF)


class Pen:
    """What every figure of one run shares: fonts, a text measurer and the glyphs found missing."""

    def __init__(self) -> None:
        self.faces = font_faces()
        self.families = tuple(face.family for face in self.faces)
        self._advances: dict[tuple[str, bool], float] = {}
        self.missing: dict[str, None] = {}  # ordered set of clusters no font can draw

    def has_glyph(self, ch: str) -> bool:
        cp = ord(ch)
        return any(cp in face.chars for face in self.faces)

    def shown(self, token: str, max_chars: int = 12) -> str:
        """A token as drawable text: safe, shortened, and any cluster no font has as its code point."""
        pieces: list[str] = []
        for cluster in graphemes(label(token, max_chars)):
            if self.has_glyph(cluster[0]):
                drawable = "".join(ch for ch in cluster if self.has_glyph(ch) or not _invisible(ch))
                if any(not self.has_glyph(ch) for ch in drawable):
                    self.missing[cluster] = None
                pieces.append(drawable)
            elif _invisible(cluster[0]) and len(cluster) == 1:
                continue
            else:
                self.missing[cluster] = None
                pieces.append(f"U+{ord(cluster[0]):04X}")
        out, used = [], 0
        for piece in pieces:
            if out and used + len(piece) > max_chars:
                out.append("…")
                break
            out.append(piece)
            used += len(piece)
        return "".join(out) or "·"

    def _advance(self, ch: str, bold: bool) -> float:
        """Advance width of one character at 1 pt, from the first family that has it."""
        key = (ch, bold)
        if key not in self._advances:
            from matplotlib.font_manager import get_font
            from matplotlib.ft2font import LoadFlags

            cp = ord(ch)
            face = next((f for f in self.faces if cp in f.chars), self.faces[0])
            font = get_font(face.bold if bold else face.regular)
            font.set_size(100, 72)
            try:
                advance = font.load_char(cp, flags=LoadFlags.NO_HINTING).linearHoriAdvance / 65536
            except Exception:  # noqa: BLE001 - a glyph the font cannot load: assume a wide one
                advance = 100.0
            self._advances[key] = advance / 100
        return self._advances[key]

    def width(self, text: str, size: float, bold: bool = False) -> float:
        """Width of ``text`` at ``size`` points, in inches.

        The sum of the characters' advances (cached per character), 3 % wider to
        cover kerning and hinting: measuring each string with the text engine
        costs about a millisecond, this costs microseconds, and layout only
        needs to know that things fit.
        """
        return sum(self._advance(ch, bold) for ch in text) * size * PT * 1.03

    def widest(self, texts: Sequence[str], size: float, bold: bool = False) -> float:
        return max((self.width(t, size, bold) for t in texts), default=0.0)

    def wrap(self, text: str, width_in: float, size: float, bold: bool = False) -> list[str]:
        """Lines of ``text`` that fit ``width_in`` inches at ``size`` points (measured, not guessed)."""
        lines: list[str] = []
        for paragraph in text.split("\n"):
            words = paragraph.split(" ")
            line = ""
            for word in words:
                trial = f"{line} {word}" if line else word
                if line and self.width(trial, size, bold) > width_in:
                    lines.append(line)
                    line = word
                else:
                    line = trial
            lines.append(line)
        return lines

    def glyph_notice(self) -> str | None:
        """One line about characters no installed font can draw, or None."""
        if not self.missing:
            return None
        chars = list(self.missing)
        listed = " ".join(chars[:8]) + (" …" if len(chars) > 8 else "")
        example = f"U+{ord(chars[0][0]):04X}"
        return (f"{len(chars)} character{'s' if len(chars) != 1 else ''} of the text "
                f"({listed}) {'have' if len(chars) != 1 else 'has'} no glyph in the installed fonts "
                f"({', '.join(self.families)}); the figures show code points instead (such as "
                f"{example}). Install a font that has them (for example Noto Sans CJK or Noto Emoji) "
                "to see them drawn.")


# Read when a figure is rendered (not when it is built), so every save applies them.
RENDER_RC = {
    "text.hinting": "no_hinting",  # glyphs as wide at 30 dpi as at 600: the layout holds at any --dpi
    "svg.hashsalt": "mhacli",  # same figure, same SVG bytes
    "svg.fonttype": "path",  # text as outlines: SVGs look the same without our fonts
}


def render(fig: Figure, dpi: int) -> None:
    """Draw ``fig`` on its Agg canvas at ``dpi``, under :data:`RENDER_RC`."""
    import matplotlib

    with matplotlib.rc_context(RENDER_RC):
        fig.set_dpi(dpi)
        fig.canvas.draw()


@contextlib.contextmanager
def drawing(pen: Pen | None = None) -> Iterator[Pen]:
    """Settings every figure is built and saved under: fonts with fallback, no math parsing of tokens.

    matplotlib's own "Glyph … missing" warnings are collected into the pen
    (reported once, by the caller) instead of being printed per label.
    """
    import matplotlib

    pen = pen or Pen()
    rc = {
        **RENDER_RC,
        "font.family": list(pen.families),
        "text.parse_math": False,  # a token like "$5" is text, never mathtext
        "figure.facecolor": theme.PAPER_COLOR,
        "savefig.facecolor": theme.PAPER_COLOR,
        "text.color": theme.LABEL_COLOR,
        "axes.edgecolor": theme.LABEL_COLOR,
        "xtick.color": theme.LABEL_COLOR,
        "ytick.color": theme.LABEL_COLOR,
        "hatch.linewidth": 1.0,
        "image.interpolation": "nearest",
    }
    with matplotlib.rc_context(rc), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield pen
        finally:
            for w in caught:
                found = _GLYPH_WARNING.search(str(w.message))
                if found:
                    pen.missing[chr(int(found.group(1)))] = None
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _new_figure(width: float, height: float) -> Figure:
    """A Figure with the Agg canvas attached: no pyplot, no global state, no display needed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _snap(inches: float) -> float:
    """Round a figure size up to 1/8 inch, so width × dpi is exact in binary floating point."""
    return math.ceil(inches * 8 - 1e-9) / 8


class Sheet:
    """A figure laid out by hand on one canvas: positions in inches from the top-left corner.

    Everything is drawn into a single full-figure Axes whose data units are
    inches (y grows downwards), with its own axis machinery switched off.  A
    heatmap is then a QuadMesh, a frame and some texts at computed positions:
    no Axes, ticks or layout engine per heatmap, which is most of what a
    matplotlib figure costs to build and draw.
    """

    def __init__(self, width: float, height: float) -> None:
        self.w, self.h = _snap(width), _snap(height)
        self.fig = _new_figure(self.w, self.h)
        self.ax = self.fig.add_axes((0.0, 0.0, 1.0, 1.0))
        self.ax.set_xlim(0.0, self.w)
        self.ax.set_ylim(self.h, 0.0)
        self.ax.set_axis_off()
        self.colour_bars: list[ColourBar] = []
        self.fig.mhacli_sheet = self  # type: ignore[attr-defined]  # for tests: what was laid out

    def axes(self, left: float, top: float, width: float, height: float) -> Axes:
        """A real Axes at this place (for a chart with axes of its own)."""
        return self.fig.add_axes((left / self.w, 1 - (top + height) / self.h, width / self.w,
                                  height / self.h))

    def text(self, x: float, y: float, s: str, **kw: Any) -> Text:
        """Text anchored at (x, y) inches from the top-left; defaults: left, top aligned."""
        kw.setdefault("ha", "left")
        kw.setdefault("va", "top")
        return self.ax.text(x, y, s, **kw)


def _place(ax: Axes, patch: Any) -> Any:
    """Add a patch to a canvas without ``add_patch``'s data-limit update (the canvas limits are fixed)."""
    return ax.add_artist(patch)


def _ordinal(k: int) -> str:
    """2nd, 3rd, 4th … 11th, 21st."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _sup(i: int) -> str:
    return str(i).translate(_SUPERSCRIPTS)


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def _line(size: float) -> float:
    """Height of one line of text at ``size`` points, in inches."""
    return size * 1.3 * PT


def _label_pad(frame_width: float) -> float:
    """Gap between a heatmap's frame and its token labels, in inches (the frame straddles the edge)."""
    return frame_width * PT / 2 + 3 * PT


# --------------------------------------------------------------------------
# The ax-first helper: one attention matrix as a heatmap
# --------------------------------------------------------------------------


def _cmap() -> Any:
    import matplotlib

    cmap = matplotlib.colormaps[theme.HEATMAP_CMAP].with_extremes(bad=theme.MASK_COLOR)
    return cmap


def _mask_path(mask: np.ndarray, left: float, top: float, cell: float) -> Any:
    """One compound path covering every blocked cell: a rectangle per run of blocked keys in a row."""
    from matplotlib.path import Path as MplPath

    rects = []
    for r, row in enumerate(mask):
        c, n = 0, len(row)
        while c < n:
            if row[c]:
                start = c
                while c < n and row[c]:
                    c += 1
                x0, x1 = left + start * cell, left + c * cell
                y0, y1 = top + r * cell, top + (r + 1) * cell
                rects.append(MplPath([(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)], closed=True))
            else:
                c += 1
    return MplPath.make_compound_path(*rects)


def _value_text(v: float) -> str:
    return f"{v:.2f}"


class TextPaths:
    """Short texts drawn as glyph outlines, many of them in one collection.

    A matplotlib Text costs about a millisecond to lay out and rasterise; a
    heads grid has hundreds of cell values and the magnifier picture repeats
    every token once per head.  Each distinct string is cut once from the font
    as an outline (numbers digit by digit, tokens whole, with font fallback),
    and all of a figure's strings become the paths of one ``PathCollection``:
    a single draw call that looks the same and costs far less.
    """

    FAMILY = "DejaVu Sans"  # ships with matplotlib and has every digit, "." and "%"
    CAP = 0.729  # height of a digit in DejaVu Sans, in em: used to centre texts vertically
    DIGITS = frozenset("0123456789.%-")

    def __init__(self) -> None:
        self._glyphs: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}
        self._paths: dict[tuple[str, str, tuple[str, ...]], Any] = {}

    def _glyph(self, ch: str) -> tuple[np.ndarray, np.ndarray, float]:
        if ch not in self._glyphs:
            from matplotlib.font_manager import FontProperties
            from matplotlib.textpath import TextPath, text_to_path

            prop = FontProperties(family=self.FAMILY, size=1.0)
            path = TextPath((0, 0), ch, size=1.0, prop=prop)
            advance = text_to_path.get_text_width_height_descent(ch, prop, ismath=False)[0]
            self._glyphs[ch] = (np.asarray(path.vertices), np.asarray(path.codes), advance)
        return self._glyphs[ch]

    def _outline(self, text: str, families: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, float]:
        """Vertices, codes and advance width of ``text`` at size 1, baseline at y = 0."""
        if set(text) <= self.DIGITS:  # numbers: compose cached digits (their advances are fixed)
            verts, codes, x = [], [], 0.0
            for ch in text:
                v, c, advance = self._glyph(ch)
                if len(v):
                    verts.append(v + (x, 0.0))
                    codes.append(c)
                x += advance
            if not verts:
                return np.zeros((0, 2)), np.zeros(0, np.uint8), x
            return np.concatenate(verts), np.concatenate(codes), x
        from matplotlib.font_manager import FontProperties
        from matplotlib.textpath import text_to_path

        # ismath=False: a token like "$x^2$" is text, whatever the rc settings say.
        verts, codes = text_to_path.get_text_path(FontProperties(family=list(families), size=1.0),
                                                  text, ismath=False)
        verts = np.asarray(verts, dtype=float).reshape(-1, 2) / text_to_path.FONT_SCALE
        x = float(verts[:, 0].max()) if len(verts) else 0.0  # control points bound the outline
        return verts, np.asarray(codes, dtype=np.uint8), x

    DESCENT = 0.236  # depth of descenders below the baseline in DejaVu Sans, in em

    def path(self, text: str, align: str = "center", families: Sequence[str] = ()) -> Any:
        """``text`` as one path in points at size 1, placed against the origin as ``align`` says.

        ``center``: centred both ways (cell numbers, tokens in boxes); ``top``: centred,
        hanging below the origin; ``bottom``: centred, standing on it (key labels);
        ``up``: turned to read upwards from the origin (crowded key labels);
        ``right``: ending at the origin, centred vertically (query labels).
        """
        key = (text, align, tuple(families) or (self.FAMILY,))
        if key not in self._paths:
            from matplotlib.path import Path as MplPath

            verts, codes, width = self._outline(text, key[2])
            if not len(verts):
                self._paths[key] = MplPath(np.zeros((1, 2)), [MplPath.MOVETO])
                return self._paths[key]
            if align == "up":  # rotate a quarter turn anticlockwise: (x, y) -> (-y, x)
                verts = np.column_stack([-verts[:, 1] + self.CAP / 2, verts[:, 0]])
            else:
                dx = {"right": -width}.get(align, -width / 2)
                dy = {"top": -self.CAP, "bottom": self.DESCENT}.get(align, -self.CAP / 2)
                verts = verts + (dx, dy)
            self._paths[key] = MplPath(verts, codes)
        return self._paths[key]

    def collection(self, ax: Axes, xy: np.ndarray, texts: Sequence[str], size: float,
                   colors: Sequence[str], align: str = "center", zorder: float = 3.0,
                   families: Sequence[str] = ()) -> Any:
        """One PathCollection drawing ``texts`` at data positions ``xy`` in ``size``-point type."""
        from matplotlib.collections import PathCollection
        from matplotlib.transforms import Affine2D

        points_to_pixels = Affine2D().scale(size / 72) + ax.figure.dpi_scale_trans
        coll = PathCollection([self.path(t, align, families) for t in texts],
                              offsets=np.asarray(xy, float), offset_transform=ax.transData,
                              transform=points_to_pixels, facecolors=list(colors),
                              edgecolors="none", linewidths=0.0, zorder=zorder)
        coll.set_transform(points_to_pixels)
        ax.add_collection(coll, autolim=False)
        coll.mhacli_texts = list(texts)  # type: ignore[attr-defined]  # what was drawn, for tests
        coll.mhacli_size = size  # type: ignore[attr-defined]
        return coll

    def update(self, coll: Any, texts: Sequence[str], colors: Sequence[str],
               align: str = "center") -> None:
        """Show other numbers in an existing collection (same positions)."""
        coll.set_paths([self.path(t, align) for t in texts])
        coll.set_facecolors(list(colors))
        coll.mhacli_texts = list(texts)


@functools.lru_cache(maxsize=1)
def numbers() -> TextPaths:
    """The process-wide cache of text outlines."""
    return TextPaths()


def _cell_values(weights: np.ndarray, mask: np.ndarray | None) -> tuple[list[str], list[str]]:
    """The number and its ink colour for every cell, row-major; blocked cells stay empty."""
    flat = weights.ravel()
    blocked = mask.ravel() if mask is not None else np.zeros(flat.shape, bool)
    texts = ["" if b else _value_text(v) for v, b in zip(flat.tolist(), blocked.tolist())]
    inks = [theme.heat_ink(v) for v in flat.tolist()]
    return texts, inks


@dataclass
class Heatmap:
    """The artists of one drawn attention matrix, so a figure can be redrawn for another head."""

    ax: Axes
    cells: QuadMesh  # one coloured quad per weight; ``cells.get_array()`` is the matrix drawn
    frame: Rectangle  # the border, in the head's colour
    left: float  # top-left corner and cell size, in the canvas's inches
    top: float
    cell: float
    x_labels: list[str] = field(default_factory=list)  # keys, along the top
    y_labels: list[str] = field(default_factory=list)  # queries, down the left side
    label_paths: list[Any] = field(default_factory=list)  # the PathCollections drawing those labels
    values: Any | None = None  # PathCollection of the cell numbers, row-major; None when not shown
    hatch: PathPatch | None = None
    mask: np.ndarray | None = None

    @property
    def value_texts(self) -> list[str]:
        """The numbers drawn in the cells, row-major ("" for blocked cells)."""
        return list(self.values.mhacli_texts) if self.values is not None else []

    def cell_center(self, row: int, col: int) -> tuple[float, float]:
        """Where the centre of cell (query ``row``, key ``col``) is, in the canvas's inches."""
        return self.left + (col + 0.5) * self.cell, self.top + (row + 0.5) * self.cell

    def update(self, weights: np.ndarray, color: str | None = None) -> None:
        """Show ``weights`` (same shape) in place: cells, cell numbers and frame colour."""
        self.cells.set_array(np.ma.masked_array(weights, mask=self.mask if self.mask is not None else False))
        if self.values is not None:
            texts, inks = _cell_values(weights, self.mask)
            numbers().update(self.values, texts, inks)
        if color is not None:
            self.frame.set_edgecolor(color)


def heatmap(
    ax: Axes,
    weights: np.ndarray,
    rows: Sequence[str],
    cols: Sequence[str],
    *,
    left: float,
    top: float,
    cell: float,
    mask: np.ndarray | None = None,
    color: str | None = None,
    tick_size: float = 10.0,
    value_size: float = 0.0,
    label_step: int = 1,
    rotate_x: bool = False,
    show_x: bool = True,
    show_y: bool = True,
    frame_width: float = 3.0,
) -> Heatmap:
    """Draw one attention matrix on ``ax`` with its top-left corner at (``left``, ``top``).

    ``ax`` is a canvas whose data units are inches with y growing downwards (see
    :class:`Sheet`).  Keys run along x and are labelled on top, queries down the
    left side.  Values are on a fixed 0…1 scale so every head reads against the
    same colour bar; blocked cells are masked (grey) and hatched, so "not
    allowed" never looks like "allowed but zero".
    """
    from matplotlib.patches import PathPatch, Rectangle

    n_rows, n_cols = weights.shape
    xs = left + np.arange(n_cols + 1) * cell  # (n+1,) cell edges, inches
    ys = top + np.arange(n_rows + 1) * cell
    # One quad per cell (a QuadMesh): an image would be resampled to every output
    # pixel on each draw, about thirty times the cost for the same picture.
    cells = ax.pcolormesh(xs, ys, np.ma.masked_array(weights, mask=mask if mask is not None else False),
                          cmap=_cmap(), vmin=0.0, vmax=1.0, antialiased=False, edgecolors="none",
                          shading="flat", zorder=1)
    frame = Rectangle((left, top), n_cols * cell, n_rows * cell, fill=False,
                      edgecolor=color or theme.LABEL_COLOR, linewidth=frame_width, zorder=2.5)
    _place(ax, frame)
    pad = _label_pad(frame_width)
    out = Heatmap(ax=ax, cells=cells, frame=frame, left=left, top=top, cell=cell, mask=mask)
    # Token labels are outlines in one collection each (see TextPaths): a grid of
    # heads repeats the same few tokens dozens of times.
    families = [f.family for f in font_faces()]
    if show_x:
        picked = list(range(0, n_cols, label_step))
        out.x_labels = [cols[j] for j in picked]
        out.label_paths.append(numbers().collection(
            ax, [(left + (j + 0.5) * cell, top - pad) for j in picked], out.x_labels, tick_size,
            [theme.LABEL_COLOR] * len(picked), align="up" if rotate_x else "bottom", families=families))
    if show_y:
        picked = list(range(0, n_rows, label_step))
        out.y_labels = [rows[i] for i in picked]
        out.label_paths.append(numbers().collection(
            ax, [(left - pad, top + (i + 0.5) * cell) for i in picked], out.y_labels, tick_size,
            [theme.LABEL_COLOR] * len(picked), align="right", families=families))
    if mask is not None and mask.any():
        out.hatch = PathPatch(_mask_path(mask, left, top, cell), facecolor="none",
                              edgecolor=theme.HATCH_COLOR, hatch=theme.MASK_HATCH, linewidth=0,
                              zorder=2)
        _place(ax, out.hatch)
    if value_size > 0:
        cx, cy = np.meshgrid(xs[:-1] + cell / 2, ys[:-1] + cell / 2)  # (n, n) cell centres
        texts, inks = _cell_values(weights, mask)
        out.values = numbers().collection(ax, np.column_stack([cx.ravel(), cy.ravel()]), texts,
                                          value_size, inks)
    return out


@dataclass
class ColourBar:
    """The one colour scale of a figure: 0 (bottom) to 1 (top)."""

    cells: QuadMesh
    labels: list[Text]


def colour_bar(sheet: Sheet, pen: Pen, left: float, top: float, height: float,
               size: float = 11.0) -> ColourBar:
    """One colour bar from 0 to 1, shared by every heatmap of the figure."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    ax, width = sheet.ax, 0.22
    steps = np.linspace(1.0, 0.0, 256)[:, None]  # (256, 1): the top row is 1
    cells = ax.pcolormesh([left, left + width], top + np.linspace(0.0, height, 257), steps,
                          cmap=_cmap(), vmin=0.0, vmax=1.0, antialiased=False, edgecolors="none",
                          shading="flat", zorder=1)
    _place(ax, Rectangle((left, top), width, height, fill=False, edgecolor=theme.LABEL_COLOR,
                           linewidth=0.8, zorder=2))
    labels = []
    for value, text in zip((0.0, 0.25, 0.5, 0.75, 1.0), _BAR_TICK_LABELS):
        y = top + height * (1.0 - value)
        ax.add_line(Line2D([left + width, left + width + 0.05], [y, y], color=theme.LABEL_COLOR,
                           linewidth=0.8))
        labels.append(ax.text(left + width + 0.1, y, text, ha="left", va="center", fontsize=size))
    labels.append(ax.text(left + width + 0.1 + pen.widest(_BAR_TICK_LABELS, size) + 0.1, top + height / 2,
                          "attention weight", ha="left", va="center", rotation=90, fontsize=size))
    bar = ColourBar(cells, labels)
    sheet.colour_bars.append(bar)
    return bar


_BAR_TICK_LABELS = ("0", "0.25", "0.5", "0.75", "1")


def _bar_width(pen: Pen, size: float) -> float:
    """Room the colour bar needs to the right of the heatmaps: gap, bar, tick labels, label."""
    return 0.25 + 0.22 + 0.1 + pen.widest(_BAR_TICK_LABELS, size) + 0.1 + _line(size) + 0.15


# --------------------------------------------------------------------------
# Reading a trace
# --------------------------------------------------------------------------


def _mask(trace: Trace, view: View) -> np.ndarray | None:
    if trace.mask is not None:
        return np.asarray(trace.mask)[view.rows, view.rows]
    if trace.config.causal:
        from mhacli.core.attention import causal_mask

        return causal_mask(trace.n_tokens)[view.rows, view.rows]
    return None


def _describe_head(trace: Trace, i: int, pen: Pen) -> str:
    """Two lines for a head's title: its rule (designed weights) or how focused it is, then where it looks."""
    s = summarize_heads(np.asarray(trace.weights[i : i + 1]), trace.config.causal)[0]
    first = (f"rule: {pen.shown(trace.rules[i], 60)}"
             if trace.rules is not None and i < len(trace.rules) and trace.rules[i]
             else f"{s.describe()}: mean row entropy {s.mean_entropy:.2f} of at most "
                  f"{s.max_entropy:.2f} bits")
    return (f"{first}\nlooks most at “{pen.shown(trace.tokens[s.top_key])}” (position {s.top_key}): "
            f"{s.top_share:.0%} of its attention")


def _short_head(trace: Trace, i: int, pen: Pen) -> str:
    """A few words for a small panel title."""
    if trace.rules is not None and i < len(trace.rules) and trace.rules[i]:
        return pen.shown(trace.rules[i], 22)
    s = summarize_heads(np.asarray(trace.weights[i : i + 1]), trace.config.causal)[0]
    return f"{s.describe()} · “{pen.shown(trace.tokens[s.top_key], 8)}”"


def _sentence(trace: Trace, view: View, pen: Pen, width_in: float, size: float) -> str:
    """The sentence as shown, on one line that fits."""
    words = [pen.shown(t, 16) for t in trace.tokens[view.rows]]
    text = " ".join(words)
    if view.windowed or pen.width(f"“{text}”", size) > width_in:
        while words and pen.width(f"“{' '.join(words)} …”", size) > width_in:
            words.pop()
        text = " ".join(words) + " …"
    return f"“{text}”"


# --------------------------------------------------------------------------
# head-i: one head, reused for every head
# --------------------------------------------------------------------------


MAX_MATRIX_INCHES = 12.0  # beyond 60 tokens cells shrink instead: the image stays a sane size


def _head_sizes(n: int) -> tuple[float, float, float, int]:
    """Cell size (inches), tick label size, cell value size (points; 0 = none) and label step for N tokens."""
    cell = _clamp(6.4 / n, 0.2, 0.8)
    cell = max(cell, 2.6 / n)  # one to three tokens still make a square you can read
    cell = min(cell, MAX_MATRIX_INCHES / n)
    tick = _clamp(cell / PT * 0.55, 7.5, 14.0)
    step = max(1, math.ceil(tick * 1.25 * PT / cell))  # label every token up to 40, then thin
    value = min(13.0, cell / PT * 0.85 / 2.4) if n <= 14 else 0.0
    return cell, tick, value if value >= 8 else 0.0, step


class HeadFigure:
    """The per-head heatmap, built once and redrawn for each head.

    Every head of a run has the same tokens, so the layout, ticks, colour bar
    and text objects are made once; :meth:`show` swaps in another head's weights,
    colour and title.  That pays matplotlib's fixed costs once per run, not per head.
    """

    TITLE, SUB, AXIS, CAPTION = 16.0, 12.0, 12.0, 10.5

    def __init__(self, trace: Trace, view: View, pen: Pen) -> None:
        self.trace, self.view, self.pen = trace, view, pen
        n = view.n
        cell, tick, value, step = _head_sizes(n)
        self.step = step
        labels = [pen.shown(t) for t in trace.tokens[view.rows]]
        label_w = pen.widest(labels[::step], tick)
        rotate = label_w > cell * step - 4 * PT
        x_label_h = label_w if rotate else _line(tick)
        matrix = n * cell
        self.subtitles = [_describe_head(trace, i, pen) for i in range(trace.num_heads)]

        pad = _label_pad(4.0)
        left = 0.2 + _line(self.AXIS) + 0.08 + label_w + pad
        right = _bar_width(pen, 11.0)
        width = max(left + matrix + right, 6.0)
        inner = width - 0.4
        sub_lines = max(len(pen.wrap(s, inner, self.SUB)) for s in self.subtitles)
        captions = self._captions()
        caption_lines = pen.wrap(" ".join(captions), inner, self.CAPTION)

        top = 0.2 + _line(self.TITLE) + sub_lines * _line(self.SUB)
        top += _line(11.0) if view.windowed else 0.0
        top += 0.15 + _line(self.AXIS) + 0.08 + x_label_h + pad
        height = top + matrix + 0.2 + len(caption_lines) * _line(self.CAPTION) + 0.2
        height = max(height, top + max(matrix, 2.6) + 0.4)

        sheet = Sheet(width, height)
        self.sheet, self.fig = sheet, sheet.fig
        x0 = left + (width - (left + matrix + right)) / 2  # centre the block when the title is wider
        self.map = heatmap(sheet.ax, np.asarray(trace.weights[0])[view.rows, view.rows], labels,
                           labels, left=x0, top=top, cell=cell, mask=_mask(trace, view),
                           color=theme.head_color(0), tick_size=tick, value_size=value,
                           label_step=step, rotate_x=rotate, frame_width=4.0)
        self.colour_bar = colour_bar(sheet, pen, x0 + matrix + 0.25, top, matrix)
        self.x_title = sheet.text(x0 + matrix / 2, top - pad - x_label_h - 0.08,
                                  "key (the token looked at) →", fontsize=self.AXIS, ha="center",
                                  va="bottom")
        self.y_title = sheet.text(x0 - pad - label_w - 0.08, top + matrix / 2,
                                  "← query (the token looking)", fontsize=self.AXIS, ha="right",
                                  va="center", rotation=90)

        self.title = sheet.text(0.2, 0.2, "", fontsize=self.TITLE, fontweight="bold")
        self.subtitle = sheet.text(0.2, 0.2 + _line(self.TITLE), "", fontsize=self.SUB,
                                   linespacing=1.15)
        if view.windowed:
            sheet.text(0.2, 0.2 + _line(self.TITLE) + sub_lines * _line(self.SUB), view.note(),
                       fontsize=11.0, color=theme.HATCH_COLOR)
        sheet.text(0.2, top + matrix + 0.25, "\n".join(caption_lines), fontsize=self.CAPTION,
                   color="#444444", linespacing=1.15)
        self._inner = inner
        self.head = -1
        self._background: Any = None
        self._background_dpi = 0
        self.show(0)

    def _captions(self) -> list[str]:
        out = ["Each row is one query token: where it looks among the keys. "
               + ("Its weights sum to 1." if not self.view.windowed else
                  "Keys outside the window are not shown, so a row may sum to less than 1.")]
        if self.trace.config.causal:
            out.append("Grey hatched cells are masked (causal): a token may not look at later "
                       "tokens, so their weight is exactly 0.")
        if self.step > 1:
            out.append(f"Labels show every {_ordinal(self.step)} token.")
        return out

    def show(self, i: int) -> Figure:
        """Redraw the figure for head ``i`` (0-based) and return it."""
        t, v = self.trace, self.view
        h = t.num_heads
        self.map.update(np.asarray(t.weights[i])[v.rows, v.rows], theme.head_color(i))
        self.title.set_text(f"Head {i + 1} of {h} · A{_sup(i + 1)} is {t.n_tokens}×{t.n_tokens} "
                            f"(queries × keys)")
        self.title.set_color(theme.head_text_color(i))
        self.subtitle.set_text("\n".join(self.pen.wrap(self.subtitles[i], self._inner, self.SUB)))
        self.head = i
        return self.fig

    def _changing(self) -> list[Any]:
        """The artists that differ from head to head, in drawing (z) order."""
        m = self.map
        changing = [a for a in (m.cells, m.hatch, m.values, m.frame, self.title, self.subtitle)
                    if a is not None]
        return sorted(changing, key=lambda a: a.get_zorder())  # stable: same order as a full draw

    def write(self, i: int, path: Path, fmt: str, dpi: int, writer: Writer | None = None) -> Path:
        """Save head ``i``; for PNG only what changes between heads is redrawn.

        The first head is drawn in full without the changing artists and that
        background is kept; each head then restores it and draws its own image,
        numbers, frame and title on top — the same pixels as a full redraw.
        """
        if fmt != "png":
            return save(self.show(i), path, fmt, dpi)
        canvas = self.fig.canvas
        changing = self._changing()
        if self._background is None or self._background_dpi != dpi:
            for artist in changing:
                artist.set_animated(True)
            render(self.fig, dpi)
            self._background = canvas.copy_from_bbox(self.fig.bbox)
            self._background_dpi = dpi
        self.show(i)
        canvas.restore_region(self._background)
        renderer = canvas.get_renderer()
        import matplotlib

        with matplotlib.rc_context(RENDER_RC):
            for artist in changing:
                artist.draw(renderer)
        try:
            if writer is not None:
                return writer.png(self.fig, path, dpi, drawn=True)
            rgb = canvas_rgb(self.fig)
            return atomic_write(Path(path), lambda handle: handle.write(png_bytes(rgb, dpi)))
        finally:
            if i == self.trace.num_heads - 1:
                for artist in changing:
                    artist.set_animated(False)
                self._background = None


def head_figure(trace: Trace, head: int, *, max_tokens: int = 40, query: int | None = None,
                pen: Pen | None = None) -> Figure:
    """The heatmap of one head (0-based) as a Figure (``head-{head+1}.png``)."""
    with drawing(pen) as p:
        return HeadFigure(trace, token_view(trace.n_tokens, max_tokens, query), p).show(head)


# --------------------------------------------------------------------------
# heads: every head on one slide, plus their average
# --------------------------------------------------------------------------


@dataclass
class Panels:
    """A grid of small heatmaps, one per weight matrix, and where it ended (inches)."""

    maps: list[Heatmap]
    titles: list[Text]
    bottom: float
    right: float


def _grid_shape(panels: int) -> tuple[int, int]:
    """Columns and rows for a slide-shaped (16:9) grid."""
    cols = min(panels, math.ceil(math.sqrt(panels * 1.8)))
    return cols, math.ceil(panels / cols)


def _panel_frame(n: int) -> float:
    return 3.0 if n <= 20 else 2.0


def _panels(sheet: Sheet, pen: Pen, matrices: list[np.ndarray], names: list[str],
            details: list[str], colors: list[str], text_colors: list[str], labels: list[str],
            mask: np.ndarray | None, *, left: float, top: float, panel: float, cols: int,
            tick: float, step: int, value: float, rotate: bool, label_w: float) -> Panels:
    """Lay out ``matrices`` as a grid of heatmaps; tokens label the outer edges only."""
    n = len(labels)
    frame = _panel_frame(n)
    above = (label_w if rotate else _line(tick)) + _label_pad(frame)  # room for the key labels
    title_h = _line(12.0) + (_line(10.0) if any(details) else 0.0) + 0.06
    gap = 0.3
    cell = panel / n
    maps, titles = [], []
    y = top
    bottom = top
    for k, (m, name) in enumerate(zip(matrices, names)):
        r, c = divmod(k, cols)
        if c == 0 and r > 0:
            y = bottom + gap
        row_top = y + title_h + (above if r == 0 else 0.0)
        x = left + c * (panel + gap)
        maps.append(heatmap(sheet.ax, m, labels, labels, left=x, top=row_top, cell=cell, mask=mask,
                            color=colors[k], tick_size=tick, value_size=value, label_step=step,
                            rotate_x=rotate, show_x=r == 0, show_y=c == 0, frame_width=frame))
        title_y = y
        titles.append(sheet.text(x, title_y, name, fontsize=12.0, fontweight="bold",
                                 color=text_colors[k]))
        if details[k]:
            sheet.text(x, title_y + _line(12.0), details[k], fontsize=10.0, color="#444444")
        bottom = max(bottom, row_top + panel)
    right = left + cols * panel + (cols - 1) * gap
    return Panels(maps, titles, bottom, right)


def heads_figure(trace: Trace, *, max_tokens: int = 40, query: int | None = None,
                 pen: Pen | None = None) -> Figure:
    """All heads on one scale, with the average over heads beside them (``heads.png``)."""
    with drawing(pen) as p:
        return _heads_figure(trace, token_view(trace.n_tokens, max_tokens, query), p)


def _grid_sizes(n: int, panel: float) -> tuple[float, int, float]:
    """Tick label size, label step and cell value size for an N-token panel of ``panel`` inches."""
    cell_pt = panel / n / PT
    tick = _clamp(cell_pt * 0.6, 7.0, 12.0)
    step = max(1, math.ceil(tick * 1.25 / cell_pt))
    value = min(11.0, cell_pt * 0.85 / 2.4) if cell_pt >= 22 else 0.0
    return tick, step, value if value >= 7 else 0.0


def _heads_figure(trace: Trace, view: View, pen: Pen) -> Figure:
    h, n = trace.num_heads, view.n
    weights = np.asarray(trace.weights)[:, view.rows, view.rows]  # (h, n, n)
    average = weights.mean(axis=0)  # (h, n, n) -> (n, n): what PyTorch returns by default
    panels = h + 1 if h > 1 else 1  # one head is its own average
    cols, rows = _grid_shape(panels)
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]

    # Panel size: fill a 13.3 × 7.5 in slide, but never so small that the tokens cannot be read.
    bar = _bar_width(pen, 11.0)
    est_label = min(pen.widest(labels, 10.0), 1.4)
    fit_w = (13.3 - 0.2 - _line(12) - est_label - bar - (cols - 1) * 0.3) / cols
    fit_h = (7.5 - 1.6 - est_label - rows * 0.5 - (rows - 1) * 0.3) / rows
    panel = max(min(fit_w, fit_h), min(n * 0.16, 3.2), 1.4)
    tick, step, value = _grid_sizes(n, panel)
    shown_labels = labels[::step]
    label_w = pen.widest(shown_labels, tick)
    rotate = label_w > panel / n * step - 3 * PT

    details = [_short_head(trace, i, pen) for i in range(h)] + ["what PyTorch returns by default"]
    names = [f"Head {i + 1}" for i in range(h)] + [f"Average of the {h} heads"]
    details, names = details[:panels], names[:panels]
    pad = _label_pad(_panel_frame(n))
    left = 0.2 + _line(12.0) + 0.08 + label_w + pad
    grid_w = cols * panel + (cols - 1) * 0.3
    width = max(left + grid_w + bar, 8.0)
    inner = width - 0.4
    notes = [
        "Last panel: the mean over heads, which is what PyTorch's nn.MultiheadAttention returns "
        "unless average_attn_weights=False." if h > 1 else
        "With one head, the head is its own average: what PyTorch's nn.MultiheadAttention "
        "returns either way.",
    ]
    if trace.config.causal:
        notes.append("Grey hatched cells are masked (causal): a token never looks at later tokens.")
    if step > 1:
        notes.append(f"Labels show every {_ordinal(step)} token.")
    note_lines = pen.wrap(" ".join(notes), inner, 10.5)
    title = f"{h} head{'s' if h != 1 else ''} on one scale: each row is a query, each column a key"
    top = 0.2 + _line(16.0) + _line(12.0) + (_line(11.0) if view.windowed else 0.0) + 0.2
    top_axis = top
    top += _line(12.0) + 0.04
    title_h = _line(12.0) + _line(10.0) + 0.06
    x_label_h = label_w if rotate else _line(tick)
    height = (top + rows * (title_h + panel) + (rows - 1) * 0.3 + x_label_h + pad + 0.25
              + len(note_lines) * _line(10.5) + 0.2)

    sheet = Sheet(width, height)
    x0 = left + (width - (left + grid_w + bar)) / 2
    sheet.text(0.2, 0.2, title, fontsize=16.0, fontweight="bold")
    sheet.text(0.2, 0.2 + _line(16.0), _sentence(trace, view, pen, inner, 12.0), fontsize=12.0)
    if view.windowed:
        sheet.text(0.2, 0.2 + _line(16.0) + _line(12.0), view.note(), fontsize=11.0,
                   color=theme.HATCH_COLOR)
    sheet.text(x0 + grid_w / 2, top_axis, "key (the token looked at) →", fontsize=12.0, ha="center")
    mask = _mask(trace, view)
    matrices = ([weights[i] for i in range(h)] + [average])[:panels]
    colors = ([theme.head_color(i) for i in range(h)] + [theme.AVERAGE_COLOR])[:panels]
    text_colors = ([theme.head_text_color(i) for i in range(h)] + [theme.AVERAGE_COLOR])[:panels]
    grid = _panels(sheet, pen, matrices, names, details, colors, text_colors, labels, mask,
                   left=x0, top=top, panel=panel, cols=cols, tick=tick, step=step, value=value,
                   rotate=rotate, label_w=label_w)
    first_row_top = top + title_h + x_label_h + pad
    sheet.text(x0 - pad - label_w - 0.08, (first_row_top + grid.bottom) / 2,
               "← query (the token looking)", fontsize=12.0, rotation=90, va="center", ha="right")
    bar_h = min(grid.bottom - first_row_top, 4.5)
    colour_bar(sheet, pen, grid.right + 0.25, first_row_top, bar_h)
    sheet.text(0.2, grid.bottom + 0.25, "\n".join(note_lines), fontsize=10.5, color="#444444",
               linespacing=1.15)
    sheet.fig.mhacli_panels = grid  # type: ignore[attr-defined]  # for tests: the drawn panels
    return sheet.fig


# --------------------------------------------------------------------------
# magnifiers: the analogy, one lens per head
# --------------------------------------------------------------------------


def magnifier(ax: Axes, x: float, y: float, radius: float, color: str) -> list[Any]:
    """A magnifying glass centred at (x, y) in data units (inches), lens ``radius``, in ``color``."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Arc, Circle

    handle_dir = np.array([math.cos(-math.pi / 4), math.sin(-math.pi / 4)])
    start = np.array([x, y]) + handle_dir * radius * 1.05
    end = start + handle_dir * radius * 1.1
    lw = max(2.0, radius / PT * 0.18)
    handle = Line2D([start[0], end[0]], [start[1], end[1]], color=color, linewidth=lw * 1.8,
                    solid_capstyle="round")
    lens = Circle((x, y), radius, facecolor=theme.tint(color, 0.18), edgecolor=color, linewidth=lw)
    glint = Arc((x, y), radius * 1.2, radius * 1.2, theta1=110, theta2=160, color="white",
                linewidth=lw * 0.7)
    for artist in (handle, lens, glint):
        if isinstance(artist, Line2D):
            ax.add_line(artist)
        else:
            _place(ax, artist)
    return [handle, lens, glint]


@dataclass
class TokenRow:
    """One head's row of token boxes in the magnifier picture."""

    name: str
    weights: np.ndarray  # (n,) attention each shown token receives
    color: str
    text_color: str
    boxes: list[Any] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # the token drawn in each box


def _flow(widths: Sequence[float], max_width: float, gap: float) -> list[list[int]]:
    """Token indices per line, wrapping like a paragraph."""
    lines: list[list[int]] = [[]]
    used = 0.0
    for k, w in enumerate(widths):
        if lines[-1] and used + gap + w > max_width:
            lines.append([])
            used = 0.0
        used += (gap if lines[-1] else 0.0) + w
        lines[-1].append(k)
    return lines


def magnifiers_figure(trace: Trace, single: Trace | None, *, query: int | None = None,
                      max_tokens: int = 40, pen: Pen | None = None) -> Figure:
    """The sentence under one magnifier per head, and under one big head for contrast."""
    with drawing(pen) as p:
        return _magnifiers(trace, single, token_view(trace.n_tokens, max_tokens, query), p)


MAGNIFIER_MAX_TOKENS = 60  # a row of boxes per head stops being a picture beyond this


def _magnifiers(trace: Trace, single: Trace | None, view: View, pen: Pen) -> Figure:
    from matplotlib.patches import FancyBboxPatch, Rectangle

    if view.n > MAGNIFIER_MAX_TOKENS:
        view = token_view(trace.n_tokens, MAGNIFIER_MAX_TOKENS, view.query)

    h, n, q = trace.num_heads, view.n, view.query
    fs = 14.0 if n <= 10 else 12.0 if n <= 20 else 10.5
    vs = max(8.5, fs * 0.72)
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]
    pad = 0.45 * fs * PT
    min_box = pen.width("100%", vs) + 2 * pad * 0.6
    widths = [max(pen.width(s, fs) + 2 * pad, min_box) for s in labels]
    box_h = fs * 2.0 * PT
    gap = 0.08

    rows: list[TokenRow] = []
    if single is not None:
        rows.append(TokenRow("1 head", query_view(np.asarray(single.weights), q)[0][view.rows],
                             theme.SINGLE_HEAD_COLOR, theme.SINGLE_HEAD_COLOR))
    multi = query_view(np.asarray(trace.weights), q)[:, view.rows]  # (h, n)
    for i in range(h):
        rows.append(TokenRow(f"Head {i + 1}", multi[i], theme.head_color(i),
                             theme.head_text_color(i)))
    vmax = max(float(r.weights.max()) for r in rows) or 1.0

    name_w = pen.widest([r.name for r in rows], 13.0, bold=True)
    sub_w = pen.widest([f"d = {trace.d_model}", f"d/h = {trace.d_k}"], 10.0)
    lens_col = 2 * box_h * 0.62 + 0.25
    left_col = 0.25 + lens_col + max(name_w, sub_w) + 0.2
    area = _clamp(sum(widths) + gap * (n - 1), 4.0, 11.0)
    lines = _flow(widths, area, gap)
    area = max(sum(widths[k] for k in line) + gap * (len(line) - 1) for line in lines)
    line_h = box_h + 0.06 + _line(vs) + 0.1
    lens_r = {True: box_h * 0.62, False: box_h * 0.5}  # the single head's lens is the big one
    row_h = max(len(lines) * line_h, 2 * lens_r[True] + 0.25) + 0.1
    width = max(left_col + area + 0.3, 7.5)
    inner = width - 0.5

    who = (f"the query “{pen.shown(trace.tokens[q])}” (position {q})" if q is not None
           else f"all {trace.n_tokens} queries, averaged")
    title = (f"One magnifier or {h}? Where attention goes, seen from {who}" if h != 1
             else f"One magnifier: where attention goes, seen from {who}")
    title_lines = pen.wrap(title, inner, 16.0, bold=True)
    sub = (f"Each box is a token, shaded by the attention it receives in that head "
           f"(white = none, full colour = {vmax:.2f}, the largest shown); the number under it is "
           "that weight. A thick outline marks the token the head looks at most"
           + ("; the dashed box is the query." if q is not None else "."))
    sub_lines = pen.wrap(sub, inner, 11.0)
    top = 0.2 + len(title_lines) * _line(16.0) + len(sub_lines) * _line(11.0)
    top += _line(11.0) if view.windowed else 0.0
    top += 0.2
    section_h = _line(12.5) + 0.08
    height = top + len(rows) * row_h + (2 if single is not None else 1) * section_h + 0.25
    if single is not None:
        height += 0.1

    sheet = Sheet(width, height)
    fig, ax = sheet.fig, sheet.ax
    sheet.text(0.25, 0.2, "\n".join(title_lines), fontsize=16.0, fontweight="bold", linespacing=1.1)
    sheet.text(0.25, 0.2 + len(title_lines) * _line(16.0), "\n".join(sub_lines), fontsize=11.0,
               color="#444444", linespacing=1.15)
    if view.windowed:
        sheet.text(0.25, top - 0.2 - _line(11.0), view.note(), fontsize=11.0,
                   color=theme.HATCH_COLOR)

    percents: list[tuple[float, float, str]] = []
    tokens_drawn: list[tuple[float, float, str, str]] = []  # x, y, text, ink
    y = top
    for k, row in enumerate(rows):
        is_single = single is not None and k == 0
        if is_single:
            sheet.text(0.25, y, f"A single head of size d = {trace.d_model}: one magnifier over "
                       "the whole text", fontsize=12.5, fontweight="bold",
                       color=theme.SINGLE_HEAD_COLOR)
            y += section_h
        elif k == (1 if single is not None else 0):
            if single is not None:
                ax.plot([0.25, sheet.w - 0.25], [y + 0.02, y + 0.02], color="#CCCCCC", linewidth=1)
                y += 0.1
            team = (f"{h} heads of size d/h = {trace.d_k}: a team of {h} magnifiers, same parameters"
                    if h > 1 else f"1 head of size d/h = d = {trace.d_k}: the same single magnifier")
            sheet.text(0.25, y, team, fontsize=12.5, fontweight="bold")
            y += section_h
        radius = lens_r[is_single]
        cy = y + 0.05 + box_h / 2  # level with the first line of tokens
        magnifier(ax, 0.25 + lens_r[True] + 0.05, cy, radius, row.color)
        name_x = 0.25 + lens_col
        sheet.text(name_x, cy - 0.02, row.name, fontsize=13.0, fontweight="bold",
                   color=row.text_color, va="bottom")
        sheet.text(name_x, cy + 0.02, f"d = {trace.d_model}" if is_single else f"d/h = {trace.d_k}",
                   fontsize=10.0, color="#444444", va="top")
        top_token = int(np.argmax(row.weights))
        for li, line in enumerate(lines):
            x = left_col
            by = y + li * line_h + 0.05
            for t in line:
                w = float(row.weights[t])
                fill = theme.tint(row.color, w / vmax)
                strongest = t == top_token
                box = FancyBboxPatch((x + 0.03, by + 0.03), widths[t] - 0.06, box_h - 0.06,
                                     boxstyle="round,pad=0.03,rounding_size=0.06",
                                     facecolor=fill, edgecolor=row.color if strongest else "#BBBBBB",
                                     linewidth=3.0 if strongest else 0.8)
                _place(ax, box)
                row.boxes.append(box)
                if q is not None and t + view.start == q:
                    _place(ax, Rectangle((x - 0.035, by - 0.035), widths[t] + 0.07, box_h + 0.07,
                                           facecolor="none", edgecolor=theme.LABEL_COLOR,
                                           linewidth=1.3, linestyle=(0, (3, 2))))
                row.labels.append(labels[t])
                tokens_drawn.append((x + widths[t] / 2, by + box_h / 2, labels[t],
                                     theme.ink_on(fill)))
                percents.append((x + widths[t] / 2, by + box_h + 0.06,
                                 f"{w:.0%}" if w >= 0.005 else "0"))
                x += widths[t] + gap
        y += row_h
    if percents:
        xs, ys, texts = zip(*percents)
        numbers().collection(ax, np.column_stack([xs, ys]), texts, vs, ["#555555"] * len(texts),
                             align="top")
        # Each token appears once per head: one outline per distinct token, one draw call for all.
        xs, ys, texts, inks = zip(*tokens_drawn)
        numbers().collection(ax, np.column_stack([xs, ys]), texts, fs, inks, families=pen.families)
    fig.mhacli_rows = rows  # type: ignore[attr-defined]  # for tests: the drawn rows
    return fig


# --------------------------------------------------------------------------
# single-vs-multi: mha compare
# --------------------------------------------------------------------------


def compare_figure(trace: Trace, single: Trace, comparison: Comparison | None = None, *,
                   max_tokens: int = 40, pen: Pen | None = None) -> Figure:
    """One head of size d beside h heads of size d/h, and how spread and how different they are."""
    from mhacli.core.compare import compare

    comparison = comparison or compare(trace, single)
    with drawing(pen) as p:
        return _compare_figure(trace, single, comparison,
                               token_view(trace.n_tokens, max_tokens, None), p)


def _compare_figure(trace: Trace, single: Trace, cmp: Comparison, view: View, pen: Pen) -> Figure:
    h, n = trace.num_heads, view.n
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]
    mask = _mask(trace, view)
    big = _clamp(n * 0.42, 3.6, 6.0)
    tick_big, step_big, value_big = _grid_sizes(n, big)
    cols = math.ceil(math.sqrt(h))
    rows = math.ceil(h / cols)
    title_h = _line(12.0) + 0.06
    small = max((big - (rows - 1) * (0.3 + title_h)) / rows, 1.0)
    tick_s, step_s, value_s = _grid_sizes(n, small)
    lw_big = pen.widest(labels[::step_big], tick_big)
    lw_small = pen.widest(labels[::step_s], tick_s)
    rot_big = lw_big > big / n * step_big - 3 * PT
    rot_small = lw_small > small / n * step_s - 3 * PT
    pad_big, pad_small = _label_pad(4.0), _label_pad(_panel_frame(n))
    above_big = (lw_big if rot_big else _line(tick_big)) + pad_big
    above_small = (lw_small if rot_small else _line(tick_s)) + pad_small

    bar = _bar_width(pen, 11.0)
    left = 0.25 + lw_big + pad_big
    heads_left = left + big + 0.5 + lw_small + pad_small
    grid_w = cols * small + (cols - 1) * 0.3
    width = max(heads_left + grid_w + bar, 9.0)
    inner = width - 0.5
    sub = (f"one head of size d = {trace.d_model} and {h} heads of size d/h = {trace.d_k}: same text, "
           "embedding, seed and weight matrices; one colour scale; rows are queries, columns keys")
    sub_lines = pen.wrap(sub, inner, 12.0)
    top = 0.2 + _line(17.0) + len(sub_lines) * _line(12.0) + _line(12.0)
    top += (_line(11.0) if view.windowed else 0.0) + 0.2
    block_top = top + title_h + max(above_big, above_small)
    block_h = max(big, rows * small + (rows - 1) * (0.3 + title_h))
    spread_head = block_top + block_h + 0.35
    chart_top = spread_head + _line(13.0) + 0.15
    chart_h = 0.32 * (h + 1) + 0.2
    js_top = chart_top + chart_h + 0.65
    js_note = pen.wrap("0 = the heads look at exactly the same places, 1 bit = they never look at "
                       "the same token. Entropy: how spread a head's attention is, mean over queries; "
                       "the dashed line is the uniform maximum (every visible key equal).",
                       inner, 11.0)
    height = js_top + _line(13.0) + len(js_note) * _line(11.0) + 0.25

    sheet = Sheet(width, height)
    x_shift = (width - (heads_left + grid_w + bar)) / 2
    left += x_shift
    heads_left += x_shift
    sheet.text(0.25, 0.2, f"One magnifier against {h}", fontsize=17.0, fontweight="bold")
    y = 0.2 + _line(17.0)
    sheet.text(0.25, y, "\n".join(sub_lines), fontsize=12.0, color="#444444", linespacing=1.15)
    y += len(sub_lines) * _line(12.0)
    sheet.text(0.25, y, _sentence(trace, view, pen, inner, 12.0), fontsize=12.0)
    if view.windowed:
        sheet.text(0.25, y + _line(12.0), view.note(), fontsize=11.0, color=theme.HATCH_COLOR)

    # The single head, large.
    one = heatmap(sheet.ax, np.asarray(single.weights[0])[view.rows, view.rows], labels, labels,
                  left=left, top=block_top, cell=big / n, mask=mask, color=theme.SINGLE_HEAD_COLOR,
                  tick_size=tick_big, value_size=value_big, label_step=step_big, rotate_x=rot_big,
                  frame_width=4.0)
    sheet.text(left, block_top - above_big - title_h, f"1 head (d = {trace.d_model})",
               fontsize=12.0, fontweight="bold", color=theme.SINGLE_HEAD_COLOR)

    # The h heads, small, on the same scale.
    weights = np.asarray(trace.weights)[:, view.rows, view.rows]
    grid = _panels(sheet, pen, [weights[i] for i in range(h)], [f"Head {i + 1}" for i in range(h)],
                   [""] * h, [theme.head_color(i) for i in range(h)],
                   [theme.head_text_color(i) for i in range(h)], labels, mask,
                   left=heads_left, top=block_top - title_h - above_small, panel=small,
                   cols=cols, tick=tick_s, step=step_s, value=value_s, rotate=rot_small,
                   label_w=lw_small)
    colour_bar(sheet, pen, grid.right + 0.25, block_top, min(block_h, 4.5))

    # How spread each head is: mean row entropy against the uniform maximum.
    sheet.text(0.25, spread_head, "How spread is each magnifier? Mean row entropy in bits "
               "(lower = sharper)", fontsize=13.0, fontweight="bold")
    names = [f"1 head (d={trace.d_model})"] + [f"head {i + 1} (d/h={trace.d_k})" for i in range(h)]
    name_w = pen.widest(names, 10.5)
    chart_left = 0.25 + name_w + 0.15
    chart = sheet.axes(chart_left, chart_top, width - chart_left - 1.3, chart_h)
    spreads = [cmp.single, *cmp.heads]
    ys = np.arange(len(spreads))
    colors = [theme.SINGLE_HEAD_COLOR] + [theme.head_color(i) for i in range(h)]
    chart.barh(ys, [s.mean_entropy for s in spreads], color=colors, height=0.7)
    chart.axvline(cmp.single.max_entropy, color=theme.LABEL_COLOR, linestyle="--", linewidth=1.2)
    chart.set_yticks(ys, names, fontsize=10.5)
    for tick_label, c in zip(chart.get_yticklabels(), [theme.SINGLE_HEAD_COLOR] +
                             [theme.head_text_color(i) for i in range(h)]):
        tick_label.set_color(c)
    chart.set_ylim(len(spreads) - 0.5, -0.5)
    top_x = max(cmp.single.max_entropy, 1e-9) * 1.3
    chart.set_xlim(0, top_x)
    for yv, s in zip(ys, spreads):
        chart.text(s.mean_entropy + top_x * 0.01, yv, f"{s.mean_entropy:.2f}", va="center",
                   fontsize=10.0)
    chart.text(cmp.single.max_entropy + top_x * 0.01, len(spreads) - 0.5,
               f"uniform: {cmp.single.max_entropy:.2f}", va="bottom", fontsize=10.0)
    chart.set_xlabel("bits", fontsize=11.0)
    chart.tick_params(labelsize=10.0, length=3)
    for side in ("top", "right"):
        chart.spines[side].set_visible(False)

    # How different the heads are.
    js = sheet.text(0.25, js_top, f"How different are the {h} heads? Mean pairwise Jensen–Shannon "
                    f"divergence: {cmp.mean_pairwise_js:.3f} bits", fontsize=13.0, fontweight="bold")
    sheet.text(0.25, js_top + _line(13.0), "\n".join(js_note), fontsize=11.0, color="#444444",
               linespacing=1.15)
    sheet.fig.mhacli_single = one  # type: ignore[attr-defined]  # for tests
    sheet.fig.mhacli_heads = grid  # type: ignore[attr-defined]
    sheet.fig.mhacli_js = js  # type: ignore[attr-defined]
    sheet.fig.mhacli_chart = chart  # type: ignore[attr-defined]
    return sheet.fig


# --------------------------------------------------------------------------
# Saving
# --------------------------------------------------------------------------


class Saved(list):
    """The paths written, in order, and notices to print once (missing glyphs, leftover files)."""

    def __init__(self, paths: Sequence[Path] = (), notices: Sequence[str] = ()) -> None:
        super().__init__(paths)
        self.notices: list[str] = list(notices)


PNG_COMPRESSION = 3  # zlib level: the "Up" filter already makes these flat images compress well


def png_bytes(rgb: np.ndarray, dpi: int) -> bytes:
    """An RGB image (H, W, 3) of uint8 as a PNG file; an alpha channel (H, W, 4) is dropped.

    Every row is stored with PNG's "Up" filter (the difference to the row above),
    which turns the flat colour areas of a figure into runs of zeros, then
    deflated with zlib, which releases the GIL: that is what lets a second
    thread encode one figure while the next is drawn.
    """
    h, w, _ = rgb.shape
    rows = np.ascontiguousarray(rgb[:, :, :3]).reshape(h, w * 3)  # (H, W, 3|4) -> (H, 3W)
    filtered = np.empty((h, w * 3 + 1), dtype=np.uint8)  # one filter-type byte leads each row
    filtered[:, 0] = 2  # "Up"
    filtered[0, 1:] = rows[0]  # the row above the first is zeros
    np.subtract(rows[1:], rows[:-1], out=filtered[1:, 1:])  # wraps modulo 256, as PNG wants

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (len(body).to_bytes(4, "big") + kind + body
                + zlib.crc32(kind + body).to_bytes(4, "big"))

    per_metre = round(dpi / 0.0254)
    return b"".join([
        b"\x89PNG\r\n\x1a\n",
        chunk(b"IHDR", w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])),
        chunk(b"pHYs", per_metre.to_bytes(4, "big") * 2 + b"\x01"),
        chunk(b"tEXt", b"Software\x00mhacli (matplotlib Agg)"),
        chunk(b"IDAT", zlib.compress(filtered, PNG_COMPRESSION)),
        chunk(b"IEND", b""),
    ])


def canvas_rgb(fig: Figure) -> np.ndarray:
    """A copy of what the Agg canvas last drew, (H, W, 4) uint8; :func:`png_bytes` drops the alpha.

    A plain copy of the whole buffer is a memcpy; dropping the alpha channel is a
    strided copy, several times slower, so it is left to the writing thread.
    """
    return np.array(fig.canvas.buffer_rgba())


class Writer:
    """Writes figure files; PNGs are encoded and written on a second thread.

    Drawing holds Python's GIL, but zlib and fsync release it, so while the
    main thread draws the next figure the second core compresses and writes
    the previous one.  Used as a context manager: leaving waits for every file
    and raises the first failure.
    """

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mha-png")
        self._pending: list[Any] = []

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if kind is not None:  # stop what has not started; what runs finishes atomically
            for job in self._pending:
                job.cancel()
        self._pool.shutdown(wait=True)
        if kind is None:
            for job in self._pending:
                job.result()

    def png(self, fig: Figure, path: Path, dpi: int, *, drawn: bool = False) -> Path:
        """Draw ``fig`` at ``dpi`` (unless already drawn) and write it as PNG in the background."""
        if not drawn:
            render(fig, dpi)
        rgb = canvas_rgb(fig)
        path = Path(path)
        self._pending.append(self._pool.submit(
            atomic_write, path, lambda handle: handle.write(png_bytes(rgb, dpi))))
        return path

    def save(self, fig: Figure, path: Path, fmt: str, dpi: int) -> Path:
        if fmt == "png":
            return self.png(fig, path, dpi)
        return save(fig, path, fmt, dpi)


def save(fig: Figure, path: Path, fmt: str, dpi: int) -> Path:
    """Write ``fig`` atomically: a temporary sibling, then a rename (never a half-written image)."""
    import matplotlib

    if fmt == "png":
        render(fig, dpi)
        rgb = canvas_rgb(fig)
        return atomic_write(Path(path), lambda handle: handle.write(png_bytes(rgb, dpi)))
    metadata: dict[str, Any] = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    with matplotlib.rc_context(RENDER_RC):
        return atomic_write(Path(path), lambda handle: fig.savefig(
            handle, format=fmt, dpi=dpi, metadata=metadata))


def _leftovers(out_dir: Path, heads: int, fmt: str) -> str | None:
    """head-K files from an earlier run with more heads: left alone, but named so nobody mixes them up."""
    extra = sorted((p for p in out_dir.glob(f"head-*.{fmt}")
                    if re.fullmatch(rf"head-(\d+)\.{fmt}", p.name)
                    and int(p.name.split("-")[1].split(".")[0]) > heads),
                   key=lambda p: int(p.name.split("-")[1].split(".")[0]))
    if not extra:
        return None
    names = extra[0].name if len(extra) == 1 else f"{extra[0].name} … {extra[-1].name}"
    return (f"{out_dir} also holds {names} from an earlier run with more heads; this run has "
            f"{heads} head{'s' if heads != 1 else ''}, so those files are not from it (left untouched).")


def _finish(saved: Saved, pen: Pen) -> Saved:
    notice = pen.glyph_notice()
    if notice:
        saved.notices.insert(0, notice)
    return saved


def _draw_heads(trace: Trace, view: View, out: Path, fmt: str, dpi: int, pen: Pen) -> list[Path]:
    """``head-1 … head-h``."""
    with Writer() as writer:
        per_head = HeadFigure(trace, view, pen)
        return [per_head.write(i, out / f"head-{i + 1}.{fmt}", fmt, dpi, writer)
                for i in range(trace.num_heads)]


def _draw_rest(trace: Trace, single: Trace | None, view: View, out: Path, fmt: str, dpi: int,
               pen: Pen) -> list[Path]:
    """``heads`` and ``magnifiers``."""
    with Writer() as writer:
        return [writer.save(_heads_figure(trace, view, pen), out / f"heads.{fmt}", fmt, dpi),
                writer.save(_magnifiers(trace, single, view, pen), out / f"magnifiers.{fmt}", fmt, dpi)]


def _can_fork() -> bool:
    """A second process pays only where fork is cheap and safe (Linux) and a second core exists."""
    import os
    import sys

    if sys.platform != "linux" or not hasattr(os, "fork") or os.environ.get("MHA_NO_FORK"):
        return False  # MHA_NO_FORK=1: draw in one process (to compare, or where forking is unwelcome)
    try:
        cores = len(os.sched_getaffinity(0))
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover
        cores, busy = os.cpu_count() or 1, 0.0
    # A second process only pays when a core is idle; on a busy machine it just adds work.
    return cores > 1 and busy < cores - 0.5


class FigureJob:
    """The figures of one run, drawn while the caller does other work.

    On a machine with a second core the per-head heatmaps are drawn by a forked
    child from the moment the job starts, so they overlap whatever this process
    does next (printing the walkthrough, importing matplotlib, drawing the
    other figures); :meth:`finish` draws the rest here and collects the child.
    matplotlib is imported before the fork, so the child inherits it instead
    of importing it again; each process writes its own files atomically.
    """

    def __init__(self, trace: Trace, single: Trace | None, out_dir: Path, fmt: str = "png",
                 dpi: int = 150, query: int | str | None = None, max_tokens: int = 40,
                 parallel: bool = True) -> None:
        self.trace, self.single = trace, single
        self.fmt, self.dpi = check_format(fmt), check_dpi(dpi)
        self.out = Path(out_dir)
        self.view = token_view(trace.n_tokens, max_tokens, resolve_query(trace.tokens, query))
        self._child: tuple[int, int] | None = None
        self.forked = False  # whether the per-head figures are drawn in a second process
        if parallel and _can_fork():
            self._fork()

    def _fork(self) -> None:
        import json
        import os
        import sys

        # Import and load fonts once, here, so the child inherits them instead of paying again.
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401

        font_faces()
        sys.stdout.flush()
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns about fork in a process with threads (BLAS's idle pool);
            # the child only draws and writes files, then leaves through os._exit.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid:
            os.close(write_end)
            self._child = (pid, read_end)
            self.forked = True
            return
        os.close(read_end)
        code, report = 0, {}
        try:
            with drawing() as pen:
                paths = _draw_heads(self.trace, self.view, self.out, self.fmt, self.dpi, pen)
            report = {"paths": [str(p) for p in paths], "missing": list(pen.missing)}
        except KeyboardInterrupt:
            code, report = 130, {"interrupted": True}
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            code, report = 1, {"error": str(exc), "kind": type(exc).__name__}
        finally:
            try:
                data = json.dumps(report).encode("utf-8")
                while data:
                    data = data[os.write(write_end, data):]
            finally:
                os._exit(code)  # never return into the parent's code, never flush its buffers

    def _collect(self) -> dict[str, Any]:
        import json
        import os

        assert self._child is not None
        pid, read_end = self._child
        self._child = None
        chunks = []
        try:
            while chunk := os.read(read_end, 65536):
                chunks.append(chunk)
        finally:
            os.close(read_end)
            os.waitpid(pid, 0)
        try:
            return json.loads(b"".join(chunks) or b"{}")
        except ValueError:
            return {}

    def finish(self) -> Saved:
        """Draw what is left, wait for the child, and return every path in order with the notices."""
        from mhacli.core.errors import RunError

        t, v = self.trace, self.view
        saved = Saved()
        try:
            with drawing() as pen:
                heads = None if self._child else _draw_heads(t, v, self.out, self.fmt, self.dpi, pen)
                rest = _draw_rest(t, self.single, v, self.out, self.fmt, self.dpi, pen)
        finally:
            report = self._collect() if self._child else None
        if report is not None:
            if report.get("interrupted"):
                raise KeyboardInterrupt
            if "paths" not in report:
                message = report.get("error") or "the drawing process ended without a word"
                kind = {"UsageError": UsageError, "RunError": RunError}.get(report.get("kind", ""))
                if kind is not None:
                    raise kind(message)
                raise RunError(f"drawing the per-head figures failed: {message}")
            heads = [Path(p) for p in report["paths"]]
            for cluster in report["missing"]:
                pen.missing[cluster] = None
        saved.extend([*(heads or []), *rest])
        leftover = _leftovers(self.out, t.num_heads, self.fmt)
        if leftover:
            saved.notices.append(leftover)
        return _finish(saved, pen)

    def __enter__(self) -> FigureJob:
        return self

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if self._child is not None:  # the caller failed before finish(): still reap the child
            self._collect()


def start_figures(trace: Trace, single: Trace | None, out_dir: Path, fmt: str = "png",
                  dpi: int = 150, query: int | str | None = None, max_tokens: int = 40,
                  parallel: bool = True) -> FigureJob:
    """Start drawing the figures of ``trace`` (see :class:`FigureJob`); ``finish()`` returns the paths."""
    return FigureJob(trace, single, out_dir, fmt, dpi, query, max_tokens, parallel)


def save_figures(trace: Trace, single: Trace | None, out_dir: Path, fmt: str = "png",
                 dpi: int = 150, query: int | str | None = None, max_tokens: int = 40,
                 parallel: bool = True) -> Saved:
    """Write ``head-1 … head-h``, ``heads`` and ``magnifiers`` into ``out_dir``; return the paths."""
    with start_figures(trace, single, out_dir, fmt, dpi, query, max_tokens, parallel) as job:
        return job.finish()


def save_compare(trace: Trace, single: Trace, out_dir: Path, fmt: str = "png", dpi: int = 150,
                 max_tokens: int = 40, comparison: Comparison | None = None) -> Saved:
    """Write ``single-vs-multi`` into ``out_dir``; return the path."""
    from mhacli.core.compare import compare

    fmt, dpi = check_format(fmt), check_dpi(dpi)
    comparison = comparison or compare(trace, single)
    saved = Saved()
    with drawing() as pen:
        fig = _compare_figure(trace, single, comparison, token_view(trace.n_tokens, max_tokens), pen)
        saved.append(save(fig, Path(out_dir) / f"single-vs-multi.{fmt}", fmt, dpi))
    return _finish(saved, pen)


__all__ = [
    "FORMATS", "FigureJob", "Heatmap", "HeadFigure", "Pen", "Saved", "View", "check_dpi",
    "check_format", "colour_bar", "compare_figure", "drawing", "head_figure", "heads_figure",
    "heatmap", "magnifier", "magnifiers_figure", "resolve_query", "save", "save_compare",
    "save_figures", "start_figures", "token_view",
]
