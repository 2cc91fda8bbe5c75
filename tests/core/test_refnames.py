"""bot.core.refnames decides as `git check-ref-format` does, for every rule of git-check-ref-format(1)."""

from __future__ import annotations

import subprocess

import pytest

from bot.core.refnames import is_valid_ref_name

NAMES = [
    "refs/heads/main",
    "refs/heads/lanebot-lanes/17/api",
    "refs/heads/feature/ünïcode",
    "refs/heads/v1.2",
    "refs/heads/a-b_c+d=e,f",
    "refs/heads/with@sign",
    "refs/heads/foo.bar/baz",
    "refs/heads/foo./bar",
    "refs/heads/-starts-with-dash",
    "main",  # rule 2: one level
    "@",  # rule 9
    "refs/heads/.hidden",  # rule 1
    "refs/heads/x/.hidden",
    "refs/heads/branch.lock",
    "refs/heads/branch.lock/x",
    "refs/heads/a..b",  # rule 3
    "refs/heads/a\x01b",  # rule 4
    "refs/heads/a\x7fb",
    "refs/heads/a b",
    "refs/heads/a~1",
    "refs/heads/a^",
    "refs/heads/a:b",
    "refs/heads/a?",  # rule 5
    "refs/heads/a*",
    "refs/heads/a[b",
    "/refs/heads/a",  # rule 6
    "refs/heads/a/",
    "refs/heads//a",
    "refs/heads/a.",  # rule 7
    "refs/heads/a@{1}",  # rule 8
    "refs/heads/a\\b",  # rule 10
    "refs/heads/a\tb",
]


@pytest.mark.parametrize("name", NAMES)
def test_a_ref_name_is_valid_exactly_when_git_check_ref_format_says_so(name: str) -> None:
    git = subprocess.run(["git", "check-ref-format", name], capture_output=True, env={"PATH": "/usr/bin:/bin"})
    assert is_valid_ref_name(name) == (git.returncode == 0)
