"""`lanebot sandbox ...`: run the sandbox GitHub, and act in it as people do on github.com.

`serve` runs one in the foreground. The other commands talk to a running one (at
--sandbox-url, else $LANEBOT_SANDBOX_URL, else http://127.0.0.1:3100) and print its answer as
JSON. Secrets never go on the command line: the webhook secret comes from --webhook-secret-file
or $WEBHOOK_SECRET.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from bot.cli import UsageError

ROLES = ("admin", "maintain", "write", "triage", "read")
SECRET_ENVIRONMENT = "WEBHOOK_SECRET"
URL_ENVIRONMENT = "LANEBOT_SANDBOX_URL"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sandbox = subparsers.add_parser("sandbox", help="a local stand-in for GitHub: serve it, act in it as people")
    commands = sandbox.add_subparsers(dest="sandbox_command", metavar="COMMAND", required=True)
    _register_serve(commands)

    repo = commands.add_parser("repo", help="repositories").add_subparsers(
        dest="repo_command", metavar="ACTION", required=True
    )
    create = _client_parser(repo, "create", "create a repository from a folder (one initial commit on main)")
    create.add_argument("full_name", metavar="OWNER/NAME")
    create.add_argument(
        "--from",
        dest="folder",
        type=Path,
        required=True,
        metavar="DIR",
        help="the folder whose files the repository holds (its .gitignore is honoured)",
    )
    create.add_argument("--public", action="store_true", help="make it public (default: private)")
    create.add_argument("--org", action="store_true", help="the owner is an organization (default: a user)")
    create.add_argument("--default-branch", default="main", metavar="BRANCH")
    create.set_defaults(func=_run_repo_create)

    issue = commands.add_parser("issue", help="issues").add_subparsers(
        dest="issue_command", metavar="ACTION", required=True
    )
    open_parser = _client_parser(issue, "open", "open an issue as a person")
    open_parser.add_argument("full_name", metavar="OWNER/NAME")
    _person_arguments(open_parser)
    open_parser.add_argument("--title", required=True)
    _body_arguments(open_parser, required=False)
    open_parser.add_argument("--label", action="append", default=[], metavar="NAME", help="a label (repeatable)")
    open_parser.set_defaults(func=_run_issue_open)

    comment = _client_parser(commands, "comment", "comment on an issue or pull request as a person")
    comment.add_argument("full_name", metavar="OWNER/NAME")
    comment.add_argument("number", type=int, metavar="NUMBER")
    _person_arguments(comment)
    _body_arguments(comment, required=True)
    comment.set_defaults(func=_run_comment)

    label = commands.add_parser("label", help="labels").add_subparsers(
        dest="label_command", metavar="ACTION", required=True
    )
    add = _client_parser(label, "add", "label an issue or pull request as a person (fires issues.labeled)")
    add.add_argument("full_name", metavar="OWNER/NAME")
    add.add_argument("number", type=int, metavar="NUMBER")
    add.add_argument("name", metavar="LABEL")
    _person_arguments(add)
    add.set_defaults(func=_run_label_add)

    check = commands.add_parser("check", help="check runs").add_subparsers(
        dest="check_command", metavar="ACTION", required=True
    )
    rerun = _client_parser(check, "rerun", "re-request a check run as a person (fires check_run.rerequested)")
    rerun.add_argument("full_name", metavar="OWNER/NAME")
    rerun.add_argument("check_run_id", type=int, metavar="CHECK_RUN_ID")
    _person_arguments(rerun)
    rerun.set_defaults(func=_run_check_rerun)

    state = _client_parser(commands, "state", "print what GitHub would show (one repository, or all)")
    state.add_argument("full_name", nargs="?", metavar="OWNER/NAME")
    state.set_defaults(func=_run_state)


def _register_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="run a sandbox GitHub in the foreground")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port to listen on (default 3100; 0 picks a free one)")
    serve.add_argument("--public-url", metavar="URL", help="the address clients use, if not host:port")
    serve.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="keep the git repositories here (default: a temporary folder removed at exit)",
    )
    serve.add_argument("--request-log", type=Path, metavar="FILE", help="append 'METHOD path status' per request")
    serve.add_argument("--delivery-log", type=Path, metavar="DIR", help="write every webhook delivery as JSON here")
    serve.add_argument("--app-id", type=int, default=1, metavar="ID", help="the App's ID (default 1)")
    serve.add_argument("--app-slug", default="lanebot", metavar="SLUG", help="the App's slug (default lanebot)")
    serve.add_argument(
        "--public-key",
        type=Path,
        required=True,
        metavar="FILE",
        help="the App's public key (PEM); JWTs must be signed with its private key",
    )
    serve.add_argument("--webhook-url", metavar="URL", help="where to deliver webhooks (default: nowhere)")
    serve.add_argument(
        "--webhook-secret-file",
        type=Path,
        metavar="FILE",
        help=f"a file holding the webhook secret (default: ${SECRET_ENVIRONMENT}; none: unsigned)",
    )
    serve.add_argument(
        "--events",
        metavar="LIST",
        help="comma-separated events the App subscribes to "
        "(default push,issues,issue_comment,pull_request,"
        "pull_request_review,pull_request_review_comment,"
        "check_run,check_suite,member,membership,organization,team)",
    )
    serve.set_defaults(func=_run_serve)


def _client_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    parser.add_argument(
        "--sandbox-url",
        metavar="URL",
        help=f"the running sandbox (default ${URL_ENVIRONMENT}, else http://127.0.0.1:3100)",
    )
    return parser


def _person_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--as", dest="login", required=True, metavar="LOGIN", help="the person acting")
    parser.add_argument("--role", choices=ROLES, help="give them this role on the repository first")


def _body_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--body", help="the text")
    group.add_argument("--body-file", type=Path, metavar="FILE", help="read the text from FILE ('-': stdin)")


def _body(args: argparse.Namespace) -> str | None:
    body_file: Path | None = args.body_file
    if body_file is None:
        body: str | None = args.body
        return body
    if str(body_file) == "-":
        return sys.stdin.read()
    try:
        return body_file.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {body_file}: {error.strerror}") from None


def _read_file(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read the {what} {path}: {error.strerror}") from None


def _run_serve(args: argparse.Namespace) -> int:
    from bot.sandbox.cli import DEFAULT_URL, serve
    from bot.sandbox.core import DEFAULT_EVENTS, DEFAULT_PORT, SandboxConfig

    public_key = _read_file(args.public_key, "public key")
    if "PUBLIC KEY" not in public_key:
        raise UsageError(
            f"{args.public_key} holds no PEM public key (-----BEGIN PUBLIC KEY-----); derive one with "
            "`openssl rsa -in private-key.pem -pubout`"
        )
    secret = (
        _read_file(args.webhook_secret_file, "webhook secret file").strip()
        if args.webhook_secret_file
        else os.environ.get(SECRET_ENVIRONMENT, "").strip()
    )
    events = tuple(e.strip() for e in args.events.split(",") if e.strip()) if args.events else DEFAULT_EVENTS
    config = SandboxConfig(
        public_key_pem=public_key,
        app_id=args.app_id,
        app_slug=args.app_slug,
        app_name=args.app_slug,
        webhook_url=args.webhook_url,
        webhook_secret=secret or None,
        events=events,
        public_url=args.public_url or DEFAULT_URL,
        state_dir=args.state_dir,
        request_log=args.request_log,
        delivery_log=args.delivery_log,
    )
    try:
        serve(config, host=args.host, port=DEFAULT_PORT if args.port is None else args.port)
    except OSError as error:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {error.strerror}") from None
    return 0


def _call(args: argparse.Namespace, method: str, *call_args: Any, **kwargs: Any) -> int:
    from bot.sandbox.cli import DEFAULT_URL, HumanClient, SandboxUnavailable

    url = args.sandbox_url or os.environ.get(URL_ENVIRONMENT, "").strip() or DEFAULT_URL
    with HumanClient(url) as client:
        try:
            answer = getattr(client, method)(*call_args, **kwargs)
        except SandboxUnavailable as error:
            raise UsageError(str(error)) from None
    print(json.dumps(answer, indent=2, ensure_ascii=False))
    return 0


def _run_repo_create(args: argparse.Namespace) -> int:
    if not args.folder.is_dir():
        raise UsageError(f"--from {args.folder} is not a folder")
    return _call(
        args,
        "create_repository",
        args.full_name,
        args.folder,
        private=not args.public,
        organization=args.org,
        default_branch=args.default_branch,
    )


def _run_issue_open(args: argparse.Namespace) -> int:
    return _call(
        args,
        "open_issue",
        args.full_name,
        login=args.login,
        title=args.title,
        body=_body(args),
        labels=args.label,
        role=args.role,
    )


def _run_comment(args: argparse.Namespace) -> int:
    return _call(args, "comment", args.full_name, args.number, login=args.login, body=_body(args) or "", role=args.role)


def _run_label_add(args: argparse.Namespace) -> int:
    return _call(args, "add_label", args.full_name, args.number, args.name, login=args.login, role=args.role)


def _run_check_rerun(args: argparse.Namespace) -> int:
    return _call(args, "rerun_check", args.full_name, args.check_run_id, login=args.login, role=args.role)


def _run_state(args: argparse.Namespace) -> int:
    return _call(args, "state", args.full_name)
