"""What a test does when something it needs is not here (a server, a browser, a CLI): it skips with
the reason, except under CI=true, where everything is meant to be installed and that is a failure."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from bot.demo.services import ServiceUnavailable


def unavailable(message: str) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def borrowed(service: contextlib.AbstractContextManager[str]) -> Iterator[str]:
    """For a fixture: what one of bot.demo.services' lenders lends (a Redis database number, a
    throwaway PostgreSQL database), given back after; `unavailable` when its server is not."""
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(service)
        except ServiceUnavailable as error:
            unavailable(str(error))
        yield url
