"""What every figure shares: fonts with per-glyph fallback, rc settings, and text stacked by matplotlib.

The figures are laid out by matplotlib: the matrices, their tick labels, axis
labels and colour bar by constrained layout (``layout="compressed"``), inside a
rectangle of the figure; above and below it, the titles and notes are stacked
one under another by matplotlib as well (:func:`stack`: each text anchored to
the box of the one before, the gallery's concatenated-text idiom), and the
figure is made as tall as matplotlib measures them (:func:`finish`).
Token labels and cell values are ordinary matplotlib ``Text`` objects, so SVG
keeps them as ``<text>`` and PDF text stays extractable.
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

from mhacli.core.tokenize import graphemes, label
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
    """``text`` broken at spaces into lines of as many characters as ``width_in`` inches hold at ``size`` points.

    A line break, not a layout: matplotlib still places and measures every line (:func:`finish`).
    """
    chars = max(12, int(width_in * 72 / (size * EM)))
    return "\n".join(textwrap.fill(part, chars, break_long_words=True, break_on_hyphens=False) or ""
                     for part in text.split("\n"))


def stack(fig: Figure, items: Sequence[tuple[str, dict[str, Any]]], gap: float = 2.0) -> list[Text]:
    """Texts one under another from the figure's top-left corner, each anchored below the box of the one before.

    ``items``: (text, Text properties). matplotlib measures each box when it draws, so a longer
    line pushes the next one down; ``gap`` is in points. Empty texts are left out.
    """
    from matplotlib.text import Annotation

    texts: list[Text] = []
    for s, props in items:
        if not s:
            continue
        kw: dict[str, Any] = {"ha": "left", "va": "top", "annotation_clip": False, **props}
        if not texts:
            t = Annotation(s, xy=(0.0, 1.0), xycoords="figure fraction", xytext=(INSET * 72, -INSET * 72),
                           textcoords="offset points", **kw)
        else:
            t = Annotation(s, xy=(0.0, 0.0), xycoords=texts[-1], xytext=(0.0, -gap),
                           textcoords="offset points", **kw)
        fig.add_artist(t)
        texts.append(t)
    return texts


def footnote(fig: Figure, items: Sequence[tuple[str, dict[str, Any]]], gap: float = 2.0) -> list[Text]:
    """Texts along the figure's bottom-left corner, in reading order: the last at the bottom, each above the next.

    Empty texts are left out.
    """
    from matplotlib.text import Annotation

    texts: list[Text] = []
    for s, props in reversed(items):
        if not s:
            continue
        kw: dict[str, Any] = {"ha": "left", "va": "bottom", "annotation_clip": False, **props}
        if not texts:
            t = Annotation(s, xy=(0.0, 0.0), xycoords="figure fraction", xytext=(INSET * 72, INSET * 72),
                           textcoords="offset points", **kw)
        else:
            t = Annotation(s, xy=(0.0, 1.0), xycoords=texts[-1], xytext=(0.0, gap), textcoords="offset points",
                           **kw)
        fig.add_artist(t)
        texts.append(t)
    return texts[::-1]


def depth(fig: Figure, texts: Sequence[Text], from_top: bool = True) -> float:
    """How far ``texts`` reach into the figure from its top (or bottom) edge, in inches, as matplotlib draws them."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    boxes = [t.get_window_extent(renderer) for t in texts if t.get_text()]
    if not boxes:
        return 0.0
    if from_top:
        return (fig.bbox.y1 - min(b.y0 for b in boxes)) / fig.dpi
    return max(b.y1 for b in boxes) / fig.dpi


def finish(fig: Figure, width: float, body: float, top: Sequence[Text], bottom: Sequence[Text] = (),
           gap: float = 0.15) -> Figure:
    """Size ``fig`` to its texts and its body, and let its constrained layout fill the body between them.

    ``fig`` was made with ``layout="constrained"`` or ``"compressed"`` (so its colour bars are placed by
    the layout too). ``body``: the inches the matrices and their labels need. The texts above and below
    are measured by matplotlib (a line longer than foreseen widens the figure); the figure's size is
    rounded up to 1/8 inch, so width × dpi is a whole number of pixels at any --dpi.
    """
    fig.set_size_inches(width, body)  # any size: the texts hang from the corners in points
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    texts = [t for t in (*top, *bottom) if t.get_text()]
    widest = max((t.get_window_extent(renderer).x1 / fig.dpi for t in texts), default=0.0)
    above = depth(fig, top) + gap if top else INSET
    below = depth(fig, bottom, from_top=False) + gap if bottom else INSET
    height = math.ceil((above + body + below) * 8 - 1e-9) / 8
    width = math.ceil(max(width, widest + INSET) * 8 - 1e-9) / 8
    fig.set_size_inches(width, height)
    engine = fig.get_layout_engine()
    side = INSET / 2 / width  # constrained layout keeps its own pad too
    engine.set(rect=(side, below / height, 1.0 - 2 * side, (height - above - below) / height),  # type: ignore[union-attr, call-arg]
               w_pad=0.06, h_pad=0.06)  # inches around each Axes: panels never touch
    # Constrained layout settles on its second pass (the first lays out against unplaced colour bars and
    # texts): one draw here, so every save of the figure gives the same pixels.
    fig.draw_without_rendering()
    return fig


def cut(words: Sequence[str], width_in: float, size: float) -> str:
    """Words joined on one line of ``width_in`` inches at ``size`` points, ended with … when they do not all fit."""
    chars = max(12, int(width_in * 72 / (size * EM)))
    text = " ".join(words)
    return text if len(text) <= chars else textwrap.shorten(text, chars, placeholder=" …")


__all__ = ["EM", "FALLBACK_FAMILIES", "INSET", "PT", "Pen", "RENDER_RC", "about", "clamp", "cut", "depth", "drawing",
           "finish", "font_faces", "footnote", "label_inches", "ordinal", "readable_points", "stack", "sup_index",
           "wrap"]
