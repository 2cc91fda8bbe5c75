#!/usr/bin/env python3
"""A scripted agent for the review tests, run through lanebot's `command` adapter.

It knows only what lanebot's contract gives an agent: the prompt (stdin), its working directory,
the files lanebot writes there, and the LANEBOT_* variables. What it does is decided by a JSON
script named by its first argument:

- LANEBOT_SESSION=fix: waits until the file `fix_waits_for` names exists (if the script names one)
  and sleeps `fix_works_for` seconds (standing in for an agent's work), then reads `.lanebot/threads.json`; for each instruction thread it applies the
  first fenced block with a `path=` attribute written by a trusted commenter (the way a reviewer
  writes a suggestion) and reports it addressed; a thread with none it reports not addressed,
  saying why. Context threads are never acted on. It writes `.lanebot/fix.json` (with
  `fix_links_report_to`, it leaves that file a symlink to the path instead).
- LANEBOT_SESSION=review: LANEBOT_REVIEW_LENS and LANEBOT_REVIEW_PHASE say which verifier and
  phase. `find` writes the script's `review.<lens>.find` object as `.lanebot/findings.json`;
  `judge` reads `.lanebot/findings-to-check.json` and refutes exactly the finding ids listed in
  `review.<lens>.refute`. With `review.<lens>.link_findings_to`, `find` leaves `.lanebot/findings.json`
  a symlink to that path instead.
"""

import json
import os
import re
import sys
import time
from pathlib import Path

FENCE = re.compile(
    r"^(?P<fence>`{3,})[^\n`]*\bpath=(?P<path>\S+)[^\n]*\n(?P<body>.*?)^(?P=fence)\s*$", re.MULTILINE | re.DOTALL
)


def main() -> int:
    sys.stdin.read()
    script = json.loads(Path(sys.argv[1]).read_text()) if len(sys.argv) > 1 else {}
    session = os.environ.get("LANEBOT_SESSION")
    if session == "fix":
        wait_for(script.get("fix_waits_for"))
        time.sleep(float(script.get("fix_works_for", 0)))
        fix(script.get("fix_links_report_to"))
    elif session == "review":
        review(script.get("review", {}))
    print(json.dumps({"done": session}))
    return 0


def wait_for(path: str | None) -> None:
    """Hold the session until `path` exists, so a test can act while it runs."""
    deadline = time.monotonic() + 120
    while path and not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def fix(link_report_to: str | None = None) -> None:
    if link_report_to:  # a session that leaves a link where its report belongs
        Path(".lanebot/fix.json").symlink_to(link_report_to)
        return
    threads = json.loads(Path(".lanebot/threads.json").read_text())
    report = {"summary": "Applied the suggestions the reviewers wrote out.", "addressed": [], "not_addressed": []}
    for thread in threads["instructions"]:
        suggestion = next((m for c in thread["comments"] if c["trusted"] for m in FENCE.finditer(c["body"])), None)
        if suggestion is None:
            report["not_addressed"].append(
                {"thread": thread["thread"], "why": "it asks a question but spells out no change"}
            )
            continue
        target = Path(suggestion["path"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(suggestion["body"])
        report["addressed"].append({"thread": thread["thread"], "change": f"rewrote {target} as suggested"})
    Path(".lanebot/fix.json").write_text(json.dumps(report))


def review(script: dict) -> None:
    lens = os.environ["LANEBOT_REVIEW_LENS"]
    mine = script.get(lens, {})
    if os.environ.get("LANEBOT_REVIEW_PHASE") == "find":
        if mine.get("link_findings_to"):  # a lens that leaves a link where its findings belong
            Path(".lanebot/findings.json").symlink_to(mine["link_findings_to"])
            return
        Path(".lanebot/findings.json").write_text(json.dumps(mine.get("find", {"looked_at": [], "findings": []})))
        return
    to_check = json.loads(Path(".lanebot/findings-to-check.json").read_text())
    refute = set(mine.get("refute", []))
    items = to_check["findings"] if isinstance(to_check, dict) else to_check
    verdicts = [
        {
            "finding": item["id"],
            "refute": item["id"] in refute,
            "reason": "the diff shows otherwise" if item["id"] in refute else "it holds",
        }
        for item in items
    ]
    Path(".lanebot/verdicts.json").write_text(json.dumps({"verdicts": verdicts}))


if __name__ == "__main__":
    sys.exit(main())
