"""The `recipe` adapter: applies files written out verbatim in the unit's brief, and nothing else.

It is for hand-written plans, the demo and tests: no model, no command, no network. A recipe is a
set of fenced code blocks whose info string carries `path=<relative path>`:

    ```python path=src/app.py
    print("hello")
    ```

Each such block's content becomes that file under the working directory (parents created, the
content byte for byte). A block whose info string also has the word `delete` removes that file
instead (its content is ignored; a file already absent is fine). Quote a path with spaces:
`path="docs/read me.md"`. Fenced blocks without `path=` are ignored, so a brief may still show code.

Refused, with nothing written: an absolute path, a `..` component, a path inside `.git`, a path that
leads out of the working directory through a symlink, a path that is a directory, the same path
twice, a block that is never closed. A brief without any file block is a failed session. The
recipe cannot run read-only: it exists to change the tree.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bot.edges.agents.base import AgentRequest, AgentResult, Usage
from bot.edges.agents.transcript import Transcript, utc_timestamp

_OPENING_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")
HOW_TO_WRITE_A_RECIPE = (
    "a recipe is fenced code blocks whose info string carries path=<relative path>, "
    "e.g. ```python path=src/app.py (add the word delete to remove a file)"
)


@dataclass(frozen=True)
class RecipeBlock:
    path: str
    content: str
    delete: bool
    line: int


@dataclass(frozen=True)
class ParsedRecipe:
    blocks: tuple[RecipeBlock, ...]
    problems: tuple[str, ...]


def parse_recipe(text: str) -> ParsedRecipe:
    """The file blocks of `text` and what is wrong with them (pure: no file is looked at)."""
    blocks: list[RecipeBlock] = []
    problems: list[str] = []
    lines = text.splitlines(keepends=True)
    index = 0
    while index < len(lines):
        opening = _OPENING_FENCE.match(lines[index].rstrip("\r\n"))
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            index += 1
            continue
        end = _closing_index(lines, index, opening["fence"])
        attributes, attribute_problem = _attributes(opening["info"])
        if "path" in attributes or attribute_problem:
            where = f"line {index + 1}"
            if attribute_problem:
                problems.append(f"{where}: {attribute_problem}")
            elif end is None:
                problems.append(f"{where}: the block for {attributes['path']} is never closed")
            else:
                content = _dedent("".join(lines[index + 1 : end]), len(opening["indent"]))
                block = RecipeBlock(attributes["path"], content, "delete" in attributes, index + 1)
                problems += [f"{where}: {problem}" for problem in path_problems(block.path)]
                blocks.append(block)
        index = len(lines) if end is None else end + 1
    problems += _duplicates(blocks)
    return ParsedRecipe(tuple(blocks), tuple(problems))


def path_problems(path: str) -> list[str]:
    """Why `path` may not be written by a recipe, judged on its text alone."""
    if not path.strip():
        return ["an empty path"]
    if "\x00" in path:
        return [f"{path!r} contains a NUL character"]
    if path.startswith(("/", "\\")) or _WINDOWS_DRIVE.match(path):
        return [f"{path} is absolute; recipe paths are relative to the working directory"]
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        return [f"{path} climbs out of the working directory with .."]
    if ".git" in parts:
        return [f"{path} is inside .git, which a recipe may not touch"]
    return []


def _closing_index(lines: Sequence[str], opening: int, fence: str) -> int | None:
    closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
    for index in range(opening + 1, len(lines)):
        if closing.match(lines[index].rstrip("\r\n")):
            return index
    return None


def _attributes(info: str) -> tuple[dict[str, str], str | None]:
    try:
        tokens = shlex.split(info)
    except ValueError as error:
        if "path=" in info:
            return {}, f"cannot read the block's info string {info.strip()!r}: {error}"
        return {}, None
    attributes: dict[str, str] = {}
    for token in tokens:
        key, has_value, value = token.partition("=")
        attributes[key] = value if has_value else ""
    return attributes, None


def _dedent(content: str, indent: int) -> str:
    if not indent:
        return content
    pattern = re.compile(rf"^ {{0,{indent}}}", re.MULTILINE)
    return pattern.sub("", content)


def _duplicates(blocks: Sequence[RecipeBlock]) -> list[str]:
    seen: dict[str, int] = {}
    problems = []
    for block in blocks:
        key = str(PurePosixPath(block.path.replace("\\", "/")))
        if key in seen:
            problems.append(f"line {block.line}: {block.path} was already given on line {seen[key]}")
        else:
            seen[key] = block.line
    return problems


def filesystem_problems(blocks: Sequence[RecipeBlock], root: Path) -> list[str]:
    """Why a block may not be applied under `root` as the tree stands (symlinks, directories)."""
    resolved_root = root.resolve()
    problems = []
    for block in blocks:
        target = root / block.path
        resolved = target.resolve()
        if not resolved.is_relative_to(resolved_root):
            problems.append(f"line {block.line}: {block.path} leads out of the working directory (to {resolved})")
        elif target.is_dir() and not target.is_symlink():
            problems.append(f"line {block.line}: {block.path} is a directory")
    return problems


def apply_recipe(blocks: Sequence[RecipeBlock], root: Path, record: Callable[[str, str, int], None]) -> None:
    """Write or delete each block's file under `root`, calling `record(action, path, bytes)` after each:
    action `write`, `delete`, or `delete-absent` (the file was not there)."""
    for block in blocks:
        target = root / block.path
        if block.delete:
            existed = target.exists() or target.is_symlink()
            target.unlink(missing_ok=True)
            record("delete" if existed else "delete-absent", block.path, 0)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        data = block.content.encode("utf-8")
        target.write_bytes(data)
        record("write", block.path, len(data))


_DONE = {"write": "wrote {}", "delete": "deleted {}", "delete-absent": "{} was already absent"}


class RecipeAgent:
    """Applies the files in a unit's brief. For hand-written plans, the demo and tests only."""

    name = "recipe"

    async def run(self, request: AgentRequest, *, on_start: Callable[[int], None] | None = None) -> AgentResult:
        if not request.cwd.is_dir():
            raise NotADirectoryError(f"the recipe agent's working directory {request.cwd} does not exist")
        with Transcript(request.transcript) as transcript:
            transcript.annotate("start", agent=self.name, cwd=str(request.cwd), at=utc_timestamp())
            final, error = self._apply(request, transcript)
            transcript.annotate("outcome", ok=error is None, error=error, final_message_chars=len(final))
        return AgentResult(
            exit_status=None, final_message=final, usage=Usage(), transcript=request.transcript, error=error
        )

    def _apply(self, request: AgentRequest, transcript: Transcript) -> tuple[str, str | None]:
        if request.read_only:
            return "", (
                "the recipe agent writes files and cannot run read-only; "
                "for a hand-written plan use a lanebot-plan block instead"
            )
        if request.brief is None:
            return "", "the recipe agent reads its files from the unit's brief, and this request has none"
        parsed = parse_recipe(request.brief)
        problems = list(parsed.problems) or filesystem_problems(parsed.blocks, request.cwd)
        if problems:
            return "", f"the recipe was not applied, nothing was written: {'; '.join(problems)}"
        if not parsed.blocks:
            return "", f"the recipe agent found no file block in the brief: {HOW_TO_WRITE_A_RECIPE}"

        done: list[str] = []

        def record(action: str, path: str, size: int) -> None:
            transcript.annotate("recipe", action=action, path=path, bytes=size)
            done.append(_DONE[action].format(path))

        try:
            apply_recipe(parsed.blocks, request.cwd, record)
        except OSError as failure:
            applied = f" after it {', '.join(done)}" if done else ""
            return "", f"the recipe stopped{applied}: {failure}"
        return "\n".join(done), None
