"""Text on the report's PNGs, drawn one bitmap per string (the Agg text path of matplotlib <= 3.10) and
each string shaped once per plot process.

matplotlib 3.11 shapes every text twice (once to measure it, once to lay it out for drawing; ~11 us a
character each with libraqm) and then draws it glyph by glyph in Python (~12 us a glyph). The report's 17
figures draw ~2,500 texts, most of them bar labels that recur from figure to figure: text was half of their
drawing time. Here `FT2Font.set_text` shapes a string once, which gives both its size and, through
`draw_glyphs_to_bitmap`, its bitmap; both are kept by (font, size, dpi, text, hinting, antialiasing, features,
language) for the next figure, and a text is drawn as one `draw_text_image` of its bitmap at the nearest whole
pixel (as matplotlib <= 3.10 placed it; 3.11 places each glyph at 1/64 pixel, so text may sit up to half a
pixel apart: tests/test_report_scale.py checks every inked pixel is within one pixel of matplotlib's own).
Mathtext and anything but matplotlib 3.11's Agg renderer are left to matplotlib.
"""

from __future__ import annotations

import contextlib
import math

import matplotlib
import numpy as np
from matplotlib.backends import backend_agg

_AGG = backend_agg.RendererAgg
_AGG_TEXT, _AGG_MEASURE = _AGG.draw_text, _AGG.get_text_width_height_descent
# 3.11 only: its draw_text_image takes the bitmap (3.10's took the font); other versions are left alone
# (tests/test_report_scale.py says when to look again)
FAST = matplotlib.__version__.startswith("3.11.") and all(
    hasattr(matplotlib.ft2font.FT2Font, m) for m in ("set_text", "draw_glyphs_to_bitmap", "get_image"))

# (width, height, descent in pixels, bitmap, its offset x, y in pixels) by font, size, dpi, text, hinting,
# antialiasing, font features and language; kept while fast() is on, emptied by clear()
_SHAPED: dict = {}


def _shaped(renderer, s: str, prop, antialiased: bool, mtext=None) -> tuple:
    font = renderer._prepare_font(prop)
    flags = backend_agg.get_hinting_flag()
    features = mtext.get_fontfeatures() if mtext is not None else None
    language = mtext.get_language() if mtext is not None else None
    key = (font, prop.get_size_in_points(), renderer.dpi, s, flags, antialiased, features, language)
    try:
        got = _SHAPED.get(key)
    except TypeError:  # features or language given as a list: not kept
        key = got = None
    if got is None:
        font.set_text(s, 0.0, flags=flags, features=features, language=language)  # rotated when drawn
        w, h = font.get_width_height()
        d = font.get_descent()
        font.draw_glyphs_to_bitmap(antialiased=antialiased)
        xo, yo = font.get_bitmap_offset()
        # a copy: the font's own buffer is drawn over by its next string
        got = (w / 64, h / 64, d / 64, np.array(font.get_image()), xo / 64, yo / 64)
        if key is not None:
            _SHAPED[key] = got
    return got


def draw_text(renderer, gc, x, y, s, prop, angle, ismath=False, mtext=None):
    """RendererAgg.draw_text as matplotlib 3.10 drew it, from the string's kept bitmap."""
    if ismath:
        return renderer.draw_mathtext(gc, x, y, s, prop, angle)
    _, _, d, image, xo, yo = _shaped(renderer, s, prop, gc.get_antialiased(), mtext)
    if not image.size:  # an empty line of a multi-line text
        return None
    # the descent turned with the text
    xd, yd = d * math.sin(math.radians(angle)), d * math.cos(math.radians(angle))
    renderer._renderer.draw_text_image(image, round(x + xo + xd), round(y + yo + yd) + 1, angle, gc)
    return None


def text_size(renderer, s, prop, ismath):
    """RendererAgg.get_text_width_height_descent, kept with the string's bitmap (measured, then drawn: one
    shaping)."""
    if ismath:
        return _AGG_MEASURE(renderer, s, prop, ismath)
    return _shaped(renderer, s, prop, True)[:3]


@contextlib.contextmanager
def fast():
    """While drawing the report's figures: Agg's text drawn and measured as above; matplotlib's own methods
    back after (the kept bitmaps stay for the next figure until clear())."""
    if not FAST:
        yield
        return
    _AGG.draw_text, _AGG.get_text_width_height_descent = draw_text, text_size
    try:
        yield
    finally:
        _AGG.draw_text, _AGG.get_text_width_height_descent = _AGG_TEXT, _AGG_MEASURE


def clear() -> None:
    """Forget the kept strings (a report's plots are done)."""
    _SHAPED.clear()
