"""README's *Giving lanebot an agent* says what the tests do: the same pinned CLIs, variables that
lanebot really passes to them, and the demo command that tests/e2e/test_real_agents.py runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bot.core.workflow import CLAUDE_ENV, CODEX_ENV

ROOT = Path(__file__).resolve().parent.parent


def agent_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Giving lanebot an agent")
    return readme[start : readme.index("\n## ", start + 1)]


def test_the_readme_installs_the_versions_the_tests_pin() -> None:
    pins = json.loads((ROOT / "agents" / "package.json").read_text())["dependencies"]
    [install] = [line for line in agent_section().splitlines() if line.startswith("npm install -g ")]

    assert install.split()[3:] == [f"{name}@{version}" for name, version in pins.items()]


def test_every_credential_the_readme_exports_is_one_lanebot_passes_to_that_cli() -> None:
    exported = re.findall(r"^export ([A-Z_]+)=", agent_section(), flags=re.MULTILINE)

    assert exported and all(name in CLAUDE_ENV or name in CODEX_ENV for name in exported)
    assert "ANTHROPIC_BASE_URL" in CLAUDE_ENV  # the endpoint the README names for Claude Code


def test_the_readme_tries_it_with_the_demo_command_the_end_to_end_test_runs() -> None:
    test = (ROOT / "tests" / "e2e" / "test_real_agents.py").read_text(encoding="utf-8")

    assert "lanebot demo --agent claude" in agent_section()
    assert 'cli_main(["demo", "--agent", "claude", "--dir"' in test


def dashboard_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("### The dashboard")
    return readme[start : readme.index("\n## ", start + 1)]


def test_the_dashboard_section_shows_the_screenshots_with_the_command_that_wrote_them() -> None:
    section = dashboard_section()

    assert "lanebot demo --screenshots docs/screenshots\n" in section
    for name in ("runs.png", "run.png", "time.png"):
        assert f"](docs/screenshots/{name})" in section
        assert (ROOT / "docs" / "screenshots" / name).read_bytes().startswith(b"\x89PNG")
    assert "lanebot demo --keep" in section
