"""A job: the training script to run, the processes it is launched as, and where it is defined.
Written to a file for `--ranks all`, so that every rank's worker traces the job the launch
script was recorded as once, instead of running the script again."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import Location, MemlensError
from .script import ScriptTarget


@dataclass
class Job:
    target: ScriptTarget
    world_size: int | None = None
    nproc_per_node: int | None = None
    # Why the launch line gives no world size (None when it gives one, or says nothing).
    world_size_problem: str | None = None
    location: Location | None = None  # where the job is defined, for that message
    # The option a launcher passes the local rank in ("--local-rank" for
    # torch.distributed.launch without --use-env, "--local_rank" for deepspeed), or "".
    local_rank_arg: str = ""
    note: str | None = None  # printed before the trace (which of several launches is traced)

    def to_json(self) -> dict:
        t = self.target
        return {"target": {"path": t.path, "module": t.module, "args": t.args, "cwd": t.cwd,
                           "env": t.env},
                "world_size": self.world_size, "nproc_per_node": self.nproc_per_node,
                "world_size_problem": self.world_size_problem,
                "location": [self.location.file, self.location.line] if self.location else None,
                "local_rank_arg": self.local_rank_arg}


def write_job(job: Job, path: Path) -> None:
    path.write_text(json.dumps(job.to_json()), encoding="utf-8")


def read_job(path: str) -> Job:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise MemlensError(f"cannot read the recorded job {path}: {e}") from None
    t = raw["target"]
    where = raw["location"]
    return Job(ScriptTarget(path=t["path"], module=t["module"], args=t["args"], cwd=t["cwd"],
                            env=t["env"]),
               raw["world_size"], raw["nproc_per_node"], raw["world_size_problem"],
               Location(where[0], where[1]) if where else None,
               "--local-rank" if raw["local_rank_arg"] is True else raw["local_rank_arg"] or "")
