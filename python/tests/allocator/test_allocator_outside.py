"""Memory next to the allocator's: CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers."""

import pytest

from memlens.allocator.outside import cublas_workspace_bytes, cublas_workspace_items, \
    cuda_context_items, cudnn_workspace_items
from memlens.allocator.nccl import Communicator, communicator_bytes, connection_bytes

MiB = 1 << 20


def test_cublas_default_workspace_by_compute_capability():
    # ':4096:2:16:8' = 2 x 4096 KiB + 8 x 16 KiB = 8,388,608 + 131,072 = 8,519,680 B
    assert cublas_workspace_bytes(8, 0, {}) == 8_519_680  # A100
    assert cublas_workspace_bytes(8, 9, {}) == 8_519_680  # L40S, RTX 4090
    # Hopper and Blackwell: 4096 KiB x 8 = 32 MiB
    assert cublas_workspace_bytes(9, 0, {}) == 33_554_432  # H100, H200
    assert cublas_workspace_bytes(10, 0, {}) == 33_554_432  # B200
    assert cublas_workspace_bytes(12, 0, {}) == 33_554_432


@pytest.mark.parametrize("config, expected", [
    (":4096:8", 4096 * 1024 * 8),  # 33,554,432
    (":16:8", 16 * 1024 * 8),  # 131,072
    (":4096:2:16:8", 8_519_680),
    (":0:0", 0),  # cuBLAS without a workspace
    ("nonsense", 8_519_680),  # no ':SIZE:COUNT' found: PyTorch warns and keeps the default
])
def test_cublas_workspace_config(config, expected):
    assert cublas_workspace_bytes(8, 0, {"CUBLAS_WORKSPACE_CONFIG": config}) == expected


def test_cublas_items_are_inside_the_allocator_one_per_handle_and_stream():
    [item] = cublas_workspace_items(9, 0, {}, handle_streams=2)
    assert item.bytes == 2 * 33_554_432
    assert item.counted_by_allocator is True
    assert "9.0" in item.basis


def test_separate_cublaslt_workspace_when_unification_is_off():
    items = cublas_workspace_items(8, 0, {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0",
                                          "CUBLASLT_WORKSPACE_SIZE": "2048"})
    assert [i.bytes for i in items] == [8_519_680, 2048 * 1024]


def test_cudnn_workspace_is_bounded_only_by_its_cap():
    [item] = cudnn_workspace_items({"CUDNN_CONV_WSCAP_DBG": "256"})
    assert item.bytes == 256 * MiB and item.counted_by_allocator
    [item] = cudnn_workspace_items({})
    assert item.bytes == 0 and "not estimated" in item.basis


def test_nccl_connection_bytes_follow_p2p_setup():
    # receiving: 4,096 header + LL 524,288 + LL128 4,915,200 + Simple 4,194,304 = 9,637,888 B,
    # rounded up to 2 MiB: 5 x 2,097,152 = 10,485,760; sending: the 4,096 B header -> 2 MiB.
    assert connection_bytes({}, p2p_read=False) == (10_485_760, 2_097_152)
    # P2P read puts Simple on the sender: 4,096 + 524,288 + 4,915,200 = 5,443,584 -> 6 MiB;
    # 4,096 + 4,194,304 = 4,198,400 -> 6 MiB. 12 MiB per channel either way.
    assert connection_bytes({}, p2p_read=True) == (6 * MiB, 6 * MiB)
    # NCCL_BUFFSIZE=8 MiB: 4,096 + 524,288 + 4,915,200 + 8,388,608 = 13,832,192 -> 14 MiB.
    assert connection_bytes({"NCCL_BUFFSIZE": str(8 * MiB)}, False) == (14 * MiB, 2 * MiB)


def test_nccl_communicator_bytes():
    ring = Communicator("default", 8, ring=True)
    # 16 channels on an NVLink card x (10 MiB + 2 MiB) = 192 MiB, whatever the group's size
    assert communicator_bytes(ring, "h100-80gb", (9, 0), env={})[0] == 16 * 12 * MiB
    # NCCL_MAX_NCHANNELS=4: 4 x 12 MiB; a PCIe card's 2 channels: 2 x 12 MiB
    assert communicator_bytes(ring, "h100-80gb", (9, 0),
                              env={"NCCL_MAX_NCHANNELS": "4"})[0] == 48 * MiB
    assert communicator_bytes(ring, "l40s", (8, 9), env={})[0] == 24 * MiB
    # NCCL_MIN_NCHANNELS wins over the assumption: 32 x 12 MiB
    assert communicator_bytes(ring, "h100-80gb", (9, 0),
                              env={"NCCL_MIN_NCHANNELS": "32"})[0] == 384 * MiB
    assert communicator_bytes(Communicator("solo", 1, ring=True), "h100-80gb", (9, 0),
                              env={})[0] == 0  # nobody to connect to
    # A pipeline stage that sends to the next stage and receives from the previous one:
    # 16 p2p channels x (one receiving 10 MiB + one sending 2 MiB connection) = 192 MiB;
    # NCCL_MAX_P2P_NCHANNELS=3 is rounded up to a power of two: 4 x 12 MiB.
    pp = Communicator("pp", 4, send_peers=frozenset({2}), recv_peers=frozenset({0}))
    assert communicator_bytes(pp, "h100-80gb", (9, 0), env={})[0] == 192 * MiB
    assert communicator_bytes(pp, "h100-80gb", (9, 0),
                              env={"NCCL_MAX_P2P_NCHANNELS": "3"})[0] == 48 * MiB
    nbytes, basis = communicator_bytes(ring, "a100-80gb", (8, 0), env={})
    assert nbytes == 192 * MiB and "P2P read" in basis and "Approximate" in basis


def test_cuda_context_per_device():
    [item] = cuda_context_items("h100-80gb", env={})
    assert item.bytes == 512 * MiB and not item.counted_by_allocator
    assert "approximate" in item.basis and "#107667" in item.basis
    assert cuda_context_items("H200", env={})[0].bytes == 512 * MiB
    assert cuda_context_items("rtx_4090", env={})[0].bytes == 384 * MiB
    eager = cuda_context_items("a100-80gb", env={"CUDA_MODULE_LOADING": "EAGER"})[0]
    assert eager.bytes == 1024 * MiB
    with pytest.raises(KeyError, match="no CUDA context figure"):
        cuda_context_items("voodoo-5")
