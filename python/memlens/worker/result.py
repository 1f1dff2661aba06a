"""How a worker ended, one shape for every parent (the language server's traces and searches,
the ranks of `--ranks all`, the points of `memlens fit`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .process_tree import Ended
from .protocol import final_json


@dataclass
class WorkerResult:
    status: str  # ok | failed | cancelled | replaced | timeout
    returncode: int | None
    output: dict[str, Any] | None  # the last JSON object on its stdout: the summary, or an error
    log: list[str] = field(default_factory=list)  # its last stderr lines (progress aside)
    duration_s: float = 0.0
    rank: int | None = None  # the rank it traced, for a rank of `--ranks all`

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def error(self) -> dict[str, Any] | None:
        """The error the worker reported, if it reported one."""
        if self.output and isinstance(self.output.get("error"), dict):
            return self.output["error"]
        return None

    def failure(self) -> dict[str, Any]:
        """Why it failed: its own error, else its exit status and last lines."""
        if self.error is not None:
            return self.error
        tail = "\n".join(self.log[-10:])
        return {"kind": "WorkerFailed", "message": f"the worker exited with status "
                f"{self.returncode}" + (f":\n{tail}" if tail else "")}


def ended_result(ended: Ended, log: list[str], stopped: str | None = None,
                 rank: int | None = None) -> WorkerResult:
    """The result of a worker that has exited; `stopped`: why its parent ended it, if it did."""
    output = final_json(ended.stdout)
    if stopped is not None:
        status = stopped
    elif ended.timed_out:
        status = "timeout"
    elif ended.returncode == 0 and output is not None and "error" not in output:
        status = "ok"
    else:
        status = "failed"
    return WorkerResult(status, ended.returncode, output, list(log),
                        round(ended.duration_s, 3), rank)
