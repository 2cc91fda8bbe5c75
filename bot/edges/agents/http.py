"""The `http` adapter, for planning only: one request to an LLM API that answers with the plan as
structured output.

- `provider: anthropic`: `POST {url}` (default https://api.anthropic.com/v1/messages) (headers `x-api-key`, `anthropic-version`) with a
  `record_plan` tool whose `input_schema` is the unit graph and `tool_choice` forcing that tool; the
  plan is the `input` of the `tool_use` content block.
- `provider: openai` (any OpenAI-compatible server): `POST {url}` (default .../v1/chat/completions) with
  `response_format: {type: json_schema, json_schema: {name, strict: true, schema}}`; the plan is the
  JSON in `choices[0].message.content` (a `refusal` there fails the session).

The API key is read from the environment variable named by `api_key_env` (the request's `env`
first, then lanebot's own environment) and goes only into the request header. The final message is
the plan as JSONL, one unit per line, for the planner to validate. The transcript holds the request
(without the key or the prompt) and the response body. The adapter starts no process, so `on_start`
is never called, and it refuses sessions that are not read-only: it cannot change a tree.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from bot.edges.agents.base import (
    DETAIL_CHARS,
    AgentConfigError,
    AgentRequest,
    AgentResult,
    Usage,
    describe_seconds,
    is_count,
    read_settings,
    require_text,
    with_detail,
)
from bot.edges.agents.transcript import Transcript, utc_timestamp

PROVIDERS = ("anthropic", "openai")
# `url` is the whole endpoint, as the workflow file documents it.
DEFAULT_URLS = {
    "anthropic": "https://api.anthropic.com/v1/messages",
    "openai": "https://api.openai.com/v1/chat/completions",
}
DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
ANTHROPIC_VERSION = "2023-06-01"
PLAN_TOOL = "record_plan"
DEFAULTS: Mapping[str, Any] = {"provider": None, "url": None, "model": None, "api_key_env": None, "max_tokens": 8192}
SYSTEM_PROMPT = (
    "You split a software issue into a graph of units of work. Answer only with the unit graph, "
    "in the structure you were given; every field of every unit is required."
)
_UNIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "a slug: lowercase letters, digits and dashes, unique"},
        "title": {"type": "string"},
        "needs": {
            "type": "array",
            "items": {"type": "string"},
            "description": "ids of the units this one cannot be written without",
        },
        "files": {
            "type": "string",
            "description": "one extended regular expression matching every path the unit may change",
        },
        "check": {"type": "string", "description": "a shell command that proves this unit"},
        "brief": {"type": "string", "description": "what the unit's agent is told; it must stand alone"},
        "estimate": {"type": ["number", "null"], "description": "minutes of work, or null"},
    },
    "required": ["id", "title", "needs", "files", "check", "brief", "estimate"],
    "additionalProperties": False,
}
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"units": {"type": "array", "items": _UNIT_SCHEMA}},
    "required": ["units"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class HttpSettings:
    provider: str
    url: str
    model: str
    api_key_env: str
    max_tokens: int = 8192

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | object | None) -> HttpSettings:
        raw = read_settings(options, DEFAULTS, "agents.http")
        provider = raw["provider"]
        if provider not in PROVIDERS:
            raise AgentConfigError(f"agents.http.provider must be one of {', '.join(PROVIDERS)}, not {provider!r}")
        max_tokens = raw["max_tokens"]
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
            raise AgentConfigError(f"agents.http.max_tokens must be a positive whole number, not {max_tokens!r}")
        url = require_text(raw["url"] or DEFAULT_URLS[provider], "agents.http.url")
        return cls(
            provider=provider,
            url=url.rstrip("/"),
            model=require_text(raw["model"], "agents.http.model"),
            api_key_env=require_text(raw["api_key_env"] or DEFAULT_KEY_ENV[provider], "agents.http.api_key_env"),
            max_tokens=max_tokens,
        )

    @property
    def endpoint(self) -> str:
        return self.url


@dataclass(frozen=True)
class PlanAnswer:
    """What a response body held: the units, the usage, or why there is no plan."""

    units: list[dict[str, Any]]
    usage: Usage
    error: str | None = None


def request_body(settings: HttpSettings, prompt: str) -> dict[str, Any]:
    if settings.provider == "anthropic":
        return {
            "model": settings.model,
            "max_tokens": settings.max_tokens,
            "system": SYSTEM_PROMPT,
            "messages": [{"role": "user", "content": prompt}],
            "tools": [
                {"name": PLAN_TOOL, "description": "Record the unit graph for the issue.", "input_schema": PLAN_SCHEMA}
            ],
            "tool_choice": {"type": "tool", "name": PLAN_TOOL},
        }
    return {
        "model": settings.model,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "unit_graph", "strict": True, "schema": PLAN_SCHEMA},
        },
    }


def request_headers(settings: HttpSettings, api_key: str) -> dict[str, str]:
    if settings.provider == "anthropic":
        return {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"}
    return {"authorization": f"Bearer {api_key}", "content-type": "application/json"}


def read_anthropic_answer(body: Mapping[str, Any]) -> PlanAnswer:
    reported = body.get("usage")
    usage: Mapping[str, Any] = reported if isinstance(reported, Mapping) else {}
    input_parts = [usage.get(key) for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    counted = [part for part in input_parts if is_count(part)]
    answer_usage = Usage(
        input_tokens=sum(counted) if counted else None,
        output_tokens=usage.get("output_tokens") if is_count(usage.get("output_tokens")) else None,
    )
    if body.get("stop_reason") == "max_tokens":
        return PlanAnswer([], answer_usage, "the answer was cut off at max_tokens (raise agents.http.max_tokens)")
    blocks = body.get("content")
    content: list[Any] = blocks if isinstance(blocks, list) else []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "tool_use" and block.get("name") == PLAN_TOOL:
            return _units(block.get("input"), answer_usage)
    return PlanAnswer([], answer_usage, f"the model answered without calling {PLAN_TOOL}")


def read_openai_answer(body: Mapping[str, Any]) -> PlanAnswer:
    reported = body.get("usage")
    usage: Mapping[str, Any] = reported if isinstance(reported, Mapping) else {}
    answer_usage = Usage(
        input_tokens=usage.get("prompt_tokens") if is_count(usage.get("prompt_tokens")) else None,
        output_tokens=usage.get("completion_tokens") if is_count(usage.get("completion_tokens")) else None,
    )
    listed = body.get("choices")
    choices: list[Any] = listed if isinstance(listed, list) else []
    choice: Mapping[str, Any] = choices[0] if choices and isinstance(choices[0], Mapping) else {}
    said = choice.get("message")
    message: Mapping[str, Any] = said if isinstance(said, Mapping) else {}
    if isinstance(message.get("refusal"), str) and message["refusal"].strip():
        return PlanAnswer([], answer_usage, with_detail("the model refused", message["refusal"]))
    if choice.get("finish_reason") == "length":
        return PlanAnswer([], answer_usage, "the answer was cut off at the token limit")
    content = message.get("content")
    if not isinstance(content, str):
        return PlanAnswer([], answer_usage, "the response has no message content")
    try:
        parsed = json.loads(content)
    except ValueError as error:
        return PlanAnswer([], answer_usage, f"the message content is not JSON: {error}")
    return _units(parsed, answer_usage)


def plan_as_jsonl(units: list[dict[str, Any]]) -> str:
    """One unit per line; a null estimate is left out (units carry one only when known)."""
    return "\n".join(
        json.dumps(
            {key: value for key, value in unit.items() if not (key == "estimate" and value is None)}, ensure_ascii=False
        )
        for unit in units
    )


def _units(answer: Any, usage: Usage) -> PlanAnswer:
    units = answer.get("units") if isinstance(answer, Mapping) else None
    if not isinstance(units, list):
        return PlanAnswer([], usage, "the answer has no `units` list")
    strays = [index for index, unit in enumerate(units, 1) if not isinstance(unit, dict)]
    if strays:
        return PlanAnswer([], usage, f"unit {strays[0]} of the answer is not an object")
    return PlanAnswer(units, usage)


def _api_error(body: Any) -> str:
    error = body.get("error") if isinstance(body, Mapping) else None
    message = error.get("message") if isinstance(error, Mapping) else None
    return message if isinstance(message, str) else ""


class HttpAgent:
    """Plans through an LLM API, no CLI. Read-only sessions only."""

    name = "http"

    def __init__(self, settings: HttpSettings) -> None:
        self.settings = settings

    async def run(self, request: AgentRequest, *, on_start: Callable[[int], None] | None = None) -> AgentResult:
        settings = self.settings
        with Transcript(request.transcript) as transcript:
            transcript.annotate(
                "start",
                agent=self.name,
                provider=settings.provider,
                url=settings.endpoint,
                model=settings.model,
                prompt_chars=len(request.prompt),
                at=utc_timestamp(),
            )
            if not request.read_only:
                return self._finish(
                    transcript,
                    request,
                    Usage(),
                    error=("the http agent only plans: it cannot change files, so it runs read-only sessions only"),
                )
            api_key = request.env.get(settings.api_key_env) or os.environ.get(settings.api_key_env)
            if not api_key:
                message = (
                    f"the http agent needs an API key in the environment variable {settings.api_key_env} "
                    "(or set agents.http.api_key_env to the variable that holds it)"
                )
                transcript.annotate("not_configured", message=message)
                raise AgentConfigError(message)
            try:
                response = await asyncio.wait_for(self._post(request, api_key), request.timeout)
            except (TimeoutError, httpx.TimeoutException):
                transcript.annotate("timeout", after_s=request.timeout)
                return self._finish(
                    transcript,
                    request,
                    Usage(),
                    timed_out=True,
                    error=(f"the http agent timed out after {describe_seconds(request.timeout)}"),
                )
            except httpx.HTTPError as failure:
                detail = f"{type(failure).__name__}: {failure}".replace(api_key, "***")
                return self._finish(
                    transcript, request, Usage(), error=f"the http agent could not reach {settings.endpoint}: {detail}"
                )
            return self._answer(transcript, request, response)

    async def _post(self, request: AgentRequest, api_key: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=request.timeout) as client:
            return await client.post(
                self.settings.endpoint,
                headers=request_headers(self.settings, api_key),
                json=request_body(self.settings, request.prompt),
            )

    def _answer(self, transcript: Transcript, request: AgentRequest, response: httpx.Response) -> AgentResult:
        transcript.annotate("http_response", status=response.status_code)
        try:
            body = response.json()
        except ValueError:
            body = None
            transcript.annotate("stdout", text=response.text[: DETAIL_CHARS * 8])
        if isinstance(body, dict):
            transcript.agent_object(body)
        if not response.is_success:
            return self._finish(
                transcript,
                request,
                Usage(),
                error=with_detail(f"{self.settings.provider} answered HTTP {response.status_code}", _api_error(body)),
            )
        if not isinstance(body, dict):
            return self._finish(
                transcript,
                request,
                Usage(),
                error=f"{self.settings.provider} answered with a body that is not a JSON object",
            )
        read = read_anthropic_answer if self.settings.provider == "anthropic" else read_openai_answer
        answer = read(body)
        if answer.error is not None:
            return self._finish(transcript, request, answer.usage, error=answer.error)
        return self._finish(transcript, request, answer.usage, final=plan_as_jsonl(answer.units))

    @staticmethod
    def _finish(
        transcript: Transcript,
        request: AgentRequest,
        usage: Usage,
        *,
        final: str = "",
        error: str | None = None,
        timed_out: bool = False,
    ) -> AgentResult:
        result = AgentResult(
            exit_status=None,
            final_message=final,
            usage=usage,
            transcript=request.transcript,
            timed_out=timed_out,
            error=error,
        )
        transcript.annotate(
            "outcome",
            ok=result.ok,
            error=error,
            final_message_chars=len(final),
            usage={"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
        )
        return result
