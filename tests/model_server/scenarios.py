"""Generic responders for the scripted model server (tests/model_server/server.py).

A responder gets each main-conversation request as a `ModelCall` and returns the next `Reply` or a
`Fault`. These build the common ones: a fixed script of steps, faults before a script, the same
answer every time. A step is a `Reply`, a `Fault`, or a responder of its own (a function of the
call, for an answer that depends on what the CLI sent, e.g. a tool's output).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tests.model_server.script import (
    Fault,
    FaultKind,
    ModelCall,
    Reply,
    Responder,
    RunCommand,
    ToolOutcome,
    WriteFile,
)

FINAL_TEXT = "The scripted session is finished."
FINAL = Reply(text=FINAL_TEXT)
Step = Reply | Fault | Responder


def _answer(step: Step, call: ModelCall) -> Reply | Fault:
    return step if isinstance(step, (Reply, Fault)) else step(call)


class Script:
    """A responder that answers the n-th main call with the n-th step, then with `final` for
    every call after the last step. `.answered` counts the calls it answered."""

    def __init__(self, steps: Sequence[Step], final: Step = FINAL) -> None:
        self.steps = tuple(steps)
        self.final = final
        self.answered = 0
        self._lock = threading.Lock()

    def __call__(self, call: ModelCall) -> Reply | Fault:
        with self._lock:
            index = self.answered
            self.answered += 1
        step = self.steps[index] if index < len(self.steps) else self.final
        return _answer(step, call)


def scripted(*steps: Step, final: Step = FINAL) -> Script:
    """One step per main call, in order; after the last, `final` (a short closing text)."""
    return Script(steps, final)


def faults_then(kinds: FaultKind | Sequence[FaultKind], then: Step = FINAL, *, retry_after_s: int = 1) -> Script:
    """The first calls fault (one per kind, in order), every later one is answered by `then`."""
    faults = [kinds] if isinstance(kinds, str) else list(kinds)
    return Script([Fault(kind, retry_after_s) for kind in faults], then)


def always(answer: Step) -> Responder:
    """Every call gets `answer` (a `Fault` here makes every attempt fail)."""
    return lambda call: _answer(answer, call)


def write_then_run(path: str, content: str, command: str, final: Step = FINAL) -> Script:
    """Write `path`, then run `command`, then end with `final`."""
    return scripted(
        Reply(text=f"Writing {path}.", actions=(WriteFile(path, content),)),
        Reply(text="Running the command.", actions=(RunCommand(command),)),
        final=final,
    )


def last_outcome(call: ModelCall) -> ToolOutcome | None:
    """The most recent tool result the CLI sent, if any."""
    return call.outcomes[-1] if call.outcomes else None


def report_last_outcome(prefix: str = "The command printed: ") -> Responder:
    """A closing step whose text quotes the last tool output, so a test can see it reached the model."""

    def respond(call: ModelCall) -> Reply:
        outcome = last_outcome(call)
        return Reply(text=prefix + (outcome.output.strip() if outcome else "(no tool output)"))

    return respond
