"""Job leases (bot.edges.store.leases): one holder at a time, renewed by its holder only, free
again once released or run out, taken over once. On SQLite and PostgreSQL (the `engine` fixture)."""

from __future__ import annotations

from datetime import timedelta

from bot.edges.executor import lane_job, merge_job
from bot.edges.store import leases
from bot.edges.store import runs as store
from bot.edges.store.leases import job_key
from bot.edges.store.models import utc_now

TTL = timedelta(seconds=60)


def a_run(engine) -> int:
    run = store.create_run(engine, installation_id=1, repository="o/r", issue_number=1, requested_by="m")
    assert run.id is not None
    return run.id


def test_a_jobs_key_names_its_kind_run_unit_and_attempt_and_two_jobs_never_share_one():
    assert job_key(lane_job(7, "api", 2).key) == "lane|7|api|2|"
    assert job_key(merge_job(7, ("api", "ui")).key) == "merge|7||0|api,ui"
    assert job_key(lane_job(7, "api", 2).key) != job_key(lane_job(7, "api", 3).key)


def test_one_host_holds_a_lease_until_it_lets_go(engine):
    run_id, key = a_run(engine), "lane|1|api|1|"

    assert leases.acquire(engine, key, run_id, "host-a/1", TTL)
    assert not leases.acquire(engine, key, run_id, "host-b/1", TTL)
    assert not leases.renew(engine, key, "host-b/1", TTL)
    assert leases.renew(engine, key, "host-a/1", TTL)
    assert not leases.release(engine, key, "host-b/1")
    assert leases.release(engine, key, "host-a/1")

    assert leases.acquire(engine, key, run_id, "host-b/1", TTL)  # a job sent again after it ended
    assert leases.get(engine, key).holder == "host-b/1"


def test_a_lease_that_ran_out_is_expired_taken_over_once_and_its_old_holder_cannot_renew_it(engine):
    run_id, key = a_run(engine), "merge|1||0|api"
    start = utc_now() - timedelta(minutes=5)
    assert leases.acquire(engine, key, run_id, "host-a/1", TTL, now=start)

    assert [lease.job_key for lease in leases.expired(engine, run_id)] == [key]
    assert not leases.acquire(engine, key, run_id, "host-b/1", TTL)  # the task again: not a worker's to take
    assert leases.take_over(engine, key, "host-a/1")
    assert not leases.take_over(engine, key, "host-a/1")
    assert leases.expired(engine, run_id) == []
    assert not leases.renew(engine, key, "host-a/1", TTL)
    assert leases.acquire(engine, key, run_id, "host-b/1", TTL)


def test_a_lease_still_renewed_is_neither_expired_nor_free(engine):
    run_id, key = a_run(engine), "integrate|1||0|"
    assert leases.acquire(engine, key, run_id, "host-a/1", TTL, now=utc_now() - timedelta(seconds=50))
    assert leases.renew(engine, key, "host-a/1", TTL)

    assert leases.expired(engine, run_id) == []
    assert not leases.take_over(engine, key, "host-a/1")
    assert not leases.acquire(engine, key, run_id, "host-b/1", TTL)
