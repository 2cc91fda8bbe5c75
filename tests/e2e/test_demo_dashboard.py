"""`lanebot demo --keep` turns the dashboard on and prints its address and who can sign in (checked
through `main` with the run itself stubbed, so that --keep does not block); without --keep the
dashboard stays off and nothing of it is printed; `--screenshots DIR` says clearly what is missing
when Playwright or Chromium is, before it starts anything. (The screenshots themselves: the command
run in README's dashboard section, which wrote docs/screenshots/.)"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.cli import main as cli_main
from bot.demo import runner, screenshots
from bot.demo.runner import MAINTAINER, REPOSITORY, DemoResult, dashboard_lines

LANEBOT_URL = "http://127.0.0.1:8123"
SANDBOX_URL = "http://127.0.0.1:8124"


def test_the_dashboard_lines_name_its_address_the_login_and_how_to_sign_in() -> None:
    address, how = dashboard_lines(LANEBOT_URL)
    assert address == f"The dashboard: {LANEBOT_URL}/dashboard"
    assert f"Sign in as `{MAINTAINER}`" in how and f"a collaborator of {REPOSITORY}" in how
    assert "asks only for a login" in how


class _Process:
    def wait(self) -> int:  # the sandbox "exits" at once: --keep does not block the test
        return 0


class _Stack:
    lanebot_url = LANEBOT_URL
    sandbox_url = SANDBOX_URL
    _sandbox = _Process()

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def _result() -> DemoResult:
    return DemoResult(
        gate_comment="gate",
        pull={"number": 2, "title": "t", "body": "b", "pull_request": {"head": "lanebot/1"}},
        check_runs=[],
        lanes=[],
        wall_clock_s=1.0,
        graph_log="",
        api_requests=0,
    )


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`run_demo` replaced: what it was asked, and the stack it returned."""
    seen: dict[str, Any] = {"stack": _Stack()}

    def run_demo(root: Path, **kwargs: Any) -> tuple[_Stack, DemoResult]:
        seen.update(kwargs)
        return seen["stack"], _result()

    monkeypatch.setattr(runner, "run_demo", run_demo)
    return seen


def test_keep_turns_the_dashboard_on_and_prints_its_address_and_a_login(
    tmp_path: Path, stubbed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["demo", "--keep", "--dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert stubbed["dashboard"] is True
    assert f"Both servers keep running (--keep): sandbox {SANDBOX_URL}, lanebot {LANEBOT_URL}." in printed
    lines = printed.splitlines()
    for line in dashboard_lines(LANEBOT_URL):
        assert line in lines
    assert stubbed["stack"].stopped


def test_without_keep_the_dashboard_stays_off_and_is_not_printed(
    tmp_path: Path, stubbed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["demo", "--dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert stubbed["dashboard"] is False
    assert "dashboard" not in printed.lower() and "keep running" not in printed


def test_screenshots_without_playwright_says_how_to_install_it(
    tmp_path: Path, stubbed: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)  # import fails
    assert cli_main(["demo", "--screenshots", str(tmp_path / "shots"), "--dir", str(tmp_path)]) == 2
    printed = capsys.readouterr().out
    assert printed.startswith("lanebot demo --screenshots: Playwright is not installed: pip install playwright")
    assert "dashboard" not in stubbed  # the demo never started


def test_screenshots_without_chromium_says_how_to_install_it(
    tmp_path: Path, stubbed: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("playwright.sync_api")
    monkeypatch.setattr(screenshots, "CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert cli_main(["demo", "--screenshots", str(tmp_path / "shots"), "--dir", str(tmp_path)]) == 2
    printed = capsys.readouterr().out
    assert "lanebot demo --screenshots: Chromium is missing" in printed and "apt-get install -y chromium" in printed
    assert "dashboard" not in stubbed
