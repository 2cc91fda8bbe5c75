"""`lanebot serve`'s HTTP parser and event loop: httptools and uvloop where they import, else h11 and asyncio."""

from __future__ import annotations

import sys

import pytest
import uvicorn

from bot.cli.serve import ServerImplementation, server_implementation


def test_uvicorn_standard_gives_httptools_and_uvloop():
    # pyproject asks for uvicorn[standard]; this platform (Linux, CPython) has wheels for both.
    assert server_implementation() == ServerImplementation(http="httptools", loop="uvloop")


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        (("httptools",), ServerImplementation(http="h11", loop="uvloop")),
        (("uvloop",), ServerImplementation(http="httptools", loop="asyncio")),
        (("httptools", "uvloop"), ServerImplementation(http="h11", loop="asyncio")),
    ],
)
def test_without_a_fast_module_serve_falls_back_to_uvicorns_own(monkeypatch, missing, expected):
    for module in missing:
        monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    assert server_implementation() == expected


@pytest.mark.parametrize("blocked", [(), ("httptools", "uvloop")])
def test_uvicorn_loads_what_serve_chooses(monkeypatch, blocked):
    for module in blocked:
        monkeypatch.setitem(sys.modules, module, None)
    chosen = server_implementation()
    config = uvicorn.Config(app=_app, http=chosen.http, loop=chosen.loop)
    config.load()  # imports the protocol class, as uvicorn.run does before it listens
    assert config.http_protocol_class.__module__ == f"uvicorn.protocols.http.{chosen.http}_impl"


async def _app(scope, receive, send):  # never called: Config.load only needs an ASGI app
    raise AssertionError("not served")
