"""Talking to GitHub as the App: authentication, the REST client, and per-repository configuration."""

from bot.edges.github.auth import InstallationTokenError, InstallationTokens, app_jwt
from bot.edges.github.client import (
    AppClient,
    GitHubApp,
    InstallationClient,
    LanebotAPI,
    RetryPolicy,
    convert_manifest,
    find_comment_by_marker,
)

__all__ = [
    "AppClient",
    "GitHubApp",
    "InstallationClient",
    "InstallationTokenError",
    "InstallationTokens",
    "LanebotAPI",
    "RetryPolicy",
    "app_jwt",
    "convert_manifest",
    "find_comment_by_marker",
]
