"""Settings: read from the environment and .env, every problem named at once, secrets never shown."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from bot.edges.settings import Settings, SettingsError, parse_env_text


@pytest.fixture(scope="module")
def pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.fixture
def app_env(pem: str) -> dict[str, str]:
    return {"APP_ID": "12345", "PRIVATE_KEY": pem, "WEBHOOK_SECRET": "s3cret-webhook-value"}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def load(environ: dict[str, str], env_file: str | None = None) -> Settings:
    return Settings.load(environ=environ, env_file=env_file)


def error_of(environ: dict[str, str], env_file: str | None = None) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        load(environ, env_file)
    return caught.value


def test_the_three_app_settings_are_enough_and_the_rest_have_defaults(app_env, in_tmp):
    settings = load(app_env)
    assert settings.app_id == "12345"
    assert settings.webhook_secret == "s3cret-webhook-value"
    assert settings.webhook_path == "/api/github/webhooks"
    assert (settings.host, settings.port, settings.log_level) == ("127.0.0.1", 3000, "info")
    assert settings.database_url == f"sqlite:///{in_tmp}/lanebot.db"
    assert settings.github_api_url == "https://api.github.com"
    assert settings.workdir == in_tmp / ".lanebot-work"
    assert (settings.max_lanes, settings.max_runs_per_repo, settings.recover_deliveries) == (8, 2, True)
    assert settings.unjailed is False  # commands run in a jail unless the operator opts out


def test_every_setting_is_read_from_the_environment(app_env, tmp_path):
    settings = load(
        {
            **app_env,
            "WEBHOOK_PATH": "/hooks",
            "HOST": "0.0.0.0",
            "PORT": "8080",
            "LOG_LEVEL": "DEBUG",
            "DATABASE_URL": "postgresql://127.0.0.1:5432/test",
            "GITHUB_API_URL": "https://ghe.example.com/api/v3/",
            "LANEBOT_WORKDIR": str(tmp_path / "work"),
            "LANEBOT_MAX_LANES": "3",
            "LANEBOT_MAX_RUNS_PER_REPO": "1",
            "LANEBOT_RECOVER_DELIVERIES": "0",
            "LANEBOT_UNJAILED": "1",
            "LANEBOT_JAIL_READ_ONLY": "/opt/tools:/srv/cache",
        }
    )
    assert settings.webhook_path == "/hooks"
    assert (settings.host, settings.port, settings.log_level) == ("0.0.0.0", 8080, "debug")
    assert settings.database_url == "postgresql://127.0.0.1:5432/test"
    assert settings.github_api_url == "https://ghe.example.com/api/v3"
    assert settings.workdir == tmp_path / "work"
    assert (settings.max_lanes, settings.max_runs_per_repo, settings.recover_deliveries) == (3, 1, False)
    assert settings.unjailed is True
    assert settings.jail_read_only == (Path("/opt/tools"), Path("/srv/cache"))


def test_a_relative_workdir_is_anchored_to_the_folder_lanebot_started_in(app_env, in_tmp):
    assert load({**app_env, "LANEBOT_WORKDIR": "runs"}).workdir == in_tmp / "runs"


def test_one_message_names_every_missing_app_setting_and_says_what_to_do():
    error = error_of({})
    assert set(error.names) == {"APP_ID", "PRIVATE_KEY", "WEBHOOK_SECRET"}
    message = str(error)
    for name in ("APP_ID", "PRIVATE_KEY", "PRIVATE_KEY_PATH", "WEBHOOK_SECRET"):
        assert name in message
    assert "/setup" in message and ".env" in message


def test_invalid_values_are_reported_together_with_missing_ones(pem):
    error = error_of(
        {
            "PRIVATE_KEY": pem,
            "PORT": "eighty",
            "LOG_LEVEL": "loud",
            "LANEBOT_MAX_LANES": "0",
            "LANEBOT_MAX_RUNS_PER_REPO": "-1",
            "LANEBOT_RECOVER_DELIVERIES": "maybe",
            "LANEBOT_UNJAILED": "perhaps",
            "LANEBOT_JAIL_READ_ONLY": "/opt/tools:tools",
            "WEBHOOK_PATH": "hooks",
            "GITHUB_API_URL": "api.github.com",
        }
    )
    assert set(error.names) == {
        "APP_ID",
        "WEBHOOK_SECRET",
        "PORT",
        "LOG_LEVEL",
        "LANEBOT_MAX_LANES",
        "LANEBOT_MAX_RUNS_PER_REPO",
        "LANEBOT_RECOVER_DELIVERIES",
        "LANEBOT_UNJAILED",
        "LANEBOT_JAIL_READ_ONLY",
        "WEBHOOK_PATH",
        "GITHUB_API_URL",
    }
    assert "'eighty'" in str(error)


def test_an_app_id_that_is_neither_a_number_nor_a_client_id_is_refused(app_env):
    assert error_of({**app_env, "APP_ID": "my app"}).names == ("APP_ID",)
    assert load({**app_env, "APP_ID": "Iv23liABCdef"}).app_id == "Iv23liABCdef"


def test_a_private_key_with_literal_backslash_n_escapes_is_accepted(app_env, pem):
    one_line = pem.strip().replace("\n", "\\n")
    assert "\n" not in one_line
    settings = load({**app_env, "PRIVATE_KEY": one_line})
    assert settings.private_key.strip() == pem.strip()


def test_a_base64_encoded_private_key_is_accepted(app_env, pem):
    encoded = base64.b64encode(pem.encode()).decode()
    assert load({**app_env, "PRIVATE_KEY": encoded}).private_key.strip() == pem.strip()


def test_the_private_key_can_come_from_a_file(app_env, pem, tmp_path):
    key_file = tmp_path / "app.pem"
    key_file.write_text(pem)
    environ = {k: v for k, v in app_env.items() if k != "PRIVATE_KEY"} | {"PRIVATE_KEY_PATH": str(key_file)}
    assert load(environ).private_key.strip() == pem.strip()


def test_the_private_key_files_path_is_kept_absolute_so_the_jail_can_hide_it(app_env, pem, tmp_path, monkeypatch):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "app.pem").write_text(pem)
    monkeypatch.chdir(tmp_path)
    environ = {k: v for k, v in app_env.items() if k != "PRIVATE_KEY"} | {"PRIVATE_KEY_PATH": "keys/app.pem"}
    assert load(environ).private_key_path == tmp_path / "keys" / "app.pem"
    assert load(app_env).private_key_path is None  # the key given inline: no file to hide


def test_an_unreadable_private_key_file_is_named(app_env, tmp_path):
    environ = {k: v for k, v in app_env.items() if k != "PRIVATE_KEY"}
    error = error_of(environ | {"PRIVATE_KEY_PATH": str(tmp_path / "missing.pem")})
    assert error.names == ("PRIVATE_KEY_PATH",)
    assert "missing.pem" in str(error)


def test_an_unparsable_private_key_is_named_without_echoing_it(app_env):
    garbage = "-----BEGIN RSA PRIVATE KEY-----\nTOPSECRETbutbroken\n-----END RSA PRIVATE KEY-----"
    error = error_of({**app_env, "PRIVATE_KEY": garbage})
    assert error.names == ("PRIVATE_KEY",)
    assert "TOPSECRETbutbroken" not in str(error)
    assert "private key" in str(error)


def test_a_key_that_is_not_rsa_is_refused(app_env):
    ec_pem = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    error = error_of({**app_env, "PRIVATE_KEY": ec_pem})
    assert error.names == ("PRIVATE_KEY",) and "RSA" in str(error)


def test_a_bad_database_url_is_named_without_echoing_a_password(app_env):
    error = error_of({**app_env, "DATABASE_URL": "user:hunter2@localhost/db"})
    assert error.names == ("DATABASE_URL",)
    assert "hunter2" not in str(error)


def test_settings_come_from_the_env_file_when_the_environment_lacks_them(pem, tmp_path):
    env_file = tmp_path / ".env"
    quoted_pem = pem.strip()
    env_file.write_text(
        "# written by lanebot's set-up page\n"
        "APP_ID=777\n"
        f'PRIVATE_KEY="{quoted_pem}"\n'
        "export WEBHOOK_SECRET='single quoted'\n"
        "PORT=4000 # a comment\n"
    )
    settings = load({}, str(env_file))
    assert settings.app_id == "777"
    assert settings.private_key.strip() == pem.strip()
    assert settings.webhook_secret == "single quoted"
    assert settings.port == 4000


def test_the_environment_wins_over_the_env_file(app_env, tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("APP_ID=1\nPORT=4000\n")
    settings = load({**app_env, "PORT": "5000"}, str(env_file))
    assert (settings.app_id, settings.port) == ("12345", 5000)


def test_an_empty_environment_variable_does_not_hide_the_env_file_value(app_env, tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("PORT=4000\n")
    assert load({**app_env, "PORT": ""}, str(env_file)).port == 4000


def test_a_missing_env_file_is_fine(app_env, tmp_path):
    assert load(app_env, str(tmp_path / "absent.env")).app_id == "12345"


def test_the_default_env_file_is_dot_env_in_the_current_folder(app_env, in_tmp):
    (in_tmp / ".env").write_text("LANEBOT_MAX_LANES=5\n")
    assert Settings.load(environ=app_env).max_lanes == 5


def test_a_malformed_env_file_line_is_reported_with_its_number(app_env, tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("PORT=4000\nthis is not a setting\n")
    error = error_of(app_env, str(env_file))
    assert "line 2" in str(error) and str(env_file) in str(error)


def test_repr_shows_neither_the_key_nor_the_secret(app_env, pem):
    settings = load(app_env)
    shown = repr(settings) + str(settings)
    assert "s3cret-webhook-value" not in shown
    assert "PRIVATE KEY" not in shown and pem.splitlines()[1] not in shown
    assert "12345" in shown


def test_settings_cannot_be_changed_after_loading(app_env):
    settings = load(app_env)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("A=1\n\n# comment\nB = two words \n", {"A": "1", "B": "two words"}),
        ('A="x # not a comment"', {"A": "x # not a comment"}),
        ("A=x # a comment", {"A": "x"}),
        ("A='literal \\n'", {"A": "literal \\n"}),
        ('A="line\\nbreak \\"quoted\\""', {"A": 'line\nbreak "quoted"'}),
        ('A="first\nsecond"\nB=3', {"A": "first\nsecond", "B": "3"}),
        ("export A=1", {"A": "1"}),
    ],
)
def test_env_text_parses_like_dotenv(text, expected):
    assert parse_env_text(text) == (expected, [])


def test_an_unclosed_quote_in_env_text_is_a_problem_not_a_swallowed_file():
    values, problems = parse_env_text('A="never closed\nB=2\n')
    assert values == {}
    assert problems == ["line 1: the quoted value of A is never closed"]


def test_the_limits_of_work_and_intake_have_defaults_and_are_read_from_the_environment(app_env):
    defaults = load(app_env)
    assert (defaults.max_rate_limit_wait, defaults.dispatch_workers) == (300.0, 8)
    assert (defaults.intake_max_bodies, defaults.intake_max_buffered_bytes) == (16, 64 * 1024 * 1024)
    assert defaults.intake_store_timeout == 8.0  # under GitHub's 10 s
    settings = load(
        {
            **app_env,
            "LANEBOT_MAX_RATE_LIMIT_WAIT": "90",
            "LANEBOT_DISPATCH_WORKERS": "3",
            "LANEBOT_INTAKE_MAX_BODIES": "4",
            "LANEBOT_INTAKE_MAX_BUFFERED_MB": "32",
            "LANEBOT_INTAKE_STORE_TIMEOUT": "2.5",
            "LANEBOT_REPLAY_WINDOW": "0",
        }
    )
    assert (defaults.replay_window, settings.replay_window) == (86400.0, 0.0)
    assert (settings.max_rate_limit_wait, settings.dispatch_workers) == (90.0, 3)
    assert (settings.intake_max_bodies, settings.intake_max_buffered_bytes) == (4, 32 * 1024 * 1024)
    assert settings.intake_store_timeout == 2.5


def test_a_store_timeout_github_would_not_wait_for_is_refused(app_env):
    with pytest.raises(SettingsError) as error:
        load({**app_env, "LANEBOT_INTAKE_STORE_TIMEOUT": "12", "LANEBOT_MAX_RATE_LIMIT_WAIT": "soon"})
    assert "LANEBOT_INTAKE_STORE_TIMEOUT must be a number of seconds above 0 and at most 9.5, not '12'" in str(
        error.value
    )
    assert "LANEBOT_MAX_RATE_LIMIT_WAIT must be a number of seconds above 0, not 'soon'" in str(error.value)
