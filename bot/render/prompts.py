"""The agents' prompts: a step's Jinja2 template from the workflow's `prompts/` folder, rendered.

Sandboxed, with StrictUndefined so a missing variable is an error rather than an empty string in a
prompt; a template name that leads outside the folder, or names no file there, is refused. Untrusted
text reaches a prompt fenced as data (`fence`). Reads only the workflow's own template files.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from bot.core.workflow import Workflow, WorkflowError

__all__ = ["fence", "prompt_path", "render_prompt", "tail"]


def prompt_path(workflow: Workflow, name: str) -> Path:
    """The path of a step's template (or of a named template), refusing anything outside prompts/."""
    file_name = workflow.template_name(name)
    folder = workflow.prompts_dir.resolve()
    path = (folder / file_name).resolve()
    if path.parent != folder:
        raise WorkflowError([f"prompt {name!r}: {file_name} leads outside {workflow.prompts_dir}"])
    if not path.is_file():
        raise WorkflowError([f"prompt {name!r}: no template {file_name} in {workflow.prompts_dir}"])
    return path


def render_prompt(workflow: Workflow, name: str, **context: object) -> str:
    """Render a step's prompt template with `context`; a missing variable is an error."""
    prompt_path(workflow, name)  # refuses traversal, symlinks out of the folder, and missing files
    file_name = workflow.template_name(name)
    try:
        return _prompt_environment(workflow.prompts_dir).get_template(file_name).render(context)
    except jinja2.UndefinedError as error:
        raise WorkflowError([f"{workflow.prompts_dir / file_name}: {error.message}"]) from None
    except jinja2.TemplateSyntaxError as error:
        raise WorkflowError([f"{error.filename or file_name}: line {error.lineno}: {error.message}"]) from None


def fence(text: object, info: str = "text") -> str:
    """Wrap `text` in a Markdown code fence longer than any backtick run inside it, so it stays data."""
    body = "" if text is None else str(text)
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    marks = "`" * max(3, longest + 1)
    return f"{marks}{info}\n{body.rstrip(chr(10))}\n{marks}"


def tail(text: object, lines: int = 200) -> str:
    """The last `lines` lines of `text`, saying how many earlier lines were cut."""
    all_lines = ("" if text is None else str(text)).rstrip("\n").splitlines()
    if len(all_lines) <= lines:
        return "\n".join(all_lines)
    cut = len(all_lines) - lines
    return f"[… {cut} earlier line{'s' if cut != 1 else ''} cut …]\n" + "\n".join(all_lines[-lines:])


@lru_cache(maxsize=8)
def _prompt_environment(prompts_dir: Path) -> SandboxedEnvironment:
    environment = SandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(prompts_dir)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(fence=fence, tail=tail)
    return environment
