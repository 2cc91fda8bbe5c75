#!/usr/bin/env python3
"""A stand-in for an agent CLI in tests: it records how it was called and replays a recorded stream.

Environment (the tests pass it through `AgentRequest.env`):
  FAKE_RECORD   write {"argv", "stdin", "cwd", "pid", "env", "prompt_file", "prompt_file_text"} here
  FAKE_REPLAY   print this file's lines on stdout, one by one
  FAKE_EXIT     exit with this status after replaying (default 0)
  FAKE_PIDFILE  where `hang`, `hang-ignoring-term` and `orphan` write the pid of the child they spawn
  FAKE_MODE     replay (default) | crash | hang | hang-ignoring-term | orphan | noise | huge | bulk
                | replay-then-hang (prints the whole replay, a final result included, then never exits)
  FAKE_LAST_MESSAGE  write this text to the file named by `--output-last-message` (as Codex does)
  FAKE_BULK_LINES    how many lines `bulk` prints (default 1000)
"""

import json
import os
import signal
import subprocess
import sys
import time

RECORDED_ENV = (
    "LANEBOT_PROMPT_FILE",
    "LANEBOT_READ_ONLY",
    "PATH",
    "HOME",
    "WEBHOOK_SECRET",
    "GITHUB_TOKEN",
    "AGENT_TOKEN",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "AWS_REGION",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CODEX_API_KEY",
    "HTTPS_PROXY",
    "NODE_EXTRA_CA_CERTS",
    "IS_SANDBOX",
    "DATABASE_URL",
    "PRIVATE_KEY",
    "EXTRA_NAMED_VAR",
)


def main() -> int:
    prompt = sys.stdin.read()
    record(prompt)
    mode = os.environ.get("FAKE_MODE", "replay")
    if mode == "crash":
        print('{"type":"system","subtype":"init","session_id":"fake"}', flush=True)
        print("fatal: something broke in the fake agent", file=sys.stderr, flush=True)
        return 3
    if mode in ("hang", "hang-ignoring-term"):
        if mode == "hang-ignoring-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child: it ignores TERM too
        spawn_child()
        print('{"type":"system","subtype":"init","session_id":"fake"}', flush=True)
        while True:
            time.sleep(1000)
    if mode == "noise":
        for line in (
            "plain text, not JSON",
            "[1, 2, 3]",
            '{"lanebot":"exit","status":0}',
            "",
            '{"type":"result","subtype":"success","is_error":false,"result":"quiet"}',
        ):
            print(line, flush=True)
        print("a warning on stderr", file=sys.stderr, flush=True)
        return 0
    if mode == "bulk":
        for index in range(int(os.environ.get("FAKE_BULK_LINES", "1000"))):
            print(json.dumps({"type": "bulk", "n": index, "pad": "p" * 100}), flush=True)
        print('{"type":"result","subtype":"success","is_error":false,"result":"after the bulk"}', flush=True)
        return 0
    if mode == "huge":
        print("x" * 5000, flush=True)
        print('{"type":"after","n":1}', flush=True)
        return 0
    replay()
    write_last_message()
    if mode == "orphan":
        spawn_child()
    if mode == "replay-then-hang":
        spawn_child()
        while True:
            time.sleep(1000)
    return int(os.environ.get("FAKE_EXIT", "0"))


def write_last_message() -> None:
    text = os.environ.get("FAKE_LAST_MESSAGE")
    if text is None or "--output-last-message" not in sys.argv:
        return
    with open(sys.argv[sys.argv.index("--output-last-message") + 1], "w", encoding="utf-8") as handle:
        handle.write(text)


def record(prompt: str) -> None:
    path = os.environ.get("FAKE_RECORD")
    if not path:
        return
    prompt_file = os.environ.get("LANEBOT_PROMPT_FILE")
    prompt_file_text = None
    if prompt_file and os.path.exists(prompt_file):
        with open(prompt_file, encoding="utf-8") as handle:
            prompt_file_text = handle.read()
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(
            {
                "argv": sys.argv[1:],
                "stdin": prompt,
                "cwd": os.getcwd(),
                "pid": os.getpid(),
                "env": {name: os.environ[name] for name in RECORDED_ENV if name in os.environ},
                "env_names": sorted(os.environ),
                "prompt_file": prompt_file,
                "prompt_file_text": prompt_file_text,
            },
            handle,
        )


def replay() -> None:
    path = os.environ.get("FAKE_REPLAY")
    if not path:
        return
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            sys.stdout.write(line)
            sys.stdout.flush()


def spawn_child() -> None:
    # The child keeps the agent's stdout and stderr open, as a real agent's build or server would.
    child = subprocess.Popen(["sleep", "1000"])
    pidfile = os.environ["FAKE_PIDFILE"]
    with open(pidfile + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(str(child.pid))
    os.replace(pidfile + ".tmp", pidfile)  # appears whole: a test may be waiting for it


if __name__ == "__main__":
    sys.exit(main())
