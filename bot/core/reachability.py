"""Whether GitHub can deliver webhooks to a URL, judged from the URL alone. Pure: no lookups.

GitHub.com (and GHE.com) delivers from the public internet, so a URL whose host is a loopback,
private, link-local or otherwise non-public address, `localhost`, a name under a local-only suffix
(`.local`, `.localhost`, `.internal`, `.lan`, `.home.arpa`) or a name without a dot never receives
a delivery. A GitHub Enterprise Server runs wherever its owner put it, often inside the same
network, so for it only this machine (loopback, the unspecified address, `localhost`) is taken as
unreachable. A public name can still point somewhere private; that is not knowable without a
lookup, so it is taken as reachable.
"""

from __future__ import annotations

import ipaddress
import urllib.parse

LOCAL_SUFFIXES = (".local", ".localhost", ".internal", ".lan", ".home.arpa")
GITHUB_COM_API_URL = "https://api.github.com"

# What to do instead, in steps: set up with a relay channel and serve through it.
RELAY_STEPS = (
    "Open https://smee.io/new in a browser: it sends you to a new channel, such as https://smee.io/AbC123; copy its URL.",
    "Add LANEBOT_WEBHOOK_PROXY_URL=<that URL> to .env (or set it in the environment).",
    "Run `lanebot setup` again: the App's webhook URL is then the channel (already registered: set the "
    "App's webhook URL to the channel on its settings page instead).",
    "Run `lanebot serve`: it reads the channel and takes each delivery as if GitHub had sent it.",
)


def delivers_from_the_internet(github_api_url: str) -> bool:
    """Whether the GitHub at `github_api_url` is GitHub.com or GHE.com, not an Enterprise Server."""
    host = (urllib.parse.urlsplit(github_api_url).hostname or "").rstrip(".").lower()
    return host == "api.github.com" or host.endswith(".ghe.com")


def unreachable_reason(url: str, github_api_url: str = GITHUB_COM_API_URL) -> str | None:
    """Why the GitHub at `github_api_url` cannot deliver to `url` ("the address 127.0.0.1 is
    loopback"), or None."""
    host = (urllib.parse.urlsplit(url).hostname or "").rstrip(".").lower()
    if not host:
        return "the URL has no host"
    address = _address(host)
    if address is not None:
        reason, this_machine = _address_reason(address)
    elif host == "localhost" or host.endswith(LOCAL_SUFFIXES):
        reason = f"the name {host} only means something on this network or this machine"
        this_machine = host == "localhost" or host.endswith(".localhost")
    elif "." not in host:
        reason, this_machine = f"the name {host} has no domain, so it resolves only on this network", False
    else:
        return None
    if reason is None or not (this_machine or delivers_from_the_internet(github_api_url)):
        return None
    return reason


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _address_reason(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[str | None, bool]:
    """Why nothing on the internet reaches `address` (or None), and whether it is this machine."""
    kinds = (
        ("loopback", address.is_loopback, True),
        ("link-local", address.is_link_local, False),
        ("unspecified", address.is_unspecified, True),
        ("private", address.is_private, False),
        ("not a public address", not address.is_global, False),
    )
    for kind, applies, this_machine in kinds:
        if applies:
            return f"the address {address} is {kind}", this_machine
    return None, False


def reachability_advice(url: str, github_api_url: str = GITHUB_COM_API_URL) -> list[str]:
    """Lines telling what to do when the GitHub at `github_api_url` cannot reach `url`; none when it can."""
    reason = unreachable_reason(url, github_api_url)
    if reason is None:
        return []
    steps = [f"  {number}. {step}" for number, step in enumerate(RELAY_STEPS, start=1)]
    return [
        f"GitHub cannot deliver webhooks to {url}: {reason}.",
        "Either give lanebot a public URL (`lanebot setup --public-url https://...`), or receive webhooks "
        "through a relay channel:",
        *steps,
    ]
