"""The device table: capacities as nvidia-smi reports them (MiB x 2**20), compute capability,
what each device's rules derive from it, and names memlens refuses."""

import pytest

from memlens.allocator.outside import cublas_workspace_bytes, cuda_context_items
from memlens.cuda import sdpa
from memlens.devices import all_devices, get_device
from memlens.errors import MemlensError

MiB = 2**20


@pytest.mark.parametrize("name, display, total, cc, sms", [
    # nvidia-smi memory.total of each card, in MiB
    ("h100-96gb", "NVIDIA H100 96GB", 97871 * MiB, (9, 0), 132),
    ("gh200-96gb", "NVIDIA GH200 480GB", 97871 * MiB, (9, 0), 132),
    ("gh200-144gb", "NVIDIA GH200 144G HBM3e", 146831 * MiB, (9, 0), 132),
    ("b200", "NVIDIA B200", 183359 * MiB, (10, 0), 148),
    ("b300", "NVIDIA B300 SXM6 AC", 275040 * MiB, (10, 3), 148),
])
def test_new_devices_have_their_cards_capacity_and_capability(name, display, total, cc, sms):
    d = get_device(name)
    assert (d.display_name, d.total_memory_bytes, (d.major, d.minor), d.sm_count) == (
        display, total, cc, sms)
    assert d.total_memory_bytes == {"h100-96gb": 102_625_181_696, "gh200-96gb": 102_625_181_696,
                                    "gh200-144gb": 153_963_462_656, "b200": 192_265_846_784,
                                    "b300": 288_400_343_040}[name]


def test_every_cuda_device_has_the_figures_the_report_needs():
    for d in all_devices():
        if d.type != "cuda":
            continue
        assert cuda_context_items(d.name)[0].bytes > 0
        # Hopper and Blackwell take the 32 MiB cuBLAS workspace; Ampere and Ada 8,519,680 B.
        expected = 32 * MiB if d.major in (9, 10) else 2 * 4096 * 1024 + 8 * 16 * 1024
        assert cublas_workspace_bytes(d.major, d.minor, env={}) == expected


@pytest.mark.parametrize("name, first", [
    ("h100-80gb", "cudnn"), ("gh200-96gb", "cudnn"), ("gh200-144gb", "cudnn"),
    ("b200", "cudnn"), ("b300", "cudnn"), ("a100-80gb", "flash"), ("rtx-4090", "flash"),
])
def test_sdpa_order_follows_the_capability(name, first, monkeypatch):
    monkeypatch.delenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", raising=False)
    d = get_device(name)
    assert sdpa.NAMES[sdpa.priority_order((d.major, d.minor))[0]] == first


def test_amd_instinct_is_refused_with_the_known_devices():
    with pytest.raises(MemlensError, match="AMD Instinct GPU, which memlens does not simulate.*"
                                           "valid devices: h100-80gb, .*b300"):
        get_device("MI300X")


def test_an_unknown_name_lists_the_known_devices():
    with pytest.raises(MemlensError, match=r"unknown device 'h900'; valid devices: h100-80gb, "
                                           r"h100-94gb, h100-96gb, h200, gh200-96gb, gh200-144gb, "
                                           r"b200, b300, a100-40gb"):
        get_device("h900")
