"""A first run without a public address: `lanebot serve` with LANEBOT_WEBHOOK_PROXY_URL, the App's
webhook URL a relay channel the sandbox serves in smee.io's format. GitHub never reaches lanebot;
every delivery comes through the channel into lanebot's own intake and its signature check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import select

from bot.demo.plan import issue_body
from bot.demo.runner import repository_config
from bot.demo.stack import Stack
from bot.edges.store import db
from bot.edges.store.models import Delivery
from tests.app_helpers import sign

pytestmark = pytest.mark.slow

REPO = "octo-org/tasks"
MAINTAINER = "maintainer"
CHANNEL = "lanebot-e2e-AbC123"
STEP_TIMEOUT = 120.0


class RelayedStack(Stack):
    """The stack with the App's webhook URL a sandbox channel that lanebot reads, as `lanebot setup`
    leaves it with LANEBOT_WEBHOOK_PROXY_URL set."""

    @property
    def channel_url(self) -> str:
        return f"{self.sandbox_url}/channels/{CHANNEL}"

    def start_lanebot(self) -> None:
        assert self.human is not None
        self.human.set_webhook(self.channel_url)
        self.lanebot_env["LANEBOT_WEBHOOK_PROXY_URL"] = self.channel_url
        super().start_lanebot()
        self.wait_for("lanebot reads the channel", lambda: self.channel()["readers"] == 1, timeout=STEP_TIMEOUT)

    def stop_lanebot(self) -> int:
        """SIGTERM lanebot, as a person's Ctrl-C or a service manager would; its exit status."""
        process = self._lanebot
        assert process is not None
        os.killpg(process.pid, signal.SIGTERM)
        return process.wait(timeout=30)

    def channel(self) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(f"{self.sandbox_url}/_sandbox/channels/{CHANNEL}").json()
        return answer

    def log(self) -> str:
        return (self.root / "lanebot.log").read_text(errors="replace")


@pytest.fixture
def stack(tmp_path: Path) -> Any:
    with RelayedStack(tmp_path / "stack") as running:
        running.create_repository(REPO, config=repository_config("recipe"), maintainers=(MAINTAINER,))
        yield running


def stored_delivery_ids(stack: RelayedStack) -> set[str]:
    engine = db.make_engine(stack.database_url)
    try:
        with db.session(engine) as session:
            return {row.delivery_id for row in session.exec(select(Delivery)).all()}
    finally:
        engine.dispose()


def open_issue(stack: RelayedStack, title: str) -> int:
    assert stack.human is not None
    number: int = stack.human.open_issue(REPO, login=MAINTAINER, title=title, body=issue_body())["number"]
    return number


def app_comments(stack: RelayedStack, number: int) -> list[str]:
    return [comment["body"] for comment in stack.issue(REPO, number)["comments"] if comment["by_app"]]


def wait_for_gate(stack: RelayedStack, number: int) -> str:
    def gate() -> str | None:
        return next((body for body in app_comments(stack, number) if body.startswith("<!-- lanebot:gate")), None)

    return stack.wait_for(
        f"the gate comment on #{number}",
        gate,
        timeout=STEP_TIMEOUT,
        seen=lambda: f"comments {app_comments(stack, number)}; lanebot.log tail {stack.log()[-2000:]}",
    )


def plan_comment_delivery(stack: RelayedStack, number: int) -> dict[str, Any]:
    """What the sandbox sent the channel for the `/plan` comment on issue `number`."""
    assert stack.human is not None
    for summary in stack.human.deliveries():
        if (summary["event"], summary["action"]) != ("issue_comment", "created"):
            continue
        detail = stack.human.delivery(summary["id"])
        payload = detail["request"]["payload"]
        if payload["issue"]["number"] == number and payload["comment"]["body"] == "/plan":
            return detail
    raise AssertionError(f"no /plan comment delivery for #{number}")


def test_a_plan_comment_relayed_through_the_channel_is_verified_and_processed(stack: RelayedStack) -> None:
    assert stack.human is not None
    number = open_issue(stack, "Tasks need a status")
    stack.human.comment(REPO, number, login=MAINTAINER, body="/plan")

    wait_for_gate(stack, number)
    delivery = plan_comment_delivery(stack, number)
    assert delivery["guid"] in stored_delivery_ids(stack)
    assert delivery["url"] == stack.channel_url  # GitHub delivered to the channel, never to lanebot
    relayed = f"relayed delivery {delivery['guid']} (issue_comment) accepted: 202"
    assert relayed in stack.log()


def test_a_relayed_delivery_signed_with_another_secret_is_refused_logged_and_not_processed(
    stack: RelayedStack,
) -> None:
    """Anyone who knows a channel's URL can post to it: the signature check is what protects lanebot."""
    assert stack.human is not None
    genuine_issue = open_issue(stack, "Tasks need a status")
    target = open_issue(stack, "An issue someone else wants planned")
    stack.human.comment(REPO, genuine_issue, login=MAINTAINER, body="/plan")
    wait_for_gate(stack, genuine_issue)

    # The same /plan comment, aimed at the other issue and signed without the App's secret.
    payload = plan_comment_delivery(stack, genuine_issue)["request"]["payload"]
    payload["issue"]["number"] = target
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    forged_id = str(uuid.uuid4())
    headers = {
        "X-GitHub-Event": "issue_comment",
        "X-GitHub-Delivery": forged_id,
        "X-Hub-Signature-256": sign(body, "a secret that is not the App's"),
        "Content-Type": "application/json",
    }
    assert httpx.post(stack.channel_url, content=body, headers=headers).status_code == 200

    refusal = f"relayed delivery {forged_id} (issue_comment) refused: 401"
    stack.wait_for("lanebot logs the refusal", lambda: refusal in stack.log(), timeout=STEP_TIMEOUT)
    assert any("webhook refused (401)" in line and forged_id in line for line in stack.log().splitlines())
    assert forged_id not in stored_delivery_ids(stack)  # refused at the intake: nothing to process
    assert app_comments(stack, target) == []


def test_serve_stopping_closes_the_relay(stack: RelayedStack) -> None:
    assert stack.channel()["readers"] == 1
    # A graceful shutdown: uvicorn raises the signal again once the app has shut down.
    assert stack.stop_lanebot() in (0, -signal.SIGTERM)
    assert stack.channel()["readers"] == 0
    log = stack.log()
    stopped = log.index(f"stopped reading the relay channel {stack.channel_url}")
    assert stopped < log.index("Application shutdown complete")
    assert "Traceback" not in log


def lose_a_plan_comment(stack: RelayedStack) -> tuple[int, dict[str, Any]]:
    """A `/plan` comment made while lanebot is down: the issue's number, and what the sandbox sent."""
    assert stack.human is not None
    number = open_issue(stack, "Tasks need a status")
    stack.stop_lanebot()
    stack.human.comment(REPO, number, login=MAINTAINER, body="/plan")
    lost = plan_comment_delivery(stack, number)
    assert lost["status_code"] == 200  # the channel's answer, not lanebot's: GitHub shows it delivered
    return number, lost


def test_what_the_channel_took_while_lanebot_was_down_is_recovered_with_lanebot_deliveries_recover(
    stack: RelayedStack,
) -> None:
    """The channel keeps nothing for a new reader (as smee.io); `lanebot deliveries recover`, which
    with a relay channel asks again for every event lanebot has not stored, brings it back."""
    number, lost = lose_a_plan_comment(stack)
    stack.lanebot_env["LANEBOT_RECOVER_DELIVERIES"] = "0"  # no pass of its own at start-up
    stack.start_lanebot()
    assert lost["guid"] not in stored_delivery_ids(stack)

    recovered = subprocess.run(
        [sys.executable, "-m", "bot.cli", "deliveries", "recover", "--since", "1h"]
        + ["--env-file", str(stack.root / "no.env")],
        env=stack.lanebot_environment(),
        cwd=stack.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert f"redelivery requested: issue_comment.created {lost['guid']}" in recovered.stdout
    wait_for_gate(stack, number)
    assert lost["guid"] in stored_delivery_ids(stack)


def test_serve_recovers_what_it_missed_once_it_reads_the_channel_again(stack: RelayedStack) -> None:
    number, lost = lose_a_plan_comment(stack)
    stack.start_lanebot()  # LANEBOT_RECOVER_DELIVERIES is on by default
    wait_for_gate(stack, number)
    log = stack.log()
    connected = log.rindex(f"HTTP Request: GET {stack.channel_url}")  # the restarted serve's stream
    assert log.index(f"redelivery requested: issue_comment.created {lost['guid']}") > connected
