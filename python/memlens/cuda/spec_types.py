"""The simulated GPU as user code sees it.

simulate_cuda reads only these six fields, so the engine's own device-table record (which has
the same names) can be passed as is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU model. ``name`` is the table key; ``display_name`` is what CUDA reports."""

    name: str  # e.g. "H100-80GB"
    display_name: str  # e.g. "NVIDIA H100 80GB HBM3" (torch.cuda.get_device_name)
    total_memory_bytes: int
    major: int  # compute capability
    minor: int
    sm_count: int  # multi_processor_count
