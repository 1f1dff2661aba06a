"""Memory next to the allocator's: CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers."""

import pytest

from memlens.allocator.outside import cublas_workspace_bytes, cublas_workspace_items, \
    cuda_context_items, cudnn_workspace_items, nccl_buffer_items

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


def test_nccl_buffers_by_world_size():
    # per connection: LL 524,288 + LL128 4,915,200 + Simple 4,194,304 = 9,633,792 B
    [item] = nccl_buffer_items(8, channels=16, env={})
    assert item.bytes == 9_633_792 * 16 * 2  # two ring peers: 308,281,344
    [item] = nccl_buffer_items(2, channels=2, env={})
    assert item.bytes == 9_633_792 * 2 * 1  # one peer
    assert nccl_buffer_items(1, env={}) == []  # nothing to talk to
    [item] = nccl_buffer_items(8, channels=16, env={"NCCL_BUFFSIZE": str(8 * MiB),
                                                    "NCCL_MAX_NCHANNELS": "4"})
    assert item.bytes == (524_288 + 4_915_200 + 8 * MiB) * 4 * 2
    assert not item.counted_by_allocator


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
