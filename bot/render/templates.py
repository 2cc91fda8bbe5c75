"""The Jinja2 environment of lanebot's comment templates (`bot/render/templates/`). Pure rendering.

The templates enforce escaping: a `{{ ... }}` that prints a plain string (anything not produced
by one of bot.core.text's escapers) is a render error, not a silent injection.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jinja2

from bot.core.text import Escaped, cell_code, code_block, code_span, markdown_cell, markdown_text

_TEMPLATES = Path(__file__).resolve().parent / "templates"


def _require_escaped(value: object) -> object:
    """Jinja's finalize: a template may print escaped text and numbers, never a raw string."""
    if isinstance(value, Escaped) or value is None:
        return "" if value is None else value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise TypeError(
        f"template printed {type(value).__name__} {str(value)[:60]!r} unescaped;"
        " pass it through one of the escaping filters"
    )


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=False,  # Markdown, not HTML: escaping is done by the purpose-built filters
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_require_escaped,
    )
    environment.filters.update(
        text=markdown_text,
        cell=markdown_cell,
        cell_code=cell_code,
        code=code_span,
        block=code_block,
    )
    return environment


def render_template(name: str, **context: object) -> str:
    """Render one of lanebot's comment templates (`bot/templates/<name>`)."""
    return _environment().get_template(name).render(context)
