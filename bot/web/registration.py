"""Registering the GitHub App from its manifest (GitHub's "manifest flow").

`GET /setup` renders a page whose form posts `app.yml` (with the webhook and redirect URLs built
on the configured `public_url`, never on the request's Host header, which any client sets) to
GitHub's App-creation form; with a relay channel set (LANEBOT_WEBHOOK_PROXY_URL) the webhook URL is the
channel. When GitHub could not deliver to the webhook URL (bot/core/reachability.py: loopback,
private, `localhost`, ...), the page says so and gives the steps to a relay channel. Only `lanebot setup` serves these pages; the running App does not. GitHub creates the App and
sends the browser back to `GET /setup/callback?code=&state=`; lanebot checks the state it set
in a signed, short-lived cookie, exchanges the code for the App's credentials
(`POST /app-manifests/{code}/conversions`) and writes APP_ID, PRIVATE_KEY and WEBHOOK_SECRET to
`.env`, and the App's OAuth client (GITHUB_CLIENT_ID, GITHUB_CLIENT_SECRET: the dashboard's Sign in
with GitHub, whose callback the manifest registers as `<public_url>/dashboard/oauth/callback`), then
sends the browser to the App's installation page.

The code is exchanged only once lanebot is going to write: GitHub shows the private key once,
so a refusal (existing values in `.env`, not confirmed with `force=1`) happens before the
exchange and the same link works again after confirming.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gidgethub
import httpx
import jinja2
import yaml
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from bot.core.reachability import RELAY_STEPS, unreachable_reason
from bot.edges.github.client import convert_manifest
from bot.edges.settings import DEFAULT_API_URL, DEFAULT_WEBHOOK_PATH, parse_env_text, webhook_proxy_setting
from bot.render.dashboard.links import web_url_for_api

log = logging.getLogger(__name__)

MANIFEST_PATH = Path(__file__).resolve().parents[2] / "app.yml"
CALLBACK_PATH = "/setup/callback"
STATE_COOKIE = "lanebot_setup_state"
STATE_LIFETIME_SECONDS = 3600  # GitHub's manifest code is valid for one hour
CREDENTIAL_KEYS = ("APP_ID", "PRIVATE_KEY", "WEBHOOK_SECRET", "GITHUB_CLIENT_ID", "GITHUB_CLIENT_SECRET")
# Where GitHub sends a person back after Sign in with GitHub (bot/web/dashboard), registered in the manifest.
OAUTH_CALLBACK_PATH = "/dashboard/oauth/callback"
# A key file setting would shadow or contradict the new PRIVATE_KEY, so it is replaced too.
REPLACED_KEYS = CREDENTIAL_KEYS + ("PRIVATE_KEY_PATH",)
_ORG = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
_CODE = re.compile(r"[A-Za-z0-9_-]{1,200}")

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent / "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
)


class SetupError(Exception):
    """The set-up flow cannot go on; `status` is the HTTP answer, the message says what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# -- pure: URLs, the manifest, the state, .env text ----------------------------------------


def creation_url(web: str, org: str | None, state: str) -> str:
    """Where the manifest form posts: the personal or the organisation App-creation form."""
    query = urllib.parse.urlencode({"state": state})
    if org:
        return f"{web}/organizations/{urllib.parse.quote(org)}/settings/apps/new?{query}"
    return f"{web}/settings/apps/new?{query}"


def fill_manifest(manifest: dict[str, Any], base_url: str, webhook_path: str, webhook_url: str = "") -> dict[str, Any]:
    """The manifest with its webhook and redirect URLs pointed at `base_url`; with `webhook_url` (a
    relay channel), GitHub delivers there instead (the redirect is the browser's, so it may be local)."""
    base = base_url.rstrip("/")
    filled = dict(manifest)
    hook_url = webhook_url or base + webhook_path
    filled["hook_attributes"] = {**(manifest.get("hook_attributes") or {}), "url": hook_url}
    filled["redirect_url"] = base + CALLBACK_PATH
    filled["callback_urls"] = [base + OAUTH_CALLBACK_PATH]
    return filled


def valid_org(org: str) -> bool:
    return bool(_ORG.fullmatch(org))


def valid_code(code: str) -> bool:
    return bool(_CODE.fullmatch(code))


@dataclass(frozen=True)
class StateSigner:
    """Issues and checks the `state` of one manifest flow, carried in a signed, expiring cookie."""

    key: bytes
    lifetime_seconds: int = STATE_LIFETIME_SECONDS

    def issue(self, now: float) -> tuple[str, str]:
        """A new random state and the cookie value that vouches for it."""
        state = secrets.token_urlsafe(24)
        expires = str(int(now) + self.lifetime_seconds)
        return state, f"{state}.{expires}.{self._mac(state, expires)}"

    def check(self, cookie: str | None, state: str | None, now: float) -> str | None:
        """Why the state is not the one this browser was given (None when it is)."""
        if not state:
            return "the callback has no state; start again at /setup"
        if not cookie:
            return "this browser has no set-up cookie (it expired or was blocked); start again at /setup"
        parts = cookie.split(".")
        if len(parts) != 3:
            return "the set-up cookie is malformed; start again at /setup"
        cookie_state, expires, mac = parts
        if not hmac.compare_digest(mac, self._mac(cookie_state, expires)):
            return "the set-up cookie was not issued by this lanebot; start again at /setup"
        if not expires.isdigit() or int(expires) < now:
            return "the set-up flow expired; start again at /setup"
        if not hmac.compare_digest(cookie_state, state):
            return "the state does not match the one this browser was given; start again at /setup"
        return None

    def _mac(self, state: str, expires: str) -> str:
        return hmac.new(self.key, f"{state}.{expires}".encode(), hashlib.sha256).hexdigest()


def format_env_value(value: str) -> str:
    """A .env value on one line: double-quoted, newlines as `\\n` (what bot.edges.settings reads)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def keys_to_replace(existing: dict[str, str]) -> list[str]:
    """The credential settings `.env` already has a value for."""
    return [key for key in REPLACED_KEYS if existing.get(key, "").strip()]


def update_env_text(text: str, values: dict[str, str], remove: tuple[str, ...] = ()) -> str:
    """`.env` text with `values` set (replacing their lines) and `remove` dropped; the rest kept."""
    kept: list[str] = []
    written: set[str] = set()
    for line in _logical_lines(text):
        key = _line_key(line)
        if key in values:
            if key not in written:
                kept.append(f"{key}={format_env_value(values[key])}")
                written.add(key)
        elif key not in remove:
            kept.append(line)
    kept.extend(f"{key}={format_env_value(value)}" for key, value in values.items() if key not in written)
    return "\n".join(kept) + "\n"


def _line_key(line: str) -> str | None:
    match = re.match(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=", line)
    return match.group(1) if match else None


def _logical_lines(text: str) -> list[str]:
    """Lines of `.env`, a quoted value spanning several lines kept as one entry."""
    entries: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        entry = lines[index]
        index += 1
        if _line_key(entry) is not None:
            while parse_env_text(entry)[1] and index < len(lines):
                entry += "\n" + lines[index]
                index += 1
        entries.append(entry)
    return entries


def credentials_from_conversion(conversion: dict[str, Any]) -> dict[str, str]:
    """The settings GitHub's manifest conversion gives: APP_ID, PRIVATE_KEY, WEBHOOK_SECRET and the
    OAuth client, GITHUB_CLIENT_ID and GITHUB_CLIENT_SECRET (both, or neither: the dashboard needs both)."""
    values = {"APP_ID": str(conversion["id"]), "PRIVATE_KEY": conversion["pem"]}
    if conversion.get("webhook_secret"):
        values["WEBHOOK_SECRET"] = conversion["webhook_secret"]
    if conversion.get("client_id") and conversion.get("client_secret"):
        values["GITHUB_CLIENT_ID"] = str(conversion["client_id"])
        values["GITHUB_CLIENT_SECRET"] = str(conversion["client_secret"])
    return values


# -- the edges: files, GitHub, HTTP ---------------------------------------------------------


def load_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SetupError(500, f"the App manifest {path} is missing; lanebot's repository has it as app.yml") from None
    except yaml.YAMLError as error:
        raise SetupError(500, f"the App manifest {path} is not valid YAML: {error}") from None
    if not isinstance(manifest, dict) or not manifest.get("name"):
        raise SetupError(500, f"the App manifest {path} must be a mapping with at least a name")
    return manifest


def read_env_file(path: Path) -> tuple[str, dict[str, str]]:
    """The text of `.env` and its values ('' and {} when there is none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", {}
    return text, parse_env_text(text)[0]


def relay_channel(env_path: Path, environ: Mapping[str, str]) -> tuple[str, str]:
    """(setting, URL) of the relay channel set in the environment or `.env` (the environment wins), or ("", "")."""
    return webhook_proxy_setting({**read_env_file(env_path)[1], **environ})


def write_env_file(path: Path, text: str) -> None:
    """Replace `.env` atomically, readable by its owner only (it holds the App's private key)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


async def exchange_code(http: httpx.AsyncClient, api_url: str, code: str) -> dict[str, Any]:
    """Trade the manifest flow's code for the new App's credentials, or say why GitHub would not."""
    try:
        conversion = await convert_manifest(http, code, api_url=api_url)
    except httpx.HTTPError as error:
        raise SetupError(
            502,
            f"GitHub could not be reached to finish the set-up ({type(error).__name__}); "
            "reload this page to try again within the hour",
        ) from None
    except gidgethub.HTTPException as error:
        if error.status_code == 404:
            raise SetupError(
                502, "GitHub does not know this code (it is used once and lasts an hour); start again at /setup"
            ) from None
        raise SetupError(
            502, f"GitHub refused the code with status {int(error.status_code)}; start again at /setup"
        ) from None
    if not isinstance(conversion, dict) or "id" not in conversion or "pem" not in conversion:
        raise SetupError(502, "GitHub's answer has no App id or private key; start again at /setup")
    return conversion


@dataclass
class SetupConfig:
    """How the set-up pages behave in one process."""

    env_path: Path = Path(".env")
    github_api_url: str = DEFAULT_API_URL
    webhook_path: str = DEFAULT_WEBHOOK_PATH
    manifest_path: Path = MANIFEST_PATH
    # Where GitHub and the browser reach this lanebot: the manifest's URLs are built on it.
    public_url: str = "http://127.0.0.1:3000"
    # A relay channel (LANEBOT_WEBHOOK_PROXY_URL) GitHub delivers to instead of public_url.
    webhook_url: str = ""
    http_client: Callable[[], httpx.AsyncClient] = lambda: httpx.AsyncClient(timeout=30)
    clock: Callable[[], float] = time.time
    state_signer: StateSigner = field(default_factory=lambda: StateSigner(secrets.token_bytes(32)))


def routes(config: SetupConfig) -> list[Route]:
    """The `GET /setup` and `GET /setup/callback` routes."""

    async def setup_page(request: Request) -> Response:
        try:
            return _render_setup_page(request, config)
        except SetupError as error:
            return _error_page(error)

    async def callback(request: Request) -> Response:
        try:
            return await _finish_setup(request, config)
        except SetupError as error:
            return _error_page(error)

    return [Route("/setup", setup_page, methods=["GET"]), Route(CALLBACK_PATH, callback, methods=["GET"])]


def _render_setup_page(request: Request, config: SetupConfig) -> Response:
    org = request.query_params.get("org", "").strip() or None
    if org is not None and not valid_org(org):
        raise SetupError(400, f"{org!r} is not a GitHub organisation name")
    manifest = fill_manifest(
        load_manifest(config.manifest_path), config.public_url, config.webhook_path, config.webhook_url
    )
    state, cookie = config.state_signer.issue(config.clock())
    page = _templates.get_template("setup.html").render(
        manifest_json=json.dumps(manifest, indent=2),
        action=creation_url(web_url_for_api(config.github_api_url), org, state),
        org=org,
        app_name=manifest["name"],
        webhook_url=manifest["hook_attributes"]["url"],
        webhook_unreachable=unreachable_reason(manifest["hook_attributes"]["url"], config.github_api_url),
        relay_steps=RELAY_STEPS,
        redirect_url=manifest["redirect_url"],
        env_path=config.env_path,
    )
    response = HTMLResponse(page)
    response.set_cookie(
        STATE_COOKIE,
        cookie,
        max_age=config.state_signer.lifetime_seconds,
        path="/setup",
        httponly=True,
        samesite="lax",
        secure=config.public_url.startswith("https://"),
    )
    return response


async def _finish_setup(request: Request, config: SetupConfig) -> Response:
    problem = config.state_signer.check(
        request.cookies.get(STATE_COOKIE), request.query_params.get("state"), config.clock()
    )
    if problem:
        raise SetupError(403, problem)
    code = request.query_params.get("code", "")
    if not valid_code(code):
        raise SetupError(400, "the callback has no valid code; start again at /setup")
    text, existing = read_env_file(config.env_path)
    replaced = keys_to_replace(existing)
    if replaced and request.query_params.get("force") != "1":
        return _confirm_page(request, config.env_path, replaced)
    async with config.http_client() as http:
        conversion = await exchange_code(http, config.github_api_url, code)
    values = credentials_from_conversion(conversion)
    write_env_file(config.env_path, update_env_text(text, values, remove=REPLACED_KEYS))
    log.info(
        "App %s (%s) registered; wrote %s to %s",
        conversion["id"],
        conversion.get("slug", "?"),
        ", ".join(values),
        config.env_path,
    )
    response = _after_write(conversion, values, config.env_path)
    response.delete_cookie(STATE_COOKIE, path="/setup")
    return response


def _after_write(conversion: dict[str, Any], values: dict[str, str], env_path: Path) -> Response:
    install_url = f"{str(conversion.get('html_url', '')).rstrip('/')}/installations/new"
    if "WEBHOOK_SECRET" in values:
        return RedirectResponse(install_url, status_code=303)
    page = _templates.get_template("setup_callback.html").render(
        kind="no_secret",
        env_path=env_path,
        app_url=conversion.get("html_url"),
        install_url=install_url,
    )
    return HTMLResponse(page, status_code=200)


def _confirm_page(request: Request, env_path: Path, replaced: list[str]) -> Response:
    absolute = request.url.include_query_params(force="1")
    confirm_url = f"{absolute.path}?{absolute.query}"  # relative: the host header is not trusted
    page = _templates.get_template("setup_callback.html").render(
        kind="confirm",
        env_path=env_path,
        replaced=replaced,
        confirm_url=confirm_url,
    )
    return HTMLResponse(page, status_code=409)


def _error_page(error: SetupError) -> Response:
    page = _templates.get_template("setup_callback.html").render(kind="error", message=error.message)
    return HTMLResponse(page, status_code=error.status)
