"""lanebot's settings: read once at start-up from the environment and an optional `.env` file.

The names are the ones GitHub App users already know from Probot (APP_ID, PRIVATE_KEY,
WEBHOOK_SECRET, ...); lanebot's own knobs are LANEBOT_*. The environment wins over `.env`.
Everything wrong is reported at once: `Settings.load` raises one `SettingsError` whose message
names every missing or invalid setting and says how to fix it, so start-up fails in one go
instead of one complaint per restart. Secrets never appear in `repr` or in error messages.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

DEFAULT_WEBHOOK_PATH = "/api/github/webhooks"
DEFAULT_API_URL = "https://api.github.com"
LOG_LEVELS = {
    "trace": "trace",
    "debug": "debug",
    "info": "info",
    "warn": "warning",
    "warning": "warning",
    "error": "error",
    "fatal": "critical",
    "critical": "critical",
}
LOG_FORMATS = ("text", "json")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_APP_ID = re.compile(r"\d+|Iv[0-9A-Za-z._-]+")  # the numeric App ID, or the App's Client ID
_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_ENV_LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)")
_HOW_TO_FIX = (
    "Run `lanebot setup` and open its /setup page to register the App with GitHub (it writes "
    "APP_ID, PRIVATE_KEY and WEBHOOK_SECRET to .env), or set these variables in the environment or in .env."
)


class SettingsError(Exception):
    """Some settings are missing or invalid; `problems` lists each, `names` the settings concerned."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.names = tuple(name for name, _ in problems)
        self.problems = tuple(text for _, text in problems)
        lines = "\n".join(f"  - {text}" for text in self.problems)
        count = "1 setting is" if len(problems) == 1 else f"{len(problems)} settings are"
        super().__init__(f"lanebot cannot start: {count} missing or invalid:\n{lines}\n{_HOW_TO_FIX}")


@dataclass(frozen=True)
class Settings:
    app_id: str
    private_key: str = field(repr=False)  # PEM text of the App's RSA key
    webhook_secret: str = field(repr=False)
    webhook_path: str = DEFAULT_WEBHOOK_PATH
    host: str = "127.0.0.1"
    port: int = 3000
    log_level: str = "info"
    # How log lines are written (LOG_FORMAT): "text", or "json", one object per line with the run, unit and delivery ids.
    log_format: str = "text"
    database_url: str = ""
    github_api_url: str = DEFAULT_API_URL
    workdir: Path = Path(".lanebot-work")
    max_lanes: int = 8
    max_runs_per_repo: int = 2
    recover_deliveries: bool = False
    # With recover_deliveries: seconds between the passes over GitHub's failed deliveries while serving
    # (LANEBOT_RECOVER_INTERVAL; 0: only the pass at start-up).
    recover_interval: float = 300.0
    # Run agents, checks and verify as plain processes, out of the jail (LANEBOT_UNJAILED=1).
    unjailed: bool = False
    # More host folders the jail shows read-only (LANEBOT_JAIL_READ_ONLY, separated by `:`), e.g. a toolchain.
    jail_read_only: tuple[Path, ...] = ()
    # PRIVATE_KEY_PATH, when set: the jail hides that file.
    private_key_path: Path | None = None
    # Owners whose repositories a `.github/lanebot.yml` may `_extends` beside its own owner
    # (LANEBOT_ALLOW_EXTENDS_OWNERS, comma-separated; `*`: any owner). A file it loads decides what runs.
    allow_extends_owners: tuple[str, ...] = ()
    # The longest a GitHub call waits out rate limits, in all, before it fails (LANEBOT_MAX_RATE_LIMIT_WAIT).
    max_rate_limit_wait: float = 300.0
    # How many deliveries (of different installations) the dispatcher handles at once (LANEBOT_DISPATCH_WORKERS).
    dispatch_workers: int = 8
    # Webhook bodies read at once before their signature is checked, and their bytes in all (the intake's caps).
    intake_max_bodies: int = 16
    intake_max_buffered_bytes: int = 64 * 1024 * 1024
    # How long the intake waits for the database to store a delivery before answering 503 (under GitHub's 10 s).
    intake_store_timeout: float = 8.0
    # A body stored within this many seconds is not stored again under a new delivery id (0: off).
    replay_window: float = 86400.0
    # Where lane, merge and integrate jobs go to `lanebot worker`s (LANEBOT_BROKER_URL, redis:// or amqp://);
    # empty: they run inside `lanebot serve` (the embedded executor).
    broker_url: str = field(default="", repr=False)
    # How long a worker's lease on a job lasts unrenewed before its job is taken over (LANEBOT_LEASE_TTL).
    lease_ttl: float = 60.0
    # The App's OAuth client (GITHUB_CLIENT_ID, GITHUB_CLIENT_SECRET; `lanebot setup` writes both): the
    # dashboard's Sign in with GitHub. Without them the dashboard is off (its pages answer 404 saying so).
    github_client_id: str = ""
    github_client_secret: str = field(default="", repr=False)
    # Where people reach this lanebot (LANEBOT_PUBLIC_URL, e.g. https://lanebot.example.com): the dashboard's
    # OAuth callback is built on it, and its cookie is Secure when it is https. Empty: GitHub uses the App's
    # callback URL, and the cookie is Secure when the request came over https.
    public_url: str = ""
    # A relay channel to receive webhooks through, for a lanebot GitHub cannot reach (LANEBOT_WEBHOOK_PROXY_URL,
    # or Probot's WEBHOOK_PROXY_URL; e.g. https://smee.io/AbC123); `webhook_proxy_setting` names the one read.
    webhook_proxy_url: str = ""
    webhook_proxy_setting: str = ""

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] = os.environ,
        env_file: str | os.PathLike[str] | None = ".env",
    ) -> Settings:
        """Read the settings; raise `SettingsError` naming every problem at once."""
        problems: list[tuple[str, str]] = []
        from_file = _read_env_file(Path(env_file), problems) if env_file is not None else {}
        values = {**from_file, **{k: v for k, v in environ.items() if v.strip()}}
        reader = _Reader(values, problems)
        cwd = Path.cwd()
        settings = dict(
            app_id=reader.app_id(),
            private_key=reader.private_key(),
            webhook_secret=reader.required("WEBHOOK_SECRET", "the secret GitHub signs deliveries with"),
            webhook_path=reader.webhook_path(),
            host=reader.get("HOST", "127.0.0.1"),
            port=reader.integer("PORT", 3000, low=1, high=65535),
            log_level=reader.log_level(),
            log_format=reader.log_format(),
            database_url=reader.database_url(f"sqlite:///{cwd}/lanebot.db"),
            github_api_url=reader.api_url(),
            workdir=_absolute(Path(reader.get("LANEBOT_WORKDIR", ".lanebot-work")), cwd),
            max_lanes=reader.integer("LANEBOT_MAX_LANES", 8, low=1),
            max_runs_per_repo=reader.integer("LANEBOT_MAX_RUNS_PER_REPO", 2, low=1),
            recover_deliveries=reader.boolean("LANEBOT_RECOVER_DELIVERIES", True),
            recover_interval=reader.seconds("LANEBOT_RECOVER_INTERVAL", 300.0, zero=True),
            unjailed=reader.boolean("LANEBOT_UNJAILED", False),
            jail_read_only=reader.absolute_paths("LANEBOT_JAIL_READ_ONLY"),
            private_key_path=reader.private_key_path(cwd),
            allow_extends_owners=_extends_owners(reader),
            max_rate_limit_wait=reader.seconds("LANEBOT_MAX_RATE_LIMIT_WAIT", 300.0),
            dispatch_workers=reader.integer("LANEBOT_DISPATCH_WORKERS", 8, low=1),
            intake_max_bodies=reader.integer("LANEBOT_INTAKE_MAX_BODIES", 16, low=1),
            intake_max_buffered_bytes=reader.integer("LANEBOT_INTAKE_MAX_BUFFERED_MB", 64, low=1) * 1024 * 1024,
            intake_store_timeout=reader.seconds("LANEBOT_INTAKE_STORE_TIMEOUT", 8.0, high=9.5),
            replay_window=reader.seconds("LANEBOT_REPLAY_WINDOW", 86400.0, zero=True),
            broker_url=_broker_url(reader),
            lease_ttl=reader.seconds("LANEBOT_LEASE_TTL", 60.0),
            **_oauth_client(reader),
            public_url=_public_url(reader),
            **_webhook_proxy(reader),
        )
        if problems:
            raise SettingsError(problems)
        return cls(**settings)  # type: ignore[arg-type]


def parse_env_text(text: str) -> tuple[dict[str, str], list[str]]:
    """Parse `.env` text: KEY=VALUE lines, `#` comments, optional `export`, quoted values.

    Double-quoted values may span lines and understand \\n, \\" and \\\\; single-quoted
    values are literal; an unquoted value ends at ` #`. Returns (values, problems).
    """
    values: dict[str, str] = {}
    problems: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index].strip()
        index += 1
        if not line or line.startswith("#"):
            continue
        match = _ENV_LINE.fullmatch(line)
        if match is None:
            problems.append(f"line {number} is not KEY=VALUE")
            continue
        key, raw = match.groups()
        if raw[:1] in {'"', "'"}:
            quote, body = raw[0], raw[1:]
            while not _closes(body, quote) and index < len(lines):
                body += "\n" + lines[index]
                index += 1
            if not _closes(body, quote):
                problems.append(f"line {number}: the quoted value of {key} is never closed")
                continue
            values[key] = _unquote(body[: _closing_index(body, quote)], quote)
        else:
            values[key] = raw.split(" #", 1)[0].strip()
    return values, problems


def _closing_index(body: str, quote: str) -> int:
    position = 0
    while position < len(body):
        if quote == '"' and body[position] == "\\":
            position += 2
            continue
        if body[position] == quote:
            return position
        position += 1
    return -1


def _closes(body: str, quote: str) -> bool:
    return _closing_index(body, quote) >= 0


def _unquote(body: str, quote: str) -> str:
    if quote == "'":
        return body
    escapes = {"n": "\n", '"': '"', "\\": "\\"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(0)), body)


def _read_env_file(path: Path, problems: list[tuple[str, str]]) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:
        problems.append((str(path), f"{path} cannot be read ({error.__class__.__name__}); fix or remove it"))
        return {}
    values, file_problems = parse_env_text(text)
    problems.extend((str(path), f"{path}: {problem}") for problem in file_problems)
    return values


def _absolute(path: Path, cwd: Path) -> Path:
    return path if path.is_absolute() else cwd / path


def private_key_problem(pem: str) -> str | None:
    """Why `pem` is not a usable App key (None when it is): an unencrypted PEM RSA private key."""
    try:
        key = serialization.load_pem_private_key(pem.encode("utf-8"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError):
        return "is not an unencrypted PEM private key"
    if not isinstance(key, rsa.RSAPrivateKey):
        return "is not an RSA key (GitHub Apps sign with RS256)"
    return None


def normalise_private_key(text: str) -> str:
    """Accept the PEM as GitHub gives it, with literal `\\n` escapes, or base64-encoded (as Probot does)."""
    text = text.strip().replace("\\n", "\n")
    if "-----BEGIN" in text:
        return text + "\n"
    try:
        decoded = base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return text
    return decoded if "-----BEGIN" in decoded else text


@dataclass
class _Reader:
    """Reads one setting at a time from the merged values, collecting every problem."""

    values: Mapping[str, str]
    problems: list[tuple[str, str]]

    def get(self, name: str, default: str) -> str:
        return self.values.get(name, default).strip()

    def problem(self, name: str, text: str) -> None:
        self.problems.append((name, text))

    def required(self, name: str, what: str) -> str:
        value = self.values.get(name, "")
        if not value.strip():
            self.problem(name, f"{name} is missing ({what})")
        return value.strip()

    def app_id(self) -> str:
        value = self.required("APP_ID", "the GitHub App's ID, shown on the App's settings page")
        if value and not _APP_ID.fullmatch(value):
            self.problem("APP_ID", f"APP_ID must be the App's numeric ID or its Client ID, not {value!r}")
        return value

    def private_key(self) -> str:
        if self.values.get("PRIVATE_KEY", "").strip():
            return self._checked_key("PRIVATE_KEY", self.values["PRIVATE_KEY"])
        path = self.values.get("PRIVATE_KEY_PATH", "").strip()
        if not path:
            self.problem(
                "PRIVATE_KEY", "PRIVATE_KEY (or PRIVATE_KEY_PATH) is missing (the App's private key, a .pem file)"
            )
            return ""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            self.problem("PRIVATE_KEY_PATH", f"PRIVATE_KEY_PATH {path} cannot be read ({error.__class__.__name__})")
            return ""
        return self._checked_key("PRIVATE_KEY_PATH", text)

    def private_key_path(self, cwd: Path) -> Path | None:
        """PRIVATE_KEY_PATH as an absolute path (set beside PRIVATE_KEY too: the file is still a key)."""
        path = self.values.get("PRIVATE_KEY_PATH", "").strip()
        return _absolute(Path(path), cwd) if path else None

    def _checked_key(self, name: str, text: str) -> str:
        pem = normalise_private_key(text)
        why = private_key_problem(pem)
        if why is not None:
            self.problem(name, f"{name} {why}: download a new private key from the App's settings page")
        return pem

    def webhook_path(self) -> str:
        value = self.get("WEBHOOK_PATH", DEFAULT_WEBHOOK_PATH)
        if not value.startswith("/"):
            self.problem("WEBHOOK_PATH", f"WEBHOOK_PATH must start with '/', not {value!r}")
        return value

    def integer(self, name: str, default: int, *, low: int, high: int | None = None) -> int:
        raw = self.get(name, str(default))
        try:
            value = int(raw)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
            self.problem(name, f"{name} must be a whole number {bounds}, not {raw!r}")
            return default
        return value

    def seconds(self, name: str, default: float, *, high: float | None = None, zero: bool = False) -> float:
        raw = self.get(name, str(default))
        try:
            value = float(raw)
        except ValueError:
            value = None
        low_ok = value is not None and (value >= 0 if zero else value > 0)
        if value is None or not low_ok or (high is not None and value > high):
            low = "0 or more" if zero else "above 0"
            bounds = f"{low} and at most {high:g}" if high is not None else low
            self.problem(name, f"{name} must be a number of seconds {bounds}, not {raw!r}")
            return default
        return value

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.get(name, "1" if default else "0").lower()
        if raw not in _TRUE | _FALSE:
            self.problem(name, f"{name} must be 0 or 1, not {raw!r}")
            return default
        return raw in _TRUE

    def absolute_paths(self, name: str) -> tuple[Path, ...]:
        paths = tuple(Path(part) for part in self.get(name, "").split(os.pathsep) if part.strip())
        relative = [str(path) for path in paths if not path.is_absolute()]
        if relative:
            self.problem(name, f"{name} must list absolute paths separated by {os.pathsep!r}, not {relative[0]!r}")
            return ()
        return paths

    def log_level(self) -> str:
        raw = self.get("LOG_LEVEL", "info").lower()
        if raw not in LOG_LEVELS:
            self.problem("LOG_LEVEL", f"LOG_LEVEL must be one of {', '.join(sorted(LOG_LEVELS))}, not {raw!r}")
            return "info"
        return LOG_LEVELS[raw]

    def log_format(self) -> str:
        raw = self.get("LOG_FORMAT", "text").lower()
        if raw not in LOG_FORMATS:
            self.problem("LOG_FORMAT", f"LOG_FORMAT must be {' or '.join(LOG_FORMATS)}, not {raw!r}")
            return "text"
        return raw

    def database_url(self, default: str) -> str:
        return self._url("DATABASE_URL", default, "a URL such as sqlite:///path/lanebot.db or postgresql://host/db")

    def api_url(self) -> str:
        value = self._url("GITHUB_API_URL", DEFAULT_API_URL, "an http(s) URL such as https://api.github.com")
        if _URL_SCHEME.match(value) and not value.startswith(("http://", "https://")):
            self.problem("GITHUB_API_URL", "GITHUB_API_URL must be an http(s) URL")
        return value.rstrip("/")

    def _url(self, name: str, default: str, what: str) -> str:
        value = self.get(name, default)
        if not _URL_SCHEME.match(value):
            # The value is not echoed: a database URL may carry a password.
            self.problem(name, f"{name} must be {what}")
        return value


_OWNER = re.compile(r"^(?:\*|[A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))$")


def _extends_owners(reader: _Reader) -> tuple[str, ...]:
    """LANEBOT_ALLOW_EXTENDS_OWNERS: GitHub owner names (or `*`), separated by commas."""
    name = "LANEBOT_ALLOW_EXTENDS_OWNERS"
    owners = tuple(part.strip() for part in reader.get(name, "").split(",") if part.strip())
    malformed = [owner for owner in owners if not _OWNER.match(owner)]
    if malformed:
        reader.problem(name, f"{name} must list GitHub owners (or *) separated by commas, not {malformed[0]!r}")
        return ()
    return owners


_BROKER_SCHEMES = ("redis://", "rediss://", "amqp://", "amqps://")


def _broker_url(reader: _Reader) -> str:
    """LANEBOT_BROKER_URL: a Redis or RabbitMQ URL, or nothing (jobs run in `lanebot serve`)."""
    name = "LANEBOT_BROKER_URL"
    value = reader.get(name, "")
    if value and not value.lower().startswith(_BROKER_SCHEMES):
        # The value is not echoed: a broker URL may carry a password.
        reader.problem(
            name, f"{name} must be a Redis or RabbitMQ URL such as redis://127.0.0.1:6379/0 or amqp://host:5672//"
        )
        return ""
    return value


def _oauth_client(reader: _Reader) -> dict[str, str]:
    """GITHUB_CLIENT_ID and GITHUB_CLIENT_SECRET, both or neither (the dashboard's sign-in needs both)."""
    client_id, secret = reader.get("GITHUB_CLIENT_ID", ""), reader.get("GITHUB_CLIENT_SECRET", "")
    if bool(client_id) != bool(secret):
        missing = "GITHUB_CLIENT_SECRET" if client_id else "GITHUB_CLIENT_ID"
        reader.problem(
            missing,
            f"{missing} is missing: GITHUB_CLIENT_ID and GITHUB_CLIENT_SECRET (the App's OAuth client, on its "
            "settings page) turn the dashboard on together; set both or neither",
        )
        return {"github_client_id": "", "github_client_secret": ""}
    return {"github_client_id": client_id, "github_client_secret": secret}


def _public_url(reader: _Reader) -> str:
    """LANEBOT_PUBLIC_URL: an http(s) URL with a host and no query, or nothing."""
    name = "LANEBOT_PUBLIC_URL"
    value = reader.get(name, "").rstrip("/")
    if not value:
        return ""
    if not re.fullmatch(r"https?://[^/?#\s]+(?:/[^?#\s]*)?", value):
        reader.problem(name, f"{name} must be an http(s) URL such as https://lanebot.example.com, not {value!r}")
        return ""
    return value


WEBHOOK_PROXY_SETTINGS = ("LANEBOT_WEBHOOK_PROXY_URL", "WEBHOOK_PROXY_URL")  # lanebot's name wins


def webhook_proxy_setting(values: Mapping[str, str]) -> tuple[str, str]:
    """(the setting's name, its value): LANEBOT_WEBHOOK_PROXY_URL, else Probot's WEBHOOK_PROXY_URL, else ("", "")."""
    for name in WEBHOOK_PROXY_SETTINGS:
        value = values.get(name, "").strip()
        if value:
            return name, value
    return "", ""


def _webhook_proxy(reader: _Reader) -> dict[str, str]:
    """The relay channel's URL: an http(s) URL with a host, or nothing."""
    name, value = webhook_proxy_setting(reader.values)
    if value and not re.fullmatch(r"https?://[^/?#\s]+(?:/[^#\s]*)?", value):
        reader.problem(name, f"{name} must be a channel URL such as https://smee.io/AbC123 (from https://smee.io/new)")
        return {"webhook_proxy_url": "", "webhook_proxy_setting": ""}
    return {"webhook_proxy_url": value, "webhook_proxy_setting": name}
