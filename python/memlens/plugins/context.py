"""What a plugin may use of the trace it joins, and what a plugin is: the seam between the
tracer (engine/tracer.py's Tracer is a PluginContext) and the library integrations, so that a
plugin reads nothing of the tracer that is not declared here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..devices import DeviceSpec
    from ..engine.accountant import Accountant
    from ..distributed.env import RankSpec
    from ..distributed.layout import Layout
    from ..engine.classifier import Classifier
    from ..engine.layer_replay import LayerReplay
    from ..engine.ledger import Ledger
    from ..engine.modules import ModuleTracker
    from ..engine.phases import PhaseTracker
    from ..kernels.buffers import WorkspaceModel
    from .imports import ImportWatcher


class PluginContext(Protocol):
    device: DeviceSpec  # the simulated target
    rank: RankSpec | None  # the simulated rank of a distributed job, if any
    layout: Layout | None  # its process groups, as the job declares them
    iterations: int  # training steps to trace
    ledger: Ledger  # every allocation: a plugin may re-attribute what a library made
    modules: ModuleTracker  # module attribution (a flat buffer shared by parameters)
    phases: PhaseTracker  # the step's phases (a library's own loop marks them)
    classifier: Classifier  # categories of tensors a library makes (states, buffers)
    accountant: Accountant  # made_fake: a tensor a library makes outside dispatch, booked
    workspaces: WorkspaceModel  # what kernels allocate for themselves
    notes: list[str]  # what plugins changed about the run (the snapshot's meta.notes)
    outside: list[tuple]  # (device key, OutsideItem, short basis): a library's own device memory
    layer_replay: LayerReplay | None  # repeated blocks replayed: a library declares its caches

    def add_note(self, text: str) -> None:
        """Say once, in the report and the snapshot, what was changed about the run."""


class Plugin(Protocol):
    """One library's integration while a trace runs: made by the PluginHost as the library
    starts to be imported (`Plugin(context, watcher)`: it watches the library's submodules to
    patch them as they are imported), undone by `deactivate()` when the trace ends."""

    def deactivate(self) -> None: ...


class PluginFactory(Protocol):
    def __call__(self, context: PluginContext, watcher: ImportWatcher) -> Plugin: ...
