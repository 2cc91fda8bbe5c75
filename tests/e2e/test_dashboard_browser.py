"""The dashboard in a real browser: headless Chromium (Debian's `chromium`), driven by Playwright with
the system browser, through the sandbox GitHub and a real `lanebot serve`. It signs in (the sandbox's
sign-in page and authorize form), opens a run's page while the run waits at its gate, watches the
lanes appear and reach `merged` without a reload (server-sent events, live.js) while the runs list's
"so far" ticks each second, opens a lane's transcript, gets 404 for a private repository's run, walks
the runs list and a run page by keyboard alone (a skip link first, then the filters and each run, each
attempt's link, Enter opening them, the focus always drawn), checks that at a phone's width nothing
but the tables' scrolling wrappers is wider than the screen, and signs in and reads the run page again
with JavaScript off.
Skipped with the reason when Chromium or Playwright is missing; failed under CI=true."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.plan import UNITS
from bot.demo.stack import Stack
from tests.e2e.dashboard_flow import PERSON, REPO, start_runs
from tests.services import unavailable

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
PHONE = {"width": 375, "height": 740}
SO_FAR = re.compile(r"^\d+ (s|min( \d+ s)?|h( \d+ min)?) so far$")
# What has the focus, and how it is drawn: a function, as the page's CSP refuses eval of strings.
FOCUSED = """() => {
    const element = document.activeElement;
    const style = getComputedStyle(element);
    return {
        tag: element.tagName.toLowerCase(),
        text: (element.textContent || "").trim(),
        href: element.getAttribute("href"),
        name: element.getAttribute("name"),
        attempt: element.closest("tr.attempt") !== null,
        outline: style.outlineStyle,
        outline_width: parseFloat(style.outlineWidth),
    };
}"""


def tab(page: Any) -> dict[str, Any]:
    """Press Tab: what has the focus then, which must show it (the stylesheet's :focus-visible)."""
    page.keyboard.press("Tab")
    focused: dict[str, Any] = page.evaluate(FOCUSED)
    assert focused["outline"] != "none" and focused["outline_width"] >= 2, f"the focus is not drawn on {focused}"
    return focused


def fits_the_width(page: Any) -> None:
    """Nothing makes the page scroll sideways: only the tables' wrappers (.scroll) may, inside it."""
    sizes = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], f"{page.url} is {sizes[0]} px wide in a {sizes[1]} px window"


def ticks(page: Any) -> None:
    """The runs list's "so far" advances each second, as the server writes durations."""
    ticking = page.locator("[data-live=runs] .ticking").first
    before = ticking.inner_text()
    assert SO_FAR.match(before), before
    ticking.evaluate("(element) => { window.tickedFrom = element.textContent; }")
    page.wait_for_function(
        "() => document.querySelector('[data-live=runs] .ticking').textContent !== window.tickedFrom"
    )
    assert SO_FAR.match(ticking.inner_text()), ticking.inner_text()
    # The server's seconds, counted on: 3725 s is written as format_duration writes it.
    page.evaluate(
        """() => {
            const probe = document.createElement("span");
            probe.id = "probe";
            probe.className = "ticking";
            probe.setAttribute("data-seconds", "3725");
            document.querySelector("main").appendChild(probe);
        }"""
    )
    page.wait_for_function("() => document.querySelector('#probe').textContent === '1 h 2 min so far'")
    page.evaluate("() => document.querySelector('#probe').remove()")


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright is not installed (pip install -e '.[test]')")
    chromium = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if chromium is None:
        unavailable("Chromium is missing (apt-get install -y chromium; .ci/run installs it)")
    with sync_playwright() as playwright:
        # --no-sandbox: Chromium's own sandbox needs user namespaces it does not get as root in a container.
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def test_a_person_signs_in_watches_lanes_move_live_and_reads_a_transcript(tmp_path: Path, browser: Any) -> None:
    with Stack(tmp_path / "stack", dashboard=True) as stack:
        runs = start_runs(stack, approve=False)
        context = browser.new_context()
        page = context.new_page()
        problems: list[str] = []
        page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: problems.append(str(error)))

        page.goto(f"{stack.lanebot_url}/dashboard/runs/{runs.readable}")
        assert page.url.startswith(f"{stack.sandbox_url}/login?")  # sent to GitHub's sign-in page
        page.fill("#login_field", PERSON)
        page.click("button[type=submit]")
        page.click("button[name=authorize][value='1']")  # the sandbox's authorize form
        page.wait_for_url(f"{stack.lanebot_url}/dashboard/runs/{runs.readable}")
        assert f"Signed in as {PERSON}" in page.inner_text("header")
        assert "No lanes yet" in page.inner_text("[data-live=lanes]")
        # Functions, not strings: the page's CSP (no 'unsafe-eval') refuses Playwright's eval of a string.
        page.wait_for_function("() => document.documentElement.getAttribute('data-live-state') === 'on'")
        page.goto(f"{stack.lanebot_url}/dashboard")
        ticks(page)  # the run waits at its gate: its duration grows
        page.goto(f"{stack.lanebot_url}/dashboard/runs/{runs.readable}")
        page.wait_for_function("() => document.documentElement.getAttribute('data-live-state') === 'on'")

        # What the page shows of each lane, sampled every 50 ms, in order (the page is never reloaded,
        # so these survive: the updates replace the lane table in place).
        page.evaluate(
            """() => {
                window.notReloaded = true;
                window.seen = {};
                setInterval(() => {
                    document.querySelectorAll("tr.lane").forEach((row) => {
                        const states = (window.seen[row.id] = window.seen[row.id] || []);
                        const state = row.querySelector(".state").textContent;
                        if (states[states.length - 1] !== state) states.push(state);
                    });
                }, 50);
            }"""
        )
        stack.human.comment(REPO, runs.readable_issue, login=PERSON, body="/approve")
        first = UNITS[0]["id"]
        page.wait_for_selector(f"#lane-{first}", timeout=60_000)
        merged = " && ".join(
            f"document.querySelector('#lane-{unit['id']} .state')?.textContent === 'merged'" for unit in UNITS
        )
        page.wait_for_function(f"() => {merged}", timeout=120_000)
        assert page.evaluate("() => window.notReloaded") is True  # updated in place, not reloaded
        page.wait_for_function(  # the sampler's next look
            "() => Object.values(window.seen).every((states) => states[states.length - 1] === 'merged')"
        )
        seen = page.evaluate("() => window.seen")
        assert set(seen) == {f"lane-{unit['id']}" for unit in UNITS}
        moved = {lane: states for lane, states in seen.items() if len(states) > 1}
        assert moved, f"no lane was seen changing state, only: {seen}"
        assert all(states[-1] == "merged" for states in seen.values()), seen
        assert "awaiting" not in page.inner_text("h1").lower()

        page.click(f"#lane-{first} ~ tr.attempt a")
        page.wait_for_url(f"**/lanes/{first}/attempts/1")
        assert f"Lane {first}, attempt 1" in page.inner_text("h1")
        assert page.locator("#transcript-heading").is_visible()

        hidden = page.goto(f"{stack.lanebot_url}/dashboard/runs/{runs.hidden}")
        assert hidden is not None and hidden.status == 404

        # By keyboard alone. The run is over first, so that no live update moves the focus away.
        page.goto(f"{stack.lanebot_url}/dashboard/runs/{runs.readable}")
        page.wait_for_function("() => document.querySelector('h1 .state')?.textContent === 'done'", timeout=120_000)
        page.goto(f"{stack.lanebot_url}/dashboard")
        assert tab(page)["text"] == "Skip to the content"
        page.keyboard.press("Enter")  # past the header, to the content
        assert [tab(page)["name"] for _ in range(2)] == ["repository", "state"]
        assert tab(page)["text"] == "Show"
        run_links = page.eval_on_selector_all("tr.run a", "(links) => links.map((link) => link.getAttribute('href'))")
        assert run_links == [f"/dashboard/runs/{runs.readable}"]
        assert [tab(page)["href"] for _ in run_links] == run_links
        page.keyboard.press("Enter")
        page.wait_for_url(f"{stack.lanebot_url}{run_links[-1]}")

        attempt_links = page.eval_on_selector_all(
            "tr.attempt a", "(links) => links.map((link) => link.getAttribute('href'))"
        )
        assert len(attempt_links) >= len(UNITS)
        reached: list[str] = []
        for _ in range(300):  # every focusable thing on the page, at most
            focused = tab(page)
            if focused["attempt"]:
                reached.append(focused["href"])
            if len(reached) == len(attempt_links):
                break
        assert reached == attempt_links, f"Tab reached {reached} of the attempts' links {attempt_links}"
        page.keyboard.press("Enter")
        page.wait_for_url(f"{stack.lanebot_url}{attempt_links[-1]}")
        assert page.locator("#transcript-heading").is_visible()

        page.set_viewport_size(PHONE)
        for path in ("/dashboard", f"/dashboard/runs/{runs.readable}", attempt_links[0]):
            page.goto(f"{stack.lanebot_url}{path}")
            fits_the_width(page)
        assert tab(page)["text"] == "Skip to the content"
        context.close()
        assert not [p for p in problems if "404" not in p], problems

        # With JavaScript off: signing in (plain forms) and the run page as it stands.
        plain = browser.new_context(java_script_enabled=False)
        page = plain.new_page()
        page.goto(f"{stack.lanebot_url}/dashboard/runs/{runs.readable}")
        page.fill("#login_field", PERSON)
        page.click("button[type=submit]")  # authorized before: the sandbox sends them straight back
        page.wait_for_url(f"{stack.lanebot_url}/dashboard/runs/{runs.readable}")
        assert page.locator("tr.lane .state", has_text="merged").count() == len(UNITS)
        plain.close()
