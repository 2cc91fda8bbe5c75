"""The sandbox GitHub: a local stand-in for the part of GitHub lanebot touches.

REST routes with GitHub's paths, shapes and errors, git over smart HTTP, signed webhook
deliveries with GitHub's headers and payloads, the OAuth web flow by which a person signs in to the
App (`/login/oauth/authorize`, `/login/oauth/access_token`; then `GET /user`, `/user/installations`),
and a small human API (`/_sandbox/...`) to act as people do on github.com. Built from GitHub's documentation and real payloads, not from what
lanebot sends, so that it catches lanebot's wrong beliefs instead of sharing them.

    config = SandboxConfig(public_key_pem=..., webhook_url=..., webhook_secret=...)
    with SandboxServer(config) as server:      # or: lanebot sandbox serve
        ...  # GITHUB_API_URL=server.url
"""

from bot.sandbox.app import create_app, served_rest_routes
from bot.sandbox.core import DEFAULT_EVENTS, DEFAULT_PERMISSIONS, DEFAULT_PORT, Sandbox, SandboxConfig
from bot.sandbox.keys import generate_app_key
from bot.sandbox.server import SandboxServer

__all__ = [
    "DEFAULT_EVENTS",
    "DEFAULT_PERMISSIONS",
    "DEFAULT_PORT",
    "Sandbox",
    "SandboxConfig",
    "SandboxServer",
    "create_app",
    "generate_app_key",
    "served_rest_routes",
]
