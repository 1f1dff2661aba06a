"""The server's running workers, traces (tracing.py) and searches (fitting.py) alike: one per
target at a time (a new request replaces the running one), found again by the request's id or
its `$/progress` token to be cancelled, and started with one message where the interpreter
cannot be run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from .worker import Worker, WorkerResult


@dataclass(kw_only=True)
class WorkerRun:
    token: str | None = None  # its `$/progress`, where the client shows one
    worker: Worker | None = None
    stopped_before_start: str | None = None  # why it ended before its worker started
    msg_id: Any = None  # the request's id (None: a trace on save)
    unanswered: bool = False  # its request was cancelled: its reply will not carry the result

    def stop(self, reason: str) -> None:
        if self.worker is not None:
            self.worker.stop(reason)
        elif self.stopped_before_start is None:
            self.stopped_before_start = reason


R = TypeVar("R", bound=WorkerRun)


class Runs(dict[str, R]):
    """The running workers by target id."""

    def begin(self, target_id: str, run: R) -> None:
        old = self.get(target_id)
        if old is not None:
            old.stop("replaced")
        self[target_id] = run

    def end(self, target_id: str, run: R) -> bool:
        """Forget `run` unless a newer one replaced it; True if it was the running one."""
        if self.get(target_id) is run:
            del self[target_id]
            return True
        return False

    def by_msg_id(self, msg_id: Any) -> R | None:
        return next((r for r in self.values() if r.msg_id == msg_id), None)

    def by_token(self, token: Any) -> R | None:
        return next((r for r in self.values() if r.token is not None and r.token == token),
                    None)

    def stop_all(self, reason: str = "cancelled") -> None:
        for run in list(self.values()):
            run.stop(reason)


async def start(worker: Worker, what: str, python: str) -> WorkerResult | None:
    """Start `worker`; the failed result to report if its interpreter cannot be run."""
    try:
        await worker.start()
    except OSError as e:
        return WorkerResult("failed", None, {"error": {
            "kind": "WorkerNotStarted",
            "message": f"Cannot start the {what} worker with {python}: {e}. Check the "
                       "memlens.python setting."}})
    return None
