"""What the accountant (accountant.py) uses of the tracer that owns it: the seam between the two,
declared, so that the accountant reads nothing of the tracer that is not listed here
(engine/tracer.py's Tracer is an AccountantHost; a test holds the two together)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from ..errors import StopTracing
    from ..kernels.buffers import WorkspaceModel
    from ..kernels.nccl_work import NcclWorks
    from .ledger import Ledger
    from .modules import ModuleTracker
    from .phases import PhaseTracker
    from .stacks import StackTable


class AccountantHost(Protocol):
    ledger: Ledger  # where every allocation and free is booked
    phases: PhaseTracker  # the step's phase of each event
    modules: ModuleTracker  # the module an op runs in
    stacks: StackTable  # the user's frames of each allocation
    workspaces: WorkspaceModel  # what kernels allocate for themselves
    collectives: NcclWorks | None  # NCCL work of a simulated rank (None: one process)
    dynamic_size_policy: str  # how a data-dependent size is answered (dynamic_sizes.py)

    def device_key(self, device: torch.device) -> str:
        """The ledger's name of a device ("cuda:0", "cpu")."""

    def stop(self) -> StopTracing:
        """The exception that ends the workload once the iterations are traced."""
