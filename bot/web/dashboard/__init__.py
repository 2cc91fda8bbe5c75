"""The dashboard: every run a signed-in person may see, its unit graph and its lanes, in a browser.
Read-only, served by `lanebot serve` under /dashboard, pages that work without JavaScript.

- `GET /dashboard`: the runs of the repositories the person can read, newest first; `?repository=`
  and `?state=` filter them.
- `GET /dashboard/runs/{id}`: the unit graph as SVG drawn on the server (bot.render.dashboard), two
  timelines of the lanes (planned from the estimates, and what happened: each attempt's wait for a
  slot, its agent, its check, its merge), the wall-clock beside the sum of the attempts and the
  plan's estimates, the other sessions, the run's event log, links to GitHub. Durations of what is
  still going tick in the browser (live.js) from the time the server rendered.
- `GET /dashboard/runs/{id}/lanes/{unit}/attempts/{n}`: the attempt's transcript read for people,
  its check's output, its diff stat, the host that ran it.
- `GET /dashboard/login`, `GET /dashboard/oauth/callback`, `POST /dashboard/logout`: Sign in with
  GitHub, the App's OAuth client in GitHub's web flow (bot/web/dashboard/github.py).
- `GET /dashboard/events?run={id}` (a run's page) and `GET /dashboard/events` (the runs list):
  server-sent events. Each stream asks the database every second for a digest of what its page
  shows (bot.edges.store.dashboard) and sends `event: change` when it starts and whenever that
  changed (`gone` when the run no longer exists; a comment line every 15 s of quiet). Access is
  checked as for the pages (401 when not signed in, 404 for a run the person cannot read); a stream
  ends when the client goes, when the server is stopping, and after five minutes, when the browser
  connects again (`retry`) and access is checked anew. The pages load one script,
  /dashboard/static/live.js: on each `change` it fetches the page again and replaces the parts
  marked `data-live`. Without JavaScript the pages show the state at load time.

Access: a person sees the runs of the repositories GitHub lists for them through the App's
installations (`GET /user/installations/{id}/repositories`), asked at sign-in and again after five
minutes (bot/web/dashboard/session.py). When GitHub issues expiring user tokens, the person's token
is renewed with its refresh token before it expires; a token GitHub refuses and cannot renew signs
the person out with a page saying to sign in again (401). Any other run, lane or attempt answers 404, as one that does
not exist. Without GITHUB_CLIENT_ID and GITHUB_CLIENT_SECRET the dashboard is off: its pages answer
404 saying which settings turn it on.

Every response under /dashboard carries a strict Content-Security-Policy (nothing but this origin's
stylesheet, images and script, and the script's event stream and fetches; no inline script or
style, no eval, no frame, forms only to this origin), `X-Content-Type-Options: nosniff`,
`Referrer-Policy: no-referrer` and `X-Frame-Options: DENY`. Its one stylesheet ships in the
package (bot/web/dashboard/static/) and is served from /dashboard/static/, as is live.js.
"""

from bot.web.dashboard.github import GitHubUser, GitHubUsers, HttpGitHubUsers, SignInFailed, TokenRejected
from bot.web.dashboard.pages import SECURITY_HEADERS, Dashboard, dashboard_routes

__all__ = [
    "SECURITY_HEADERS",
    "Dashboard",
    "GitHubUser",
    "GitHubUsers",
    "HttpGitHubUsers",
    "SignInFailed",
    "TokenRejected",
    "dashboard_routes",
]
