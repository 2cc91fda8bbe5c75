"""`lanebot demo --screenshots DIR`: pictures of the dashboard, taken by headless Chromium.

After the demo's run, Chromium (Debian's `chromium`, at /usr/bin/chromium or on PATH) driven by
Playwright (the pip package, given that browser's path: Playwright downloads no browser here) signs
in through the sandbox as a person who can read the demo's repository, and saves the runs list as
DIR/runs.png and the run's page as DIR/run.png, each 1280x800, and that page's timelines as
DIR/time.png. `chromium_path` says clearly what is missing before the demo starts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 800
TIMEOUT_MS = 30_000


class BrowserMissing(RuntimeError):
    """Chromium or Playwright is not installed; the message says how to install it."""


class ScreenshotFailed(RuntimeError):
    """The browser could not sign in or open a page; the message says which step."""


def chromium_path() -> str:
    """The system Chromium's path, once Playwright imports; BrowserMissing otherwise."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        raise BrowserMissing(
            "Playwright is not installed: pip install playwright (or pip install -e '.[test]'); "
            "it drives the system Chromium, so no `playwright install` is needed"
        ) from None
    chromium = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if chromium is None:
        raise BrowserMissing(f"Chromium is missing (no {CHROMIUM}, none on PATH): apt-get install -y chromium")
    return chromium


def take_screenshots(lanebot_url: str, login: str, folder: Path) -> list[Path]:
    """Sign in to lanebot's dashboard at `lanebot_url` as `login` and save folder/runs.png (the runs
    list) folder/run.png (the newest run's page) and folder/time.png (that page's timelines,
    planned and as it happened). The paths written."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    chromium = chromium_path()
    folder.mkdir(parents=True, exist_ok=True)
    runs_png, run_png, time_png = folder / "runs.png", folder / "run.png", folder / "time.png"
    step = "starting Chromium"
    try:
        with sync_playwright() as playwright:
            # --no-sandbox: Chromium's own sandbox needs user namespaces it does not get as root in a container.
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            try:
                page = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}).new_page()
                page.set_default_timeout(TIMEOUT_MS)
                step = "signing in through the sandbox's sign-in page"
                page.goto(f"{lanebot_url}/dashboard")
                page.fill("#login_field", login)
                page.click("button[type=submit]")
                page.click("button[name=authorize][value='1']")
                page.wait_for_url(f"{lanebot_url}/dashboard")
                step = "the runs list"
                page.wait_for_selector("tr.run a")
                page.screenshot(path=str(runs_png))
                step = "a run's page"
                page.click("tr.run a")
                page.wait_for_url(f"{lanebot_url}/dashboard/runs/*")
                page.wait_for_selector("tr.lane")
                page.screenshot(path=str(run_png))
                step = "the run's timelines"
                page.locator("section[aria-labelledby=time-heading]").screenshot(path=str(time_png))
            finally:
                browser.close()
    except PlaywrightError as error:
        raise ScreenshotFailed(f"{step}: {error}") from error
    return [runs_png, run_png, time_png]
