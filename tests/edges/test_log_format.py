"""LOG_FORMAT=json: one JSON object per line, carrying the run, unit and delivery ids the work set."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest
from gidgethub import routing

from bot.cli.serve import configure_logging, uvicorn_logging
from bot.edges.logcontext import JsonFormatter, bind_log_context, json_handler, log_context, log_ids
from bot.edges.settings import Settings, SettingsError
from bot.edges.store import deliveries
from bot.web.dispatcher import Dispatcher, HandlerContext
from tests.app_helpers import make_settings, private_key_pem


@pytest.fixture
def lines():
    """A logger writing JSON lines to a buffer; the lines read back, parsed."""
    stream = io.StringIO()
    logger = logging.getLogger("tests.json")
    handler = json_handler(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)


def test_a_line_is_one_json_object_with_time_level_logger_and_message(lines):
    logger, read = lines
    logger.info("lane %s took %d s", "api", 12)
    [line] = read()
    assert set(line) == {"time", "level", "logger", "message"}
    assert (line["level"], line["logger"], line["message"]) == ("INFO", "tests.json", "lane api took 12 s")
    assert line["time"].endswith("+00:00")


def test_the_ids_set_in_context_are_on_every_line_and_only_there(lines):
    logger, read = lines
    with log_context(delivery_id="d-1"):
        logger.info("handling")
        with log_context(run_id=7, unit="api"):
            logger.warning("lane\nwith a newline")
        logger.info("handled")
    logger.info("outside")
    first, inner, after, outside = read()
    assert first["delivery_id"] == "d-1" and "run_id" not in first
    assert (inner["delivery_id"], inner["run_id"], inner["unit"]) == ("d-1", 7, "api")
    assert inner["message"] == "lane\nwith a newline"
    assert "run_id" not in after and after["delivery_id"] == "d-1"
    assert not {"run_id", "unit", "delivery_id"} & set(outside)


def test_a_task_binds_its_ids_for_itself_and_its_threads(lines):
    logger, read = lines

    async def job(unit: str) -> None:
        bind_log_context(run_id=3, unit=unit)
        await asyncio.sleep(0)
        await asyncio.to_thread(logger.info, "in a thread")

    async def main() -> None:
        await asyncio.gather(asyncio.create_task(job("a")), asyncio.create_task(job("b")))
        logger.info("after")

    asyncio.run(main())
    a, b, after = sorted(read(), key=lambda line: line.get("unit", "z"))
    assert (a["run_id"], a["unit"], b["unit"]) == (3, "a", "b")
    assert "run_id" not in after
    assert log_ids() == {}


def test_an_exception_is_a_field_of_its_line(lines):
    logger, read = lines
    try:
        raise ValueError("no such lane")
    except ValueError:
        logger.exception("failed")
    [line] = read()
    assert line["message"] == "failed"
    assert "ValueError: no such lane" in line["exception"]


def test_unknown_ids_are_refused():
    with pytest.raises(TypeError, match="log ids are run_id, unit, delivery_id"):
        bind_log_context(token="x")


@pytest.mark.anyio
async def test_the_dispatcher_logs_a_delivery_with_its_id(engine):
    router = routing.Router()

    @router.register("issues")
    async def handler(event, context):
        logging.getLogger("tests.handler").info("handled %s", event.event)

    deliveries.record(
        engine,
        delivery_id="delivery-77",
        event="issues",
        action="opened",
        installation_id=4242,
        repository="octo/one",
        body=b'{"action": "opened"}',
    )
    handler_seen = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            handler_seen.append(json.loads(JsonFormatter().format(record)))

    keep = Keep()
    logger = logging.getLogger("tests.handler")
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    try:
        context = HandlerContext(engine=engine, github=None, settings=make_settings(str(engine.url)))  # type: ignore[arg-type]
        await Dispatcher(engine, router, context).process_pending()
    finally:
        logger.removeHandler(keep)
    assert [(line["message"], line["delivery_id"]) for line in handler_seen] == [("handled issues", "delivery-77")]


def test_log_format_is_text_by_default_and_json_on_request():
    base = {"APP_ID": "1", "PRIVATE_KEY": private_key_pem(), "WEBHOOK_SECRET": "s"}
    assert Settings.load(environ=base, env_file=None).log_format == "text"
    assert Settings.load(environ={**base, "LOG_FORMAT": "JSON"}, env_file=None).log_format == "json"


def test_log_format_bogus_is_refused_with_what_it_may_be():
    base = {"APP_ID": "1", "PRIVATE_KEY": private_key_pem(), "WEBHOOK_SECRET": "s"}
    with pytest.raises(SettingsError) as refused:
        Settings.load(environ={**base, "LOG_FORMAT": "bogus"}, env_file=None)
    assert refused.value.names == ("LOG_FORMAT",)
    assert "LOG_FORMAT must be text or json, not 'bogus'" in str(refused.value)


def test_configure_logging_json_puts_json_lines_on_the_root_logger(monkeypatch):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    configure_logging("info", "json")
    [handler] = root.handlers
    assert isinstance(handler.formatter, JsonFormatter)
    assert uvicorn_logging("json") == {"log_config": None} and uvicorn_logging("text") == {}
