"""Escaping text for HTML and SVG markup written by hand (the SVG graph). Pure.

`markup_text` makes any string safe as an element's text or a double-quoted attribute's value in
HTML and in XML (SVG), whichever parser reads it: `& < > " '` become character references, the
characters that hide text are removed (bot.core.text.strip_invisible), and so are those XML 1.0
forbids (controls other than tab and newline, lone surrogates, U+FFFE and U+FFFF), so the SVG stays
well-formed on its own as well as inside a page.
"""

from __future__ import annotations

import html
import re

from bot.core.text import strip_invisible

__all__ = ["markup_text"]

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def markup_text(text: object) -> str:
    """`text` escaped for an element's content or a quoted attribute value in HTML or SVG."""
    return html.escape(_NOT_XML.sub("", strip_invisible(str(text))), quote=True)
