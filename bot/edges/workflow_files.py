"""The workflow's files on this host: the default workflow and its prompt templates, read and validated.

The default is `bot/workflows/resolve-issue.yaml` (shipped in the package), or the one in
LANEBOT_WORKFLOWS_DIR when that is set; its `prompts/` folder holds the templates. The merging and
validation are bot.core.workflow's; this module only reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bot.core.workflow import WORKFLOW_FILE_NAME, Workflow, WorkflowError, build_workflow, parse_yaml

__all__ = ["DEFAULT_WORKFLOW", "WORKFLOWS_DIR_ENV", "default_workflow_path", "load_workflow"]

DEFAULT_WORKFLOW: Path = Path(__file__).resolve().parents[1] / "workflows" / WORKFLOW_FILE_NAME
WORKFLOWS_DIR_ENV = "LANEBOT_WORKFLOWS_DIR"


def default_workflow_path() -> Path:
    """The default workflow file, honouring LANEBOT_WORKFLOWS_DIR at call time."""
    folder = os.environ.get(WORKFLOWS_DIR_ENV)
    return Path(folder) / WORKFLOW_FILE_NAME if folder else DEFAULT_WORKFLOW


def load_workflow(
    overrides: Sequence[tuple[str, Mapping[str, Any]]] = (),
    *,
    path: Path | None = None,
    host_overrides: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> Workflow:
    """The default workflow at `path` (default: `default_workflow_path()`), then the host's overrides,
    then a repository's, validated together (bot.core.workflow.build_workflow). Raises WorkflowError."""
    path = path or default_workflow_path()
    prompts_dir = path.parent / "prompts"
    available = [entry.name for entry in prompts_dir.iterdir() if entry.is_file()] if prompts_dir.is_dir() else []
    return build_workflow(
        (str(path), _read_workflow_file(path)),
        overrides,
        prompts_dir=prompts_dir,
        available_prompts=available,
        host_overrides=host_overrides,
    )


def _read_workflow_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise WorkflowError(
            [
                f"{path}: cannot read the workflow file ({error.strerror or error}); "
                f"check {WORKFLOWS_DIR_ENV} or the installation"
            ]
        ) from None
    return parse_yaml(text, str(path))
