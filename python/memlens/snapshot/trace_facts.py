"""What the snapshot reads of a finished trace: the seam between the engine, which traces
(engine/tracer.py's Tracer is a TraceFacts), and the snapshot room, which is handed one and never
imports the engine. Everything build.py and device_memory.py read is declared here, so a change
on either side is a change of this file."""

from __future__ import annotations

from typing import Any, Protocol

from ..devices import DeviceSpec
from .ledger_facts import LedgerFacts


class PhaseFacts(Protocol):
    name: str
    start_seq: int  # the first ledger event in this phase


class PhasesFacts(Protocol):
    phases: list[PhaseFacts]

    @property
    def iterations_traced(self) -> int: ...

    @property
    def counted(self) -> str:
        """What one iteration is (what ends it)."""


class ModuleInfoFacts(Protocol):
    class_name: str
    source: Any  # (file, line) of the class, or None
    constructed_at: tuple[str, int] | None


class ModulesFacts(Protocol):
    infos: list[Any]  # ModuleInfoFacts, by module index
    top_level: list[int]  # modules called with an empty stack, in order
    names: dict[int, tuple[int, str]]  # module index -> (its top-level module, its name there)
    has_parameters: set[int]  # top-level modules that own parameters


class StacksFacts(Protocol):
    frames: list[tuple[str, int, str]]  # (file, line, function)
    stacks: list[tuple[int, ...]]  # frame ids, innermost first

    def top_frame(self, stack_id: int) -> tuple[str, int, str] | None: ...


class PlaceholderFacts(Protocol):
    placeholders: list[tuple[int, str, Any]]  # (stack id, op, value) a value was made up for


class NcclFacts(Protocol):
    # device -> group -> {"name", "ranks", "ring", "send", "recv"}
    communicators: dict[str, dict[Any, dict[str, Any]]]


class WorkspaceFacts(Protocol):
    cuda: NcclFacts | None


class CompiledFacts(Protocol):
    def to_json(self) -> list[dict[str, Any]]: ...


class TraceFacts(Protocol):
    ledger: LedgerFacts
    device: DeviceSpec
    target_key: str  # the traced device's ledger key ("cuda:0", "cpu")
    end_seq: int  # the last event of the step (-1: all of them)
    phases: PhasesFacts
    modules: ModulesFacts
    stacks: StacksFacts
    accountant: PlaceholderFacts
    workspaces: WorkspaceFacts
    compiled: CompiledFacts
    allocator_settings: dict[str, Any] | None  # set when a CUDA allocator model started
    iterations: int
    started: float
    finished: float
    interrupted: bool  # Ctrl-C ended the trace
    notes: list[str]  # what plugins changed about the run
    outside: list[tuple]  # (device key, OutsideItem, short basis) a library holds outside

    def parallel_meta(self) -> dict[str, Any]:
        """The simulated rank's job: world size, rank, parallelism."""
