"""Whether GitHub can deliver webhooks to a URL (bot/core/reachability.py), judged from the URL alone."""

from __future__ import annotations

import pytest

from bot.core.reachability import RELAY_STEPS, delivers_from_the_internet, reachability_advice, unreachable_reason

WEBHOOK_PATH = "/api/github/webhooks"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:3000", "the address 127.0.0.1 is loopback"),
        ("http://127.8.9.10:3000", "the address 127.8.9.10 is loopback"),
        ("http://[::1]:3000", "the address ::1 is loopback"),
        ("http://[::ffff:127.0.0.1]:3000", "the address 127.0.0.1 is loopback"),
        ("http://0.0.0.0:3000", "the address 0.0.0.0 is unspecified"),
        ("http://[::]:3000", "the address :: is unspecified"),
    ],
)
def test_this_machine_is_never_reachable(url: str, reason: str) -> None:
    assert unreachable_reason(url + WEBHOOK_PATH) == reason


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("10.1.2.3", "the address 10.1.2.3 is private"),
        ("172.16.0.1", "the address 172.16.0.1 is private"),
        ("172.31.255.254", "the address 172.31.255.254 is private"),
        ("192.168.1.5", "the address 192.168.1.5 is private"),
        ("[fd12:3456::1]", "the address fd12:3456::1 is private"),
        ("[::ffff:192.168.1.5]", "the address 192.168.1.5 is private"),
    ],
)
def test_private_ranges_are_not_reachable(host: str, reason: str) -> None:
    assert unreachable_reason(f"http://{host}:3000{WEBHOOK_PATH}") == reason


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("169.254.10.20", "the address 169.254.10.20 is link-local"),
        ("[fe80::1]", "the address fe80::1 is link-local"),
        ("[fe80::1%25eth0]", "the address fe80::1 is link-local"),  # with a zone, as a URL writes it
    ],
)
def test_link_local_addresses_are_not_reachable(host: str, reason: str) -> None:
    assert unreachable_reason(f"http://{host}:3000{WEBHOOK_PATH}") == reason


def test_an_address_that_is_neither_private_nor_public_is_not_reachable() -> None:
    # 100.64.0.0/10 is carrier-grade NAT: not private in Python's table, not routed on the internet.
    assert unreachable_reason("http://100.64.0.1:3000/") == "the address 100.64.0.1 is not a public address"


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST", "localhost.", "app.localhost"])
def test_localhost_by_any_spelling_is_this_machine(host: str) -> None:
    reason = unreachable_reason(f"http://{host}:3000{WEBHOOK_PATH}")
    assert reason == f"the name {host.lower().rstrip('.')} only means something on this network or this machine"


@pytest.mark.parametrize("host", ["laptop.local", "ci.internal", "nas.lan", "printer.home.arpa"])
def test_names_under_local_only_suffixes_are_not_reachable(host: str) -> None:
    assert unreachable_reason(f"http://{host}:3000/") == (
        f"the name {host} only means something on this network or this machine"
    )


def test_a_name_without_a_domain_resolves_only_on_this_network() -> None:
    assert (
        unreachable_reason("http://buildbox:3000/")
        == "the name buildbox has no domain, so it resolves only on this network"
    )


def test_a_url_without_a_host_says_so() -> None:
    assert unreachable_reason("http:///api/github/webhooks") == "the URL has no host"
    assert unreachable_reason("not a url") == "the URL has no host"


@pytest.mark.parametrize(
    "url",
    [
        "https://lanebot.example.com/api/github/webhooks",
        "https://smee.io/AbC123",
        "http://8.8.8.8:3000/",
        "https://[2606:4700:4700::1111]/hooks",
        "https://Lanebot.Example.COM./hooks",
        # A public name can still point at a private address: only a lookup would tell, so it is
        # taken as reachable rather than warned about.
        "https://localhost.example.com/",
    ],
)
def test_public_hosts_are_taken_as_reachable(url: str) -> None:
    assert unreachable_reason(url) is None
    assert reachability_advice(url) == []


def test_github_com_and_ghe_com_deliver_from_the_internet_an_enterprise_server_from_its_own_network() -> None:
    assert delivers_from_the_internet("https://api.github.com")
    assert delivers_from_the_internet("https://api.acme.ghe.com")
    assert not delivers_from_the_internet("https://ghe.corp.example/api/v3")
    assert not delivers_from_the_internet("http://127.0.0.1:8765")


@pytest.mark.parametrize(
    "url", ["http://10.1.2.3:3000/", "http://169.254.10.20/", "http://buildbox:3000/", "http://ci.internal/"]
)
def test_an_enterprise_server_may_reach_private_networks(url: str) -> None:
    ghes = "https://ghe.corp.example/api/v3"
    assert unreachable_reason(url) is not None
    assert unreachable_reason(url, ghes) is None
    assert reachability_advice(url, ghes) == []


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:3000/", "http://[::1]/", "http://localhost:3000/", "http://0.0.0.0/"]
)
def test_no_server_elsewhere_reaches_this_machine(url: str) -> None:
    assert unreachable_reason(url, "https://ghe.corp.example/api/v3") == unreachable_reason(url)
    assert unreachable_reason(url) is not None


def test_the_advice_names_the_url_the_reason_and_both_ways_out() -> None:
    url = f"http://127.0.0.1:3000{WEBHOOK_PATH}"
    advice = reachability_advice(url)
    assert advice[0] == f"GitHub cannot deliver webhooks to {url}: the address 127.0.0.1 is loopback."
    assert "lanebot setup --public-url https://" in advice[1]
    assert advice[2:] == [f"  {number}. {step}" for number, step in enumerate(RELAY_STEPS, start=1)]


def test_the_relay_steps_say_where_to_get_a_channel_what_to_set_and_what_to_run() -> None:
    steps = " ".join(RELAY_STEPS)
    assert "https://smee.io/new" in RELAY_STEPS[0]
    assert "LANEBOT_WEBHOOK_PROXY_URL=" in RELAY_STEPS[1]
    assert "`lanebot setup`" in RELAY_STEPS[2]
    assert "App's webhook URL to the channel" in RELAY_STEPS[2]  # for an App registered already
    assert "`lanebot serve`" in RELAY_STEPS[3]
    assert steps.index("smee.io/new") < steps.index("LANEBOT_WEBHOOK_PROXY_URL") < steps.index("lanebot serve")
