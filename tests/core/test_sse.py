"""The event-stream parser and the relay message reader (bot/core/sse.py), as specifications."""

from __future__ import annotations

import base64
import json

import pytest

from bot.core.sse import RelayError, SSEEvent, SSEParser, reconnect_delay, relayed_delivery


def parse_in_chunks(stream: bytes, size: int) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for start in range(0, len(stream), size):
        events.extend(parser.feed(stream[start : start + size]))
    return events


def test_the_standard_example_gives_its_events_whatever_the_chunks() -> None:
    stream = (
        "\ufeff: a comment\r\n"
        "data: first\r\n"
        "data:second line\r\n"
        "id: 7\r\n\r\n"
        "event: ping\rdata: {}\r\r"
        "data: é and ☃\n\n"
    ).encode()
    expected = [
        SSEEvent("message", "first\nsecond line", "7"),
        SSEEvent("ping", "{}", "7"),
        SSEEvent("message", "é and ☃", "7"),
    ]
    for size in (1, 2, 3, 5, len(stream)):
        assert parse_in_chunks(stream, size) == expected, f"chunks of {size} bytes"


def test_an_event_without_data_dispatches_nothing_but_its_id_counts() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 3\n\nevent: ready\n\n") == []
    assert parser.last_event_id == "3"
    assert parser.feed(b"data: x\n\n") == [SSEEvent("message", "x", "3")]


def test_retry_is_read_only_when_it_is_digits_and_an_id_with_nul_is_ignored() -> None:
    parser = SSEParser()
    parser.feed(b"retry: soon\nid: a\0b\n\nretry: 2500\n\n")
    assert parser.retry_ms == 2500
    assert parser.last_event_id == ""


def test_an_event_past_the_cap_comes_out_marked_oversized_with_its_id_and_no_data() -> None:
    parser = SSEParser(max_event_bytes=10)
    events = parser.feed(b"id: 1\ndata: 0123456789abcdef\n\ndata: ok\n\n")
    assert events == [SSEEvent("message", "", "1", oversized=True), SSEEvent("message", "ok", "1")]


def test_a_line_that_never_ends_is_not_kept_past_the_cap() -> None:
    parser = SSEParser(max_event_bytes=10)
    assert parser.feed(b"data: " + b"x" * 100) == []
    assert parser.feed(b"\n\n") == [SSEEvent("message", "", "", oversized=True)]


SMEE_MESSAGE = (
    '{"host":"smee.io","x-github-event":"issues","x-github-delivery":"d-1",'
    '"x-hub-signature-256":"sha256=ab","content-type":"application/json",'
    '"body":{"action":"labeled","n":1.5e+3,"text":"caf\\u00e9 <b>"},'
    '"query":{},"timestamp":1700000000000}'
)


def test_a_smee_message_gives_its_headers_and_the_body_exactly_as_the_channel_wrote_it() -> None:
    delivery = relayed_delivery(SMEE_MESSAGE)
    assert delivery.body == b'{"action":"labeled","n":1.5e+3,"text":"caf\\u00e9 <b>"}'
    assert delivery.raw is False
    assert delivery.headers == {
        "x-github-event": "issues",
        "x-github-delivery": "d-1",
        "x-hub-signature-256": "sha256=ab",
        "content-type": "application/json",
    }
    assert (delivery.event, delivery.delivery_id) == ("issues", "d-1")


def test_a_channel_that_relays_the_raw_bytes_gives_those() -> None:
    raw = b'{ "action": "opened" }\n'
    message = json.dumps(
        {"x-github-event": "issues", "body": {"action": "opened"}, "bodyB": base64.b64encode(raw).decode()}
    )
    delivery = relayed_delivery(message)
    assert (delivery.body, delivery.raw) == (raw, True)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ("[]", "not a JSON object"),
        ('{"x-github-event":"issues"}', "no body"),
        ('{"body":{}', "not valid JSON"),
        ('{"body":{}} trailing', "text after the object"),
        ('{"body":{},"bodyB":"***"}', "not valid base64"),
        ('{"body" {}}', "no ':'"),
    ],
)
def test_a_message_that_carries_no_delivery_is_refused_saying_why(data: str, why: str) -> None:
    with pytest.raises(RelayError, match=why):
        relayed_delivery(data)


def test_headers_that_could_not_be_sent_or_belong_to_the_relay_hop_are_dropped() -> None:
    message = json.dumps(
        {
            "x-github-event": "issues",
            "x-evil": "a\r\nx-github-event: push",
            "bad name": "x",
            "x-number": 5,
            "content-length": "999",
            "host": "smee.io",
            "body": {},
        }
    )
    assert relayed_delivery(message).headers == {"x-github-event": "issues"}


def test_reconnecting_waits_longer_after_each_failure_up_to_a_ceiling() -> None:
    assert [reconnect_delay(n) for n in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert reconnect_delay(0, retry_ms=250) == 0.25
    assert reconnect_delay(1000) == 30.0


def test_the_id_of_an_event_cut_off_before_its_end_does_not_count() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 1\ndata: a\n\nid: 2\ndata: b") == [SSEEvent("message", "a", "1")]
    assert parser.last_event_id == "1"  # a reader that reconnects now is sent event 2 again
