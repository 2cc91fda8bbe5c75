"""Sign in with GitHub through the real sandbox and a real `lanebot serve`, no browser: an httpx
client follows the web flow (the dashboard, the sandbox's sign-in page and authorize form, the
callback) and then sees the runs of the repository the person is a collaborator on, and none of a
private repository they have no role on (its run's URLs answer 404, as ones that do not exist)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from bot.demo.plan import UNITS
from bot.demo.stack import Stack
from tests.e2e.dashboard_flow import PERSON, REPO, SECRET_REPO, sign_in, start_runs, wait_for_pull

pytestmark = pytest.mark.slow


def test_a_collaborator_signs_in_through_the_sandbox_and_sees_only_their_repositorys_runs(tmp_path: Path) -> None:
    with Stack(tmp_path / "stack", dashboard=True) as stack:
        runs = start_runs(stack)
        wait_for_pull(stack, runs.readable_issue)

        with httpx.Client(timeout=30) as client:
            listing = sign_in(client, stack, PERSON)
            assert f"Signed in as <strong>{PERSON}</strong>" in listing.text
            assert f'href="/dashboard/runs/{runs.readable}"' in listing.text and REPO in listing.text
            assert f"/dashboard/runs/{runs.hidden}" not in listing.text and SECRET_REPO not in listing.text
            assert "nosniff" == listing.headers["x-content-type-options"]

            page = client.get(f"{stack.lanebot_url}/dashboard/runs/{runs.readable}")
            assert page.status_code == 200
            for unit in UNITS:
                assert f'id="lane-{unit["id"]}"' in page.text
            assert page.text.count('<span class="state lane-merged">merged</span>') == len(UNITS)
            attempt = client.get(
                f"{stack.lanebot_url}/dashboard/runs/{runs.readable}/lanes/{UNITS[0]['id']}/attempts/1"
            )
            assert attempt.status_code == 200, attempt.text[:800]

            for path in (f"/dashboard/runs/{runs.hidden}", f"/dashboard/runs/{runs.hidden}/lanes/a/attempts/1"):
                hidden = client.get(f"{stack.lanebot_url}{path}")
                assert hidden.status_code == 404 and SECRET_REPO not in hidden.text
            filtered = client.get(f"{stack.lanebot_url}/dashboard", params={"repository": SECRET_REPO})
            assert filtered.status_code == 200 and f"/dashboard/runs/{runs.hidden}" not in filtered.text

            # Without the cookie: sent to sign in, nothing shown.
            anonymous = httpx.get(f"{stack.lanebot_url}/dashboard/runs/{runs.readable}")
            assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/dashboard/login")

            # A page's event stream, open when lanebot is told to stop, ends at once: uvicorn waits for
            # open responses, and would otherwise wait the stream out.
            lines: list[str] = []
            opened = threading.Event()

            def listen() -> None:
                try:
                    with client.stream("GET", f"{stack.lanebot_url}/dashboard/events?run={runs.readable}") as stream:
                        assert stream.headers["content-type"].startswith("text/event-stream")
                        for line in stream.iter_lines():
                            lines.append(line)
                            opened.set()
                except httpx.HTTPError:
                    pass

            listener = threading.Thread(target=listen, daemon=True)
            listener.start()
            assert opened.wait(10), lines
            started = time.monotonic()
            stack.stop()
            assert time.monotonic() - started < 4
            listener.join(5)
            assert "event: change" in lines
