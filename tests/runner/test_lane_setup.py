"""A lane's cache is keyed by the files the repository names, and each lane running on a host holds
ports no other lane holds at the same time, freed when it ends."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from bot.runner.lane_setup import PORTS_START, cache_folder, cache_key, held_cache, held_ports


def test_the_cache_key_follows_the_named_files_contents_and_one_cache_serves_a_repository_without_keys(tmp_path):
    (tmp_path / "package-lock.json").write_text("{}")
    first = cache_key(tmp_path, ["package-lock.json", "requirements.txt"])
    assert first == cache_key(tmp_path, ["requirements.txt", "package-lock.json"])  # order does not matter
    (tmp_path / "requirements.txt").write_text("httpx\n")
    second = cache_key(tmp_path, ["package-lock.json", "requirements.txt"])
    assert second != first  # a file appearing keys a new cache
    (tmp_path / "requirements.txt").write_text("httpx==0.28\n")
    assert cache_key(tmp_path, ["package-lock.json", "requirements.txt"]) not in (first, second)
    assert cache_key(tmp_path, []) == "shared"


def test_a_key_file_that_links_outside_the_worktree_counts_as_missing(tmp_path):
    outside = tmp_path / "secret"
    outside.write_text("host secret")
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / "lock").symlink_to(outside)
    linked = cache_key(worktree, ["lock"])
    (worktree / "lock").unlink()
    assert linked == cache_key(worktree, ["lock"])


def test_the_cache_folder_is_the_repositorys_own_and_private(tmp_path):
    folder = cache_folder(tmp_path, "octo/one", "abc")
    assert folder == tmp_path / "cache" / "octo" / "one" / "abc"
    assert folder.stat().st_mode & 0o077 == 0


@pytest.mark.anyio
async def test_lanes_held_at_once_get_ports_no_other_holds_and_an_ended_lanes_ports_are_free_again(tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        held = [await stack.enter_async_context(held_ports(tmp_path, 10)) for _ in range(3)]
        wider = await stack.enter_async_context(held_ports(tmp_path, 25))  # another repository's count
        ranges = [range(p.base, p.base + p.count) for p in (*held, wider) if p is not None]
        assert [r.start for r in ranges[:3]] == [PORTS_START, PORTS_START + 10, PORTS_START + 20]
        taken = [port for r in ranges for port in r]
        assert len(taken) == len(set(taken)) == 55
    async with held_ports(tmp_path, 10) as again:
        assert again is not None and again.base == PORTS_START
        assert again.env() == {"LANEBOT_PORT_BASE": str(PORTS_START), "LANEBOT_PORT_COUNT": "10"}
    async with held_ports(tmp_path, 0) as none:
        assert none is None


@pytest.mark.anyio
async def test_set_ups_of_one_cache_take_turns(tmp_path):
    folder = cache_folder(tmp_path, "octo/one", "k")
    order: list[str] = []

    async def set_up(name: str) -> None:
        async with held_cache(folder):
            order.append(f"{name} in")
            await asyncio.sleep(0.05)
            order.append(f"{name} out")

    await asyncio.gather(set_up("a"), set_up("b"))
    assert order in (["a in", "a out", "b in", "b out"], ["b in", "b out", "a in", "a out"])
