"""A sleep a test holds: a rate-limit wait that lasts exactly as long as the test wants."""

from __future__ import annotations

import asyncio


class HeldSleep:
    """An injected sleep that waits until `release` is set; `started` is set at its first call."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.started.set()
        await self.release.wait()
