"""The target devices a trace can simulate.

Total memory is what `nvidia-smi` reports as the card's total (MiB x 2**20) for the common
SKU of each name; compute capability and SM count are NVIDIA's published figures. A user whose
card differs sets the budget explicitly (`--budget`). What memlens derives from a device beyond
these fields comes from its compute capability: the SDPA backend order (cuda/sdpa.py: cuDNN
first on sm90/sm10x), the cuBLAS workspace size (allocator/outside.py), flash/cuDNN head-dim
limits.

Not simulated: AMD Instinct (MI300X, MI325X, MI355X). PyTorch's ROCm build runs HIP's caching
allocator with other defaults and different attention kernels (AOTriton/CK, another SDPA order),
so a CUDA rule set would give numbers that look exact and are not; such names are rejected.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import MemlensError

MiB = 1024 * 1024

# Every block of the CUDA caching allocator is a multiple of 512 B (at least 512 B); the CPU
# allocator hands out exactly what was asked for.
CUDA_BLOCK_ROUNDING = 512


@dataclass(frozen=True)
class DeviceSpec:
    name: str  # the short name users type: h100-80gb
    display_name: str  # what torch.cuda.get_device_name() answers
    total_memory_bytes: int
    major: int  # compute capability
    minor: int
    sm_count: int
    type: str = "cuda"  # "cuda" or "cpu"

    @property
    def rounding(self) -> int:
        return CUDA_BLOCK_ROUNDING if self.type == "cuda" else 1

    def round_size(self, nbytes: int) -> int:
        """Bytes the allocator really hands out for a request of `nbytes`."""
        if self.type != "cuda" or nbytes == 0:
            return nbytes
        r = CUDA_BLOCK_ROUNDING
        return ((nbytes + r - 1) // r) * r

    def to_json(self) -> dict:
        return {"name": self.name, "display_name": self.display_name, "type": self.type,
                "total_memory_bytes": self.total_memory_bytes,
                "compute_capability": [self.major, self.minor] if self.type == "cuda" else None,
                "sm_count": self.sm_count if self.type == "cuda" else None,
                "rounding_bytes": self.rounding}


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


_CUDA = [
    DeviceSpec("h100-80gb", "NVIDIA H100 80GB HBM3", 81559 * MiB, 9, 0, 132),
    DeviceSpec("h100-94gb", "NVIDIA H100 NVL", 95830 * MiB, 9, 0, 132),
    # Inferred, not read off this SKU: no nvidia-smi output of an H100 96GB was found; the other
    # 96 GB Hopper parts (GH200 96GB, H20) report 97871 MiB. sm90 and 132 SMs as the H100 SXM5.
    DeviceSpec("h100-96gb", "NVIDIA H100 96GB", 97871 * MiB, 9, 0, 132),
    DeviceSpec("h200", "NVIDIA H200", 143771 * MiB, 9, 0, 132),
    # nvidia-smi names the 96 GB HBM3 GH200 after its 480 GB of LPDDR5X; 97871 MiB total
    # (public nvidia-smi output of GH200 nodes); sm90 and 132 SMs as the H100 SXM5.
    DeviceSpec("gh200-96gb", "NVIDIA GH200 480GB", 97871 * MiB, 9, 0, 132),
    # 144 GB HBM3e variant: nvidia-smi --query-gpu=memory.total reports 146831 MiB; sm90.
    DeviceSpec("gh200-144gb", "NVIDIA GH200 144G HBM3e", 146831 * MiB, 9, 0, 132),
    DeviceSpec("b200", "NVIDIA B200", 183359 * MiB, 10, 0, 148),
    # Blackwell Ultra, 288 GB HBM3e: nvidia-smi reports 275040 MiB and compute_cap 10.3
    # (sm103), public nvidia-smi output; 148 SMs assumed as the B200's (not confirmed: it only
    # sets flash attention's split heuristic and multi_processor_count).
    DeviceSpec("b300", "NVIDIA B300 SXM6 AC", 275040 * MiB, 10, 3, 148),
    DeviceSpec("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960 * MiB, 8, 0, 108),
    DeviceSpec("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920 * MiB, 8, 0, 108),
    DeviceSpec("l40s", "NVIDIA L40S", 46068 * MiB, 8, 9, 142),
    DeviceSpec("rtx-4090", "NVIDIA GeForce RTX 4090", 24564 * MiB, 8, 9, 128),
]

DEFAULT_DEVICE = "h100-80gb"


def all_devices() -> list[DeviceSpec]:
    cpu = DeviceSpec("cpu", "host CPU", _host_memory_bytes(), 0, 0, 0, type="cpu")
    return [*_CUDA, cpu]


def get_device(name: str) -> DeviceSpec:
    key = name.strip().lower().replace("_", "-")
    for spec in all_devices():
        if spec.name == key:
            return spec
    valid = ", ".join(d.name for d in all_devices())
    if key.startswith("mi") and key[2:5].isdigit():
        raise MemlensError(f"device {name!r} is an AMD Instinct GPU, which memlens does not "
                           f"simulate (PyTorch's ROCm build has another allocator and attention "
                           f"kernels); valid devices: {valid}")
    raise MemlensError(f"unknown device {name!r}; valid devices: {valid}")
