"""PNG writers on the pixels of real figures: each option's CPU seconds and file size, side by side.

Pillow's options, and mhacli's own writer (``save.png_bytes``: RGB rows unfiltered, zlib level 1).

Draws the cat sentence's heads.png and head-1.png once (150 dpi, as ``mha explain`` saves them),
keeps their RGBA pixels, then encodes them with every option in turn, in an order that rotates
from round to round, timing each with ``time.process_time``. A measurement to read, not a test:

    python scripts/png_encoding.py [ROUNDS]
"""

from __future__ import annotations

import io
import statistics
import sys
import time
from typing import Any

OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {  # name: (mode written, Pillow's save options)
    "level 6 (Pillow's default)": ("RGBA", {"compress_level": 6}),
    "level 1": ("RGBA", {"compress_level": 1}),
    "level 0": ("RGBA", {"compress_level": 0}),
    "level 3": ("RGBA", {"compress_level": 3}),
    "level 1, Z_RLE": ("RGBA", {"compress_level": 1, "compress_type": 3}),
    "level 1, Z_HUFFMAN_ONLY": ("RGBA", {"compress_level": 1, "compress_type": 2}),
    "level 1, RGB (converted here)": ("RGB", {"compress_level": 1}),
    "mhacli: RGB unfiltered, level 1": ("mhacli", {}),
}


def pixels() -> list[Any]:
    """RGBA images of heads.png and head-1.png of the cat sentence, as savefig draws them at 150 dpi."""
    from PIL import Image

    import mhacli
    from mhacli.pipeline import shown
    from mhacli.render.figures.head import HeadFigure
    from mhacli.render.figures.heads import build_heads
    from mhacli.render.figures.layout import drawing

    result = shown(mhacli.run("the cat sat on the mat", heads=4), 40, None)  # its windows, as explain draws
    trace, window = result.trace, result.figures
    assert window is not None
    images = []
    with drawing() as pen:  # the settings every figure is drawn under (RENDER_RC among them)
        for fig in (build_heads(trace, window, pen), HeadFigure(trace, window, pen).show(0)):
            fig.set_dpi(150)
            fig.canvas.draw()
            buffer = fig.canvas.buffer_rgba()  # type: ignore[attr-defined]
            images.append(Image.frombuffer("RGBA", fig.canvas.get_width_height(), buffer, "raw", "RGBA", 0, 1).copy())
    return images


def main(rounds: int) -> None:
    from mhacli.render.figures.save import png_bytes

    images = pixels()
    print("pixels:", " + ".join(f"{im.size[0]} × {im.size[1]}" for im in images))
    cpu: dict[str, list[float]] = {name: [] for name in OPTIONS}
    size: dict[str, int] = {}
    names = list(OPTIONS)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            mode, options = OPTIONS[name]
            start = time.process_time()
            total = 0
            for im in images:
                if mode == "mhacli":
                    total += len(png_bytes(im.tobytes(), im.size[0], im.size[1], 150))
                    continue
                out = io.BytesIO()
                (im.convert("RGB") if mode == "RGB" else im).save(out, format="png", **options)
                total += out.tell()
            cpu[name].append(time.process_time() - start)
            size[name] = total
    base = statistics.median(cpu[names[1]])
    print(f"{'option':32}{'median CPU':>12}{'÷ today':>9}{'bytes':>12}")
    for name in names:
        med = statistics.median(cpu[name])
        print(f"{name:32}{med * 1000:10.1f} ms{med / base:11.2f}{size[name]:12,}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
