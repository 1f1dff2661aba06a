"""A memlens worker's command line, spelt in one place for every parent that starts one: the
language server's trace (`protocol.trace_command`) and search (server/fitting.py), a rank of
`--ranks all` and the helper that traces another rank (cli/all_ranks.py), a point of `memlens
fit` (fit/trace_point.py). Each says what it wants as a WorkerCommand; `args()` is the one
order of the flags, `argv(python)` the whole command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class WorkerCommand:
    job: Sequence[str]  # what it runs: `-- script args`, `--launch NAME`, `--recorded-job FILE`,
    #                     `--from-script FILE[:LINE] [-- args]`, or `FILE:Symbol` for `trace`
    subcommand: str = "run"  # run | trace | fit
    device: str | None = None  # None: the recipe's, else the default
    world_size: int | None = None
    nproc_per_node: int | None = None
    rank: int | None = None
    all_ranks: bool = False
    jobs: int | None = None  # workers at a time (`--ranks all`, fit)
    iterations: int | None = None
    snapshot: str | bool | None = None  # a path; False: --no-snapshot; None: the default
    with_digest: bool = False  # the summary carries the snapshot's digest (snapshot/digest.py)
    options: Sequence[tuple[str, Any]] = ()  # further (flag, value) pairs, passed where set
    extra: Sequence[str] = ()  # options passed as they are (a search's space)
    debug: bool = False

    def args(self) -> list[str]:
        """The arguments after `python -m memlens`."""
        out = (["--debug"] if self.debug else []) + [self.subcommand]
        if self.subcommand == "trace":
            out += list(self.job)
        out += ["--json", "--progress", "json"] + (["--with-digest"] if self.with_digest else [])
        pairs = [("--device", self.device), ("--world-size", self.world_size),
                 ("--nproc-per-node", self.nproc_per_node), ("--rank", self.rank),
                 ("--ranks", "all" if self.all_ranks else None), ("--jobs", self.jobs),
                 ("--iterations", self.iterations),
                 ("--snapshot", self.snapshot if isinstance(self.snapshot, str) else None),
                 *self.options]
        for flag, value in pairs:
            if value is not None:
                out += [flag, str(value)]
        if self.snapshot is False:
            out.append("--no-snapshot")
        out += list(self.extra)
        if self.subcommand != "trace":
            out += list(self.job)
        return out

    def argv(self, python: str) -> list[str]:
        return [python, "-m", "memlens", *self.args()]
