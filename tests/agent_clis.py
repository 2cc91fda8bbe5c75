"""Where the tests find the real Claude Code and Codex CLIs, and what happens when they are missing.

`make agents` (run by `make test`) installs the versions `agents/package.json` pins into
`.agents/node_modules/.bin`; `$LANEBOT_REAL_CLI_BIN` names another folder. Without the CLI a test
that needs it skips, saying how to install it, except under CI=true, where it fails: CI must not
pass by testing less.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.services import unavailable

REPOSITORY = Path(__file__).resolve().parent.parent
INSTALLED = REPOSITORY / ".agents" / "node_modules" / ".bin"
FOLDER_ENV = "LANEBOT_REAL_CLI_BIN"


def cli_folder() -> Path:
    named = os.environ.get(FOLDER_ENV, "").strip()
    return Path(named) if named else INSTALLED


def real_cli(name: str) -> str | None:
    """The real `name` CLI (`claude` or `codex`): in the pinned install, else None."""
    return shutil.which(name, path=str(cli_folder()))


def require_real_cli(name: str) -> str:
    """The real `name` CLI's path; skips the test without it (fails under CI=true)."""
    found = real_cli(name)
    if found is not None:
        return found
    message = (
        f"the real `{name}` CLI is not in {cli_folder()}: run `make agents` (needs npm, Node.js 18+) "
        f"or point ${FOLDER_ENV} at a folder that has it"
    )
    unavailable(message)
