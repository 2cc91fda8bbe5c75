"""GitHub's error answers: `{"message", "documentation_url", "status"}`, plus `errors` for 422s.

Messages are GitHub's own where GitHub's wording is known (from its documentation and from the
answers quoted in public bug reports), so a client matching on them behaves as it would on
github.com.
"""

from __future__ import annotations

from typing import Any

DOCS = "https://docs.github.com/rest"
REQUIRES_AUTHENTICATION = "Requires authentication"
BAD_CREDENTIALS = "Bad credentials"
NOT_ACCESSIBLE = "Resource not accessible by integration"
JWT_UNDECODABLE = "A JSON web token could not be decoded"


class GitHubError(Exception):
    """An answer GitHub would give instead of the resource: raised anywhere, rendered by the app."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        documentation_url: str = DOCS,
        errors: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.documentation_url = documentation_url
        self.errors = errors
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message}
        if self.errors is not None:
            body["errors"] = self.errors
        body["documentation_url"] = self.documentation_url
        body["status"] = str(self.status)
        return body


def not_found(documentation_url: str = DOCS) -> GitHubError:
    return GitHubError(404, "Not Found", documentation_url=documentation_url)


def validation_failed(documentation_url: str, *errors: dict[str, Any]) -> GitHubError:
    """422 Validation Failed with GitHub's `errors` list ({resource, code, field[, message]})."""
    return GitHubError(422, "Validation Failed", documentation_url=documentation_url, errors=list(errors))


def invalid_request(documentation_url: str, detail: str) -> GitHubError:
    """422 for a body that breaks the route's schema, worded as GitHub's schema validator words it."""
    return GitHubError(422, f"Invalid request.\n\n{detail}", documentation_url=documentation_url)


def missing_field(documentation_url: str, name: str) -> GitHubError:
    return invalid_request(documentation_url, f'"{name}" wasn\'t supplied.')


def too_long(documentation_url: str, limit: int, supplied: int) -> GitHubError:
    return invalid_request(documentation_url, f"Only {limit} characters are allowed; {supplied} were supplied.")


def unparsable_json(documentation_url: str) -> GitHubError:
    return GitHubError(400, "Problems parsing JSON", documentation_url=documentation_url)
