"""What every figure shares: fonts with per-glyph fallback, rc settings, and texts and Axes placed once.

Texts are measured once on the figure's renderer and hung at fixed inches (:class:`Slide`); Axes sit at rectangles
computed in inches (:func:`axes_at`), so no layout engine runs at a save.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import textwrap
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from mhacli.attention.tokenize import graphemes, label
from mhacli.render import theme
from mhacli.render.warned import note, recording

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.text import Text

PT = 1 / 72  # one typographic point, in inches
_GLYPH_WARNING = re.compile(r"Glyph (\d+) .*missing from (?:current )?font")  # 3.7: "current font"
_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")

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
        self.missing: dict[str, None] = {}  # ordered set of clusters no font can draw
        self.warned: dict[str, None] = {}  # ordered set of other warnings caught while drawing

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
        out: list[str] = []
        used = 0
        for piece in pieces:
            if out and used + len(piece) > max_chars:
                out.append("…")
                break
            out.append(piece)
            used += len(piece)
        return "".join(out) or "·"

    def notices(self) -> list[str]:
        """The lines worth printing once after the figures are written: missing glyphs, then warnings."""
        return [line for line in (self.glyph_notice(), note(self.warned)) if line]

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


# Read when a figure is drawn or saved (not when it is built), so every save applies them.
RENDER_RC: dict[str, Any] = {
    "text.hinting": "no_hinting",  # glyphs as wide at 30 dpi as at 600: the layout holds at any --dpi
    "svg.hashsalt": "mhacli",  # same figure, same SVG bytes
    "svg.fonttype": "none",  # text stays text: <text> elements a reader can search and copy
    # Type 3 fonts keep each glyph's character, so pdftotext finds tokens and values (and save quicker than Type 42).
    "pdf.fonttype": 3,
}


@contextlib.contextmanager
def drawing(pen: Pen | None = None) -> Iterator[Pen]:
    """Settings every figure is built and saved under: fonts with fallback, no math parsing of tokens; missing glyphs
    and other warnings collected into the pen, said once by the caller."""
    import matplotlib

    pen = pen or Pen()
    rc: dict[str, Any] = {
        **RENDER_RC,
        "font.family": list(pen.families),  # matplotlib falls back from family to family glyph by glyph
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
    with matplotlib.rc_context(rc), recording(pen.warned) as caught:  # type: ignore[arg-type]
        try:
            yield pen
        finally:
            for w in list(caught):
                found = _GLYPH_WARNING.search(str(w.message))
                if found:
                    pen.missing[chr(int(found.group(1)))] = None
                    caught.remove(w)  # said by glyph_notice, not as a warning


SCREEN_PX = (1920, 1080)  # a projector or a 1080p screen a figure is shown fitted to
LABEL_PX = 10.5  # token labels at least this tall (em height, in screen pixels) when shown fitted


def readable_points(width_in: float, height_in: float) -> float:
    """Smallest font size (points) that stays LABEL_PX tall when a figure of this size is shown fitted to the screen
    (min(1920 / width, 1080 / height) screen pixels per inch, whatever its dpi)."""
    shown_ppi = min(SCREEN_PX[0] / width_in, SCREEN_PX[1] / height_in)
    return LABEL_PX * 72 / shown_ppi


def ordinal(k: int) -> str:
    """2nd, 3rd, 4th … 11th, 21st."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def sup_index(i: int) -> str:
    """A head's index as a superscript in parentheses, ⁽²⁾: an index, never a power."""
    return "⁽" + str(i).translate(_SUPERSCRIPTS) + "⁾"


INSET = 0.2  # inches between the figure's edge and its texts
EM = 0.58  # an average glyph width of DejaVu Sans in text, in ems, on the wide side: room to leave for text


def clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def about(text: str, size: float, bold: bool = False) -> float:
    """About how wide ``text`` is at ``size`` points, in inches: the room to leave for it (matplotlib places it)."""
    return len(text) * size * EM * PT * (1.08 if bold else 1.0)


def label_inches(labels: Sequence[str], size: float) -> float:
    """About how long the longest of ``labels`` is at ``size`` points, in inches."""
    return max((about(t, size) for t in labels), default=about("x", size))


def wrap(text: str, width_in: float, size: float) -> str:
    """``text`` broken at spaces into lines of as many characters as ``width_in`` inches hold at ``size`` points."""
    chars = max(12, int(width_in * 72 / (size * EM)))
    return "\n".join(textwrap.fill(part, chars, break_long_words=True, break_on_hyphens=False) or ""
                     for part in text.split("\n"))


class Measured:
    """Texts of a figure measured once each on its own renderer (``Text.get_window_extent``), in inches."""

    def __init__(self, fig: Figure) -> None:
        from matplotlib.text import Text

        self.fig = fig
        self.renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        self.sizes: dict[tuple[str, float], tuple[float, float]] = {}
        self.scratch = Text(0, 0, "")  # one text, never drawn, set to each text measured: no Text made a size
        self.scratch.set_figure(fig)

    def size(self, text: str, points: float) -> tuple[float, float]:
        """Width and height of ``text`` at ``points``."""
        key = (text, points)
        if key not in self.sizes:
            self.scratch.set_text(text)
            self.scratch.set_fontsize(points)
            box = self.scratch.get_window_extent(self.renderer)
            self.sizes[key] = box.width / self.fig.dpi, box.height / self.fig.dpi
        return self.sizes[key]

    def widest(self, texts: Sequence[str], points: float) -> float:
        return max((self.size(t, points)[0] for t in texts), default=0.0)

    def tallest(self, texts: Sequence[str], points: float) -> float:
        return max((self.size(t, points)[1] for t in texts), default=0.0)


class Slide:
    """Texts hung at fixed inches from a figure's top-left (or bottom-left) corner, each measured once and placed
    when the figure's size is known (:meth:`hang`), so every save places every text at the same coordinates."""

    def __init__(self, fig: Figure) -> None:
        self.fig = fig
        self.renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        self._top: list[tuple[Any, float, float]] = []  # (artist, x, depth of its anchor below the top edge)
        self._bottom: list[tuple[Any, float, float]] = []  # (artist, x, height of its anchor above the bottom)
        self.right = 0.0  # inches: the rightmost edge of anything hung
        self.depth = 0.0  # inches: how far the texts hung from the top reach down
        self.rise = 0.0  # inches: how far the texts hung from the bottom reach up

    def size(self, t: Text) -> tuple[float, float]:
        """Width and height of ``t`` in inches: its one measurement."""
        box = t.get_window_extent(self.renderer)
        return box.width / self.fig.dpi, box.height / self.fig.dpi

    def text(self, s: str, x: float, down: float, *, measured: tuple[float, float] | None = None,
             reach: float = 0.0, from_bottom: bool = False, **props: Any) -> tuple[Text, float, float]:
        """``s`` anchored ``x`` inches from the left, ``down`` below the top (or above the bottom); ``measured``: its
        size if known; ``reach``: points its box stands out. Returns the text, its width and height."""
        kw: dict[str, Any] = {"ha": "left", "va": "top", **props}
        t = self.fig.text(x, 0.0, s, transform=self.fig.dpi_scale_trans, **kw)
        w, h = measured if measured is not None else self.size(t)
        x0 = x - {"left": 0.0, "center": w / 2, "right": w}[kw["ha"]]
        r = reach * PT
        self.right = max(self.right, x0 + w + r)
        if from_bottom:
            top = down + {"top": 0.0, "center": h / 2, "bottom": h}[kw["va"]]
            self.rise = max(self.rise, top + r)
            self._bottom.append((t, x, down))
        else:
            top = down - {"top": 0.0, "center": h / 2, "bottom": h}[kw["va"]]
            self.depth = max(self.depth, top + h + r)
            self._top.append((t, x, down))
        return t, w, h

    def box(self, artist: Any, x: float, down: float, extent: tuple[float, float, float]) -> None:
        """An ``AnnotationBbox`` anchored ``down`` below the top; ``extent``: its (right, top, bottom) in inches."""
        self.fig.add_artist(artist)
        self.right = max(self.right, extent[0])
        self.depth = max(self.depth, extent[2])
        self._top.append((artist, x, down))

    def stack(self, items: Sequence[tuple[str, dict[str, Any]]], gap: float = 2.0,
              from_bottom: bool = False) -> list[Text]:
        """(text, properties) one under another from the top-left corner (or above one another from the bottom-left),
        ``gap`` points apart; empty texts are left out."""
        texts: list[Text] = []
        shown = [(s, p) for s, p in items if s]
        edge = INSET
        for s, props in (reversed(shown) if from_bottom else shown):
            t, _, h = self.text(s, INSET, edge, from_bottom=from_bottom, va="bottom" if from_bottom else "top",
                                **props)
            edge += h + gap * PT
            texts.append(t)
        return texts[::-1] if from_bottom else texts

    def hang(self, width: float, height: float) -> tuple[float, float]:
        """Size the figure (at least ``width`` × ``height``, wider for the texts, rounded up to 1/8 inch: whole pixels
        at any --dpi), place everything, and return the size."""
        width = math.ceil(max(width, self.right + INSET) * 8 - 1e-9) / 8
        height = math.ceil(height * 8 - 1e-9) / 8
        self.fig.set_size_inches(width, height)
        for artist, x, down in self._top:
            _place(artist, x, height - down)
        for artist, x, up in self._bottom:
            _place(artist, x, up)
        return width, height


def _place(artist: Any, x: float, y: float) -> None:
    """Put a text's (or an annotation box's) anchor at (x, y) inches from the figure's bottom-left corner."""
    if hasattr(artist, "set_position"):
        artist.set_position((x, y))
    else:
        artist.xy = (x, y)


LABEL_PAD = 4.0  # points between tick labels and an axis label (matplotlib's default)
BAR_WIDTH = 0.16  # inches: a colour bar's width
TICK = 3.5  # points: a tick's length, and the pad from it to its label (matplotlib's defaults)
BAR_TICK = TICK  # a colour bar's


def axes_at(fig: Figure, left: float, top: float, width: float, height: float) -> Any:
    """An Axes ``width`` × ``height`` inches, ``left`` inches from the figure's left edge and ``top`` below its top."""
    fig_w, fig_h = fig.get_size_inches()
    return fig.add_axes((left / fig_w, (fig_h - top - height) / fig_h, width / fig_w, height / fig_h))


def grid(fig: Figure, rows: int, cols: int, left: float, top: float, side: float, gap_x: float,
         gap_y: float) -> Any:
    """``rows`` × ``cols`` square Axes of ``side`` inches, the first ``left`` from the left edge and ``top`` below
    the top edge, ``gap_x`` and ``gap_y`` inches apart; row by row, as ``Figure.subplots`` makes them."""
    import numpy as np

    axes = np.empty((rows, cols), dtype=object)
    for row in range(rows):
        for col in range(cols):
            axes[row, col] = axes_at(fig, left + col * (side + gap_x), top + row * (side + gap_y), side, side)
    return axes


def bar_room(m: Measured, tick_labels: Sequence[str], label: str, size: float, tick: float = BAR_TICK) -> float:
    """Inches a vertical colour bar takes from its left edge: the bar, its ticks (``tick`` points long, as far
    from their labels), their labels and its own label on its side, at ``size`` points."""
    return (BAR_WIDTH + 2 * tick * PT + m.widest(tick_labels, size) + LABEL_PAD * PT
            + m.tallest([label], size))


def cut(words: Sequence[str], width_in: float, size: float) -> str:
    """Words joined on one line of ``width_in`` inches at ``size`` points, ended with … when they do not all fit."""
    chars = max(12, int(width_in * 72 / (size * EM)))
    text = " ".join(words)
    return text if len(text) <= chars else textwrap.shorten(text, chars, placeholder=" …")


__all__ = ["BAR_TICK", "BAR_WIDTH", "EM", "FALLBACK_FAMILIES", "INSET", "LABEL_PAD", "PT", "TICK", "Measured", "Pen",
           "RENDER_RC", "Slide", "about", "axes_at", "bar_room", "clamp", "cut", "drawing", "font_faces",
           "grid", "label_inches", "ordinal", "readable_points", "sup_index", "wrap"]
