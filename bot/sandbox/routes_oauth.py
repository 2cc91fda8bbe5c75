"""GitHub's web pages for signing a person in to the App (the OAuth web application flow): on
github.com these are served by github.com, not api.github.com; here by the sandbox's one address,
without the REST API's headers.

- `GET /login/oauth/authorize?client_id=&redirect_uri=&state=&login=`: an unknown `client_id` is an
  HTML 404 page and sends no one anywhere. A `redirect_uri` must be exactly one of the App's
  callback URLs (`PATCH /_sandbox/app {"callback_urls": [...]}`); when it is not, the person is
  sent to the first callback URL with `error=redirect_uri_mismatch`, `error_description`,
  `error_uri` and `state`, as GitHub documents. A person not signed in goes to the sign-in page
  (`/login?return_to=...`), and so does one signed in as someone other than a `login` the App
  suggests. The first time, the person is asked to authorize the App (a form that posts back
  here; Cancel sends them back with `error=access_denied`); after that they are sent straight
  back, as on GitHub. They return to `redirect_uri` (or the first callback URL) with `code` and
  the same `state`.
- `POST /login/oauth/access_token` (client_id, client_secret, and code [, redirect_uri], or
  grant_type=refresh_token and refresh_token; as query parameters, a form or JSON): the user
  access token and its refresh token (bot.sandbox.oauth); a refresh token is good once, and an
  unknown, spent or expired one is `bad_refresh_token`. With the App's expiring user tokens off
  (`PATCH /_sandbox/app {"expiring_user_tokens": false}`) the answer has neither `expires_in` nor a
  refresh token. Errors are HTTP 200 with `error`, `error_description` and `error_uri`, as GitHub
  answers them. `Accept: application/json` gives
  JSON, `application/xml` XML, anything else a form-encoded body, as GitHub does.

The sign-in page is the sandbox's stand-in for github.com's: a person names their login (no
password; a login the sandbox has not seen signs up, as GitHub's sign-up would) and gets a
browser session in the `user_session` cookie (HttpOnly, SameSite=Lax, so that a form on another
site cannot authorize for them; sandbox sessions do not expire). `POST /logout` ends it. Cookies
belong to a host, not a port: a client served on the sandbox's host must name its own cookies
otherwise. The device flow is not served.
"""

from __future__ import annotations

import html
import json
import re
import secrets
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from bot.sandbox.core import Sandbox
from bot.sandbox.oauth import AUTHORIZE_ERRORS, Issued, OAuthRefused
from bot.sandbox.state import Account, AppRecord

SESSION_COOKIE = "user_session"
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
_WEB_PATHS = ("/login", "/session", "/logout")
_FORM = "application/x-www-form-urlencoded"


def is_web_path(path: str) -> bool:
    """A path of GitHub's web pages rather than of its REST API."""
    return path in _WEB_PATHS or path.startswith("/login/")


def _sandbox(request: Request) -> Sandbox:
    sandbox: Sandbox = request.app.state.sandbox
    return sandbox


def _page(title: str, body: str, status: int = 200) -> Response:
    text = (
        '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)} · Sandbox GitHub</title></head>\n"
        f"<body>\n<main>\n<h1>{html.escape(title)}</h1>\n{body}\n</main>\n</body>\n</html>\n"
    )
    return Response(text, status_code=status, media_type="text/html; charset=utf-8")


def _not_found() -> Response:
    return _page("Page not found", "<p>This is not the web page you are looking for.</p>", 404)


async def _fields(request: Request) -> dict[str, str]:
    """The request's parameters: its query, then its body (a form or JSON) over them."""
    fields = dict(request.query_params)
    raw = await request.body()
    if not raw.strip():
        return fields
    if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if isinstance(data, dict):
            fields.update({k: str(v) for k, v in data.items() if isinstance(v, (str, int)) and not isinstance(v, bool)})
        return fields
    fields.update(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
    return fields


def _same(given: str, expected: str) -> bool:
    return secrets.compare_digest(given.encode(), expected.encode())


def _signed_in(request: Request) -> Account | None:
    return _sandbox(request).oauth.signed_in(request.cookies.get(SESSION_COOKIE))


def _with_query(url: str, params: dict[str, str]) -> str:
    return f"{url}{'&' if urlsplit(url).query else '?'}{urlencode(params)}"


def _local(path: str | None) -> str | None:
    """`path` when it is a path on this site (a sign-in never sends a person elsewhere)."""
    if path and path.startswith("/") and not path.startswith(("//", "/\\")):
        return path
    return None


# signing in


def _sign_in_page(request: Request, *, login: str, return_to: str, error: str | None = None) -> Response:
    current = _signed_in(request)
    notes = []
    if error:
        notes.append(f'<p role="alert">{html.escape(error)}</p>')
    if current is not None:
        notes.append(
            f"<p>Signed in as <strong>{html.escape(current.login)}</strong>.</p>"
            '<form method="post" action="/logout"><button type="submit">Sign out</button></form>'
        )
    body = (
        "\n".join(notes) + "<p>The sandbox's stand-in for GitHub's sign-in page: name a login, no password "
        "(a login the sandbox has not seen signs up).</p>\n"
        '<form method="post" action="/session">\n'
        '<label for="login_field">Username</label>\n'
        f'<input type="text" name="login" id="login_field" value="{html.escape(login)}" '
        'autocapitalize="off" autocomplete="username" required autofocus>\n'
        f'<input type="hidden" name="return_to" value="{html.escape(return_to)}">\n'
        '<button type="submit" name="commit" value="Sign in">Sign in</button>\n'
        "</form>"
    )
    return _page("Sign in", body, 422 if error else 200)


async def sign_in_page(request: Request) -> Response:
    params = request.query_params
    return _sign_in_page(request, login=params.get("login", ""), return_to=_local(params.get("return_to")) or "")


async def sign_in(request: Request) -> Response:
    """The sign-in form: a browser session for the named person, then back to where they were going."""
    fields = await _fields(request)
    login, return_to = fields.get("login", "").strip(), _local(fields.get("return_to")) or ""
    state = _sandbox(request).state
    account = state.find_account(login) if _LOGIN.match(login) else None
    if account is None and _LOGIN.match(login):
        account = state.account(login)  # signing up
    if account is None or account.type != "User":
        return _sign_in_page(request, login=login, return_to=return_to, error="Incorrect username or password.")
    response = RedirectResponse(return_to or "/login", status_code=302)
    _sandbox(request).oauth.sign_out(request.cookies.get(SESSION_COOKIE))
    value = _sandbox(request).oauth.sign_in(account)
    response.set_cookie(SESSION_COOKIE, value, httponly=True, samesite="lax", path="/")
    return response


async def sign_out(request: Request) -> Response:
    _sandbox(request).oauth.sign_out(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/login", status_code=302)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")
    return response


# authorizing


def _send_back(target: str, params: dict[str, str], state: str | None) -> Response:
    if state is not None:
        params = {**params, "state": state}
    return RedirectResponse(_with_query(target, params), status_code=302)


def _send_back_error(target: str, error: str, state: str | None) -> Response:
    description, uri = AUTHORIZE_ERRORS[error]
    return _send_back(target, {"error": error, "error_description": description, "error_uri": uri}, state)


async def _authorize(request: Request, fields: dict[str, str], *, decision: str | None) -> Response:
    """Both halves of /login/oauth/authorize: `decision` None for the GET, "1" or else for the form."""
    sandbox = _sandbox(request)
    app = sandbox.app
    if not _same(fields.get("client_id", ""), app.client_id):
        return _not_found()
    state, redirect_uri = fields.get("state"), fields.get("redirect_uri") or None
    if not app.callback_urls:
        return _page(
            "The App has no callback URL",
            "<p>The sandbox has nowhere to send you back to: give the App a callback URL with "
            "<code>PATCH /_sandbox/app {&quot;callback_urls&quot;: [...]}</code>.</p>",
            400,
        )
    if redirect_uri is not None and redirect_uri not in app.callback_urls:
        return _send_back_error(app.callback_urls[0], "redirect_uri_mismatch", state)
    target = redirect_uri or app.callback_urls[0]
    person, suggested = _signed_in(request), fields.get("login", "").strip()
    if person is None or (suggested and suggested.lower() != person.login.lower()):
        query = urlencode({k: v for k, v in fields.items() if k in ("client_id", "redirect_uri", "state", "login")})
        params = {"client_id": app.client_id, "return_to": f"/login/oauth/authorize?{query}"}
        if suggested:
            params["login"] = suggested
        return RedirectResponse(f"/login?{urlencode(params)}", status_code=302)
    if decision is None and not sandbox.oauth.has_approved(person):
        return _consent_page(app, person, fields, target)
    if decision is not None and decision != "1":
        return _send_back_error(target, "access_denied", state)
    sandbox.oauth.approve(person)
    code = sandbox.oauth.issue_code(person, app.client_id, redirect_uri)
    return _send_back(target, {"code": code}, state)


def _consent_page(app: AppRecord, person: Account, fields: dict[str, str], target: str) -> Response:
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{html.escape(fields[name])}">\n'
        for name in ("client_id", "redirect_uri", "state", "login")
        if fields.get(name)
    )
    name = html.escape(app.name)
    body = (
        f"<p><strong>{name}</strong> by {html.escape(app.owner.login)} would like permission to verify your "
        f"GitHub identity (<strong>{html.escape(person.login)}</strong>), know which resources you can access, "
        "and act on your behalf.</p>\n"
        f'<form method="post" action="/login/oauth/authorize">\n{hidden}'
        f'<button type="submit" name="authorize" value="1">Authorize {name}</button>\n'
        '<button type="submit" name="authorize" value="0">Cancel</button>\n'
        "</form>\n"
        f"<p>Authorizing will redirect to <code>{html.escape(target)}</code>.</p>"
    )
    return _page(f"Authorize {app.name}", body)


async def authorize(request: Request) -> Response:
    return await _authorize(request, dict(request.query_params), decision=None)


async def authorize_decision(request: Request) -> Response:
    fields = await _fields(request)
    return await _authorize(request, fields, decision=fields.get("authorize", ""))


# the token endpoint


def _token_answer(request: Request, answer: dict[str, Any]) -> Response:
    accept = request.headers.get("accept", "").lower()
    if "application/json" in accept:
        return Response(json.dumps(answer), media_type="application/json; charset=utf-8")
    if "application/xml" in accept:
        items = "".join(f"<{key}>{html.escape(str(value))}</{key}>" for key, value in answer.items())
        return Response(f"<OAuth>{items}</OAuth>", media_type="application/xml; charset=utf-8")
    return Response(urlencode(answer), media_type=f"{_FORM}; charset=utf-8")


async def access_token(request: Request) -> Response:
    sandbox = _sandbox(request)
    app = sandbox.app
    fields = await _fields(request)
    try:
        issued = _exchange(sandbox, app, fields)
    except OAuthRefused as refused:
        return _token_answer(request, refused.answer())
    return _token_answer(request, issued.answer())


def _exchange(sandbox: Sandbox, app: AppRecord, fields: dict[str, str]) -> Issued:
    client_ok = _same(fields.get("client_id", ""), app.client_id)
    secret_ok = _same(fields.get("client_secret", ""), app.client_secret)
    if not (client_ok and secret_ok):
        raise OAuthRefused("incorrect_client_credentials")
    grant_type = fields.get("grant_type") or "authorization_code"
    if grant_type == "refresh_token":
        return sandbox.oauth.refresh(fields.get("refresh_token", ""))
    if grant_type != "authorization_code":
        raise OAuthRefused("unsupported_grant_type")
    redirect_uri = fields.get("redirect_uri") or None
    if redirect_uri is not None and redirect_uri not in app.callback_urls:
        raise OAuthRefused("redirect_uri_mismatch")
    return sandbox.oauth.redeem(fields.get("code", ""), app.client_id, redirect_uri)


ROUTES = [
    Route("/login", sign_in_page, methods=["GET"]),
    Route("/session", sign_in, methods=["POST"]),
    Route("/logout", sign_out, methods=["POST"]),
    Route("/login/oauth/authorize", authorize, methods=["GET"]),
    Route("/login/oauth/authorize", authorize_decision, methods=["POST"]),
    Route("/login/oauth/access_token", access_token, methods=["POST"]),
]
