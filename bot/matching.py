"""Matching `files` expressions against many paths in a child process, killed at a deadline.

Python's `re` has no timeout and a `files` expression is untrusted (a planner or an issue wrote
it). bot/ere.py refuses expressions whose structure can backtrack badly; this is the bound that
does not depend on that analysis being perfect. The child is a plain Python started with `-I -S`
and no environment (none of the service's secrets), importing only `re` and `pickle`; it answers
one expression at a time and is killed once one takes longer than the deadline (`MatchTimeout`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import selectors
import subprocess
import sys
import time
from collections.abc import Sequence

from bot.ere import compiled_ere, shown

__all__ = ["MATCH_TIMEOUT_S", "MatchTimeout", "match_paths"]

MATCH_TIMEOUT_S = 5.0
_WORKER_INPUT_TIMEOUT_S = 60.0  # to start and read the paths: only a machine in trouble takes that long
_CHUNK = 1 << 16
_STDERR_KEPT = 2000

# The worker runs with -I -S (no site, no environment, no current directory on its path), imports
# only the standard library, and writes one line per pattern, the positions of the paths it
# matches, as soon as it has them.
_WORKER_SOURCE = """
import pickle, re, sys
patterns, paths = pickle.load(sys.stdin.buffer)
for source, flags in patterns:
    search = re.compile(source, flags).search
    found = " ".join([str(i) for i, path in enumerate(paths) if search(path)])
    sys.stdout.buffer.write(found.encode() + b"\\n")
    sys.stdout.buffer.flush()
"""


class MatchTimeout(Exception):
    """Matching one expression of `match_paths` against the paths took longer than its deadline."""

    def __init__(self, position: int, files: str, seconds: float, paths: int, done: list[list[int]]) -> None:
        self.position = position  # of the slow expression, in the expressions given
        self.files = files
        self.seconds = seconds
        self.done = done  # the results of the expressions before it
        super().__init__(
            f"matching files {shown(files)} against {paths} path{'s' * (paths != 1)} took longer than"
            f" {seconds:g} s; simplify the expression: anchor it with ^ and use fewer repetitions such as .*"
        )


def match_paths(
    expressions: Sequence[str], paths: Sequence[str], *, timeout: float = MATCH_TIMEOUT_S
) -> list[list[int]]:
    """For each ERE in `expressions`, the ascending positions of the `paths` it matches somewhere.

    Python's `re` cannot be interrupted and `files_hazard` is a model, not a proof, so the
    matching runs in a child Python process, one expression after the other, killed as soon as
    one expression takes longer than `timeout` seconds over all the paths: MatchTimeout then
    names it. A call with paths to match costs one interpreter start (about 15 ms). Raises
    ValueError when an expression is not a valid ERE, RuntimeError when the worker fails.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    patterns = [compiled_ere(expression) for expression in expressions]
    if not patterns or not paths:
        return [[] for _ in patterns]
    payload = pickle.dumps(([(p.pattern, p.flags) for p in patterns], list(paths)), pickle.HIGHEST_PROTOCOL)
    try:
        worker = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WORKER_SOURCE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_worker_environment(),
        )
    except OSError as error:
        raise RuntimeError(f"cannot start {sys.executable!r} to match files against paths: {error}") from None
    with worker:
        try:
            return _WorkerExchange(worker, payload).answers(list(expressions), len(paths), timeout)
        finally:
            worker.kill()  # Popen does nothing once the worker has exited and been waited for
            worker.wait()


def _worker_environment() -> dict[str, str]:
    # The worker needs nothing from the environment and is given none of the service's secrets;
    # an interpreter linked to a shared libpython may need its library path.
    return {key: os.environ[key] for key in ("LD_LIBRARY_PATH",) if key in os.environ}


class _WorkerExchange:
    """Writes the worker its input and reads its answers, each within its deadline."""

    def __init__(self, worker: subprocess.Popen[bytes], payload: bytes) -> None:
        self.worker = worker
        self.unsent = memoryview(payload)
        self.received = bytearray()
        self.errors = b""
        self.selector = selectors.DefaultSelector()
        streams = {worker.stdin: selectors.EVENT_WRITE, worker.stdout: selectors.EVENT_READ,
                   worker.stderr: selectors.EVENT_READ}
        for stream, event in streams.items():
            os.set_blocking(stream.fileno(), False)  # type: ignore[union-attr]
            self.selector.register(stream, event)  # type: ignore[arg-type]

    def answers(self, expressions: list[str], paths: int, timeout: float) -> list[list[int]]:
        with self.selector:
            deadline = time.monotonic() + _WORKER_INPUT_TIMEOUT_S
            while self.unsent:
                if not self._pump(deadline):
                    raise RuntimeError(
                        f"the process that matches files did not read its input within {_WORKER_INPUT_TIMEOUT_S:g} s"
                    )
            done: list[list[int]] = []
            while len(done) < len(expressions):
                line = self._next_line(time.monotonic() + timeout)
                if line is None:
                    raise MatchTimeout(len(done), expressions[len(done)], timeout, paths, done)
                done.append([int(position) for position in line.split()])
            return done

    def _next_line(self, deadline: float) -> bytes | None:
        while b"\n" not in self.received:
            if not self._pump(deadline):
                return None
        line, _, rest = bytes(self.received).partition(b"\n")
        self.received = bytearray(rest)
        return line

    def _pump(self, deadline: float) -> bool:
        """Move what is ready between the worker and us; False when nothing was before the deadline."""
        remaining = deadline - time.monotonic()
        events = self.selector.select(remaining) if remaining > 0 else []
        for key, _ in events:
            if key.fileobj is self.worker.stdin:
                self._write()
            elif key.fileobj is self.worker.stdout:
                self._read_answers()
            else:
                self._read_errors()
        return bool(events)

    def _write(self) -> None:
        try:
            written = os.write(self.worker.stdin.fileno(), self.unsent[:_CHUNK])  # type: ignore[union-attr]
        except BlockingIOError:
            return
        except BrokenPipeError:
            written = len(self.unsent)  # it died: its stdout's end says how
        self.unsent = self.unsent[written:]
        if not self.unsent:
            self.selector.unregister(self.worker.stdin)  # type: ignore[arg-type]
            self.worker.stdin.close()  # type: ignore[union-attr]

    def _read_answers(self) -> None:
        data = os.read(self.worker.stdout.fileno(), _CHUNK)  # type: ignore[union-attr]
        if not data:
            self._died()
        self.received += data

    def _read_errors(self) -> None:
        try:
            data = os.read(self.worker.stderr.fileno(), _CHUNK)  # type: ignore[union-attr]
        except BlockingIOError:
            return
        if not data:
            self.selector.unregister(self.worker.stderr)  # type: ignore[arg-type]
        self.errors = (self.errors + data)[-_STDERR_KEPT:]

    def _died(self) -> None:
        code = self.worker.wait()
        with contextlib.suppress(OSError):  # BlockingIOError included: what it wrote is all there
            while data := os.read(self.worker.stderr.fileno(), _CHUNK):  # type: ignore[union-attr]
                self.errors = (self.errors + data)[-_STDERR_KEPT:]
        last = self.errors.decode(errors="replace").strip().splitlines()[-1:]
        raise RuntimeError(
            f"the process that matches files against paths exited with code {code}" + (f": {last[0]}" if last else "")
        )
