"""What every figure shares: fonts with per-glyph fallback, a text measurer, rc settings and a canvas in inches.

Figures are laid out by hand in inches from measured label widths and placed
with fixed axes positions (no layout engine): every margin is sized from what
goes in it, so nothing is cut off, and the figure costs no layout pass per draw.
Token labels and cell values are ordinary matplotlib ``Text`` objects, so SVG
keeps them as ``<text>`` and PDF text stays extractable.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from mhacli.core.tokenize import graphemes, label
from mhacli.render import theme
from mhacli.render.warned import note, recording

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.text import Text

    from mhacli.render.figures.view import View
    from mhacli.render.labels import Shown

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
        self._advances: dict[tuple[str, bool], float] = {}
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

    def _advance(self, ch: str, bold: bool) -> float:
        """Width of one character at 1 pt, in points, as matplotlib's own text engine lays it out."""
        key = (ch, bold)
        if key not in self._advances:
            from matplotlib.font_manager import FontProperties
            from matplotlib.textpath import text_to_path

            prop = FontProperties(family=list(self.families), size=100, weight="bold" if bold else "normal")
            try:
                advance = text_to_path.get_text_width_height_descent(ch, prop, ismath=False)[0]
            except Exception:  # noqa: BLE001 - a glyph the fonts cannot load: assume a wide one
                advance = 100.0
            self._advances[key] = advance / 100
        return self._advances[key]

    def width(self, text: str, size: float, bold: bool = False) -> float:
        """Width of ``text`` at ``size`` points, in inches.

        The sum of the characters' widths from matplotlib's text engine (cached per
        character), 3 % wider to cover kerning: measuring each whole string costs
        about a millisecond, this costs microseconds, and the margins only need
        to know that things fit.
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
    # Type 3 fonts keep each glyph's character, so pdftotext finds tokens and values; measured on a
    # head figure, saving takes a quarter of the time of Type 42 (no TrueType subsetting).
    "pdf.fonttype": 3,
}


@contextlib.contextmanager
def drawing(pen: Pen | None = None) -> Iterator[Pen]:
    """Settings every figure is built and saved under: fonts with fallback, no math parsing of tokens.

    matplotlib's own "Glyph … missing" warnings are collected into the pen
    (reported once, by the caller) instead of being printed per label; any other
    warning is kept in ``pen.warned`` and becomes one note (:mod:`mhacli.render.warned`).
    """
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
    """Smallest font size (points) that stays LABEL_PX tall when a figure of this size is shown fitted to the screen.

    Fitted, the figure shows min(1920 / width, 1080 / height) screen pixels per inch, whatever its dpi.
    """
    shown_ppi = min(SCREEN_PX[0] / width_in, SCREEN_PX[1] / height_in)
    return LABEL_PX * 72 / shown_ppi


def snap(inches: float) -> float:
    """Round a figure size up to 1/8 inch, so width × dpi is exact in binary floating point."""
    return math.ceil(inches * 8 - 1e-9) / 8


class Sheet:
    """A Figure laid out by hand: positions in inches from the top-left corner.

    Titles, notes and the magnifier boxes go on one full-figure canvas Axes
    whose data units are inches (y grows downwards); each heatmap or chart gets
    its own Axes at a fixed place (:meth:`axes`).
    """

    def __init__(self, width: float, height: float) -> None:
        from mhacli.render.figures.inline import new_figure

        self.w, self.h = snap(width), snap(height)
        self.fig = new_figure(figsize=(self.w, self.h))  # a Figure with its Agg canvas, shown inline in Jupyter
        self.ax = self.fig.add_axes((0.0, 0.0, 1.0, 1.0))
        self.ax.set_xlim(0.0, self.w)
        self.ax.set_ylim(self.h, 0.0)
        self.ax.set_axis_off()

    def axes(self, left: float, top: float, width: float, height: float) -> Axes:
        """A real Axes whose box has its top-left corner at (``left``, ``top``) inches."""
        return self.fig.add_axes((left / self.w, 1 - (top + height) / self.h, width / self.w,
                                  height / self.h))

    def text(self, x: float, y: float, s: str, **kw: Any) -> Text:
        """Text anchored at (x, y) inches from the top-left; defaults: left, top aligned."""
        kw.setdefault("ha", "left")
        kw.setdefault("va", "top")
        return self.ax.text(x, y, s, clip_on=False, **kw)

    def place(self, patch: Any) -> Any:
        """Add a patch to the canvas without ``add_patch``'s data-limit update (the limits are fixed)."""
        return self.ax.add_artist(patch)


def ordinal(k: int) -> str:
    """2nd, 3rd, 4th … 11th, 21st."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def sup_index(i: int) -> str:
    """A head's index as a superscript in parentheses, ⁽²⁾: an index, never a power."""
    return "⁽" + str(i).translate(_SUPERSCRIPTS) + "⁾"


def clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def line(size: float) -> float:
    """Height of one line of text at ``size`` points, in inches."""
    return size * 1.3 * PT


def label_pad(frame_width: float) -> float:
    """Gap between a heatmap's frame and its token labels, in inches (the frame straddles the edge)."""
    return frame_width * PT / 2 + 3 * PT


def sentence(trace: Shown, view: View, pen: Pen, width_in: float, size: float) -> str:
    """The sentence as shown, on one line that fits."""
    words = [pen.shown(t, 16) for t in trace.tokens[view.rows]]
    text = " ".join(words)
    if view.windowed or pen.width(f"“{text}”", size) > width_in:
        while words and pen.width(f"“{' '.join(words)} …”", size) > width_in:
            words.pop()
        text = " ".join(words) + " …"
    return f"“{text}”"


__all__ = ["FALLBACK_FAMILIES", "PT", "Pen", "RENDER_RC", "Sheet", "drawing", "font_faces"]
