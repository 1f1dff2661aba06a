"""PYTORCH_CUDA_ALLOC_CONF parsing, against the rules of PyTorch 2.13's ConfigTokenizer,
AcceleratorAllocatorConfig::parseArgs and CUDAAllocatorConfig::parseArgs."""

import pytest

from memlens.allocator.config import SIZE_MAX, AllocatorConfig, AllocatorConfigError, \
    parse_alloc_conf

MiB = 1 << 20


def test_empty_or_missing_text_gives_pytorch_defaults():
    for text in (None, ""):
        config = parse_alloc_conf(text)
        assert config == AllocatorConfig()
        assert config.max_split_size == SIZE_MAX
        assert config.large_segment_size == 20 * MiB
        assert config.max_non_split_rounding_size == 20 * MiB
        assert config.roundup_power2_divisions == (0,) * 16
        assert config.expandable_segments is False


def test_every_documented_key_together():
    config = parse_alloc_conf(
        "max_split_size_mb:100,roundup_power2_divisions:[256:1,512:2,>:4],"
        "garbage_collection_threshold:0.6,expandable_segments:True,"
        "pinned_use_cuda_host_register:True,pinned_num_register_threads:8,"
        "release_lock_on_cudamalloc:True,per_process_memory_fraction:0.5")
    assert config.max_split_size == 100 * MiB  # 104,857,600
    # 256 MiB is bucket 8 (sizes in [256, 512) MiB): buckets 0..7 take the first value too;
    # 512 MiB is bucket 9; '>' fills the buckets after the last one named (10..15).
    assert config.roundup_power2_divisions == (1,) * 9 + (2,) + (4,) * 6
    assert config.garbage_collection_threshold == 0.6
    assert config.expandable_segments is True
    assert config.pinned_use_cuda_host_register is True
    assert config.pinned_num_register_threads == 8
    assert config.release_lock_on_cudamalloc is True
    assert config.per_process_memory_fraction == 0.5


def test_single_roundup_value_applies_to_every_size():
    assert parse_alloc_conf("roundup_power2_divisions:4").roundup_power2_divisions == (4,) * 16


def test_roundup_list_leaves_unnamed_middle_buckets_at_zero():
    # '1' is bucket 0 and '64' bucket 6; buckets 1..5 are named by nobody and stay 0 (off),
    # exactly as PyTorch's parser leaves them.
    divisions = parse_alloc_conf("roundup_power2_divisions:[1:4,64:8,>:2]").roundup_power2_divisions
    assert divisions == (4, 0, 0, 0, 0, 0, 8) + (2,) * 9


def test_divisions_for_buckets_sizes_by_power_of_two_from_one_mib():
    config = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:4]")
    assert config.divisions_for(1000) == 1  # below 2 MiB: bucket 0
    assert config.divisions_for(300 * MiB) == 1  # [256, 512) MiB: bucket 8
    assert config.divisions_for(600 * MiB) == 2  # [512, 1024) MiB: bucket 9
    assert config.divisions_for(1600 * MiB) == 4  # bucket 10
    assert config.divisions_for(1 << 40) == 4  # past 32 GiB: the last bucket


def test_whitespace_is_ignored():
    config = parse_alloc_conf(" expandable_segments : True , max_split_size_mb : 512 ")
    assert config.expandable_segments is True
    assert config.max_split_size == 512 * MiB


def test_numbers_are_read_like_cpp_stoull_a_numeric_prefix_is_enough():
    assert parse_alloc_conf("max_split_size_mb:64abc").max_split_size == 64 * MiB


def test_large_segment_size_moves_the_floor_of_max_split_and_the_rounding_default():
    config = parse_alloc_conf("max_split_size_mb:64,large_segment_size_mb:64")
    assert config.large_segment_size == 64 * MiB
    assert config.max_non_split_rounding_size == 64 * MiB
    assert config.max_split_size == 64 * MiB
    with pytest.raises(AllocatorConfigError, match="max_split_size_mb too small, must be >= 64"):
        parse_alloc_conf("large_segment_size_mb:64,max_split_size_mb:32")


def test_max_non_split_rounding_mb():
    assert parse_alloc_conf("max_non_split_rounding_mb:30").max_non_split_rounding_size == \
        30 * MiB


def test_backend_cuda_malloc_async_is_a_flag():
    config = parse_alloc_conf("backend:cudaMallocAsync")
    assert config.backend_cuda_malloc_async is True
    assert config.warnings == ()
    assert parse_alloc_conf("backend:native").backend_cuda_malloc_async is False


def test_cuda_malloc_async_with_a_native_option_warns_as_pytorch_does():
    config = parse_alloc_conf("backend:cudaMallocAsync,pinned_use_cuda_host_register:True")
    assert config.warnings == ("backend:cudaMallocAsync ignores max_split_size_mb,"
                               "roundup_power2_divisions, and garbage_collect_threshold.",)


def test_keys_pytorch_accepts_but_the_model_ignores():
    config = parse_alloc_conf(
        "pinned_use_background_threads:True,pinned_reserve_segment_size_mb:64,"
        "graph_capture_record_stream_reuse:True,pinned_free_catch_all:True,"
        "throw_on_cudamalloc_oom:True,release_lock_on_hipmalloc:False,"
        "pinned_max_round_threshold_mb:1,pinned_max_cached_size_mb:2")
    assert config.pinned_use_background_threads is True
    assert config.pinned_reserve_segment_size_mb == 64
    assert config.throw_on_cudamalloc_oom is True
    assert config.pinned_max_round_threshold == 1 * MiB
    assert config.pinned_max_cached_size == 2 * MiB


@pytest.mark.parametrize("text, message", [
    ("foo:1",
     r"Unrecognized key 'foo' in CUDA allocator config\..*PYTORCH_CUDA_ALLOC_CONF='foo:1'"),
    ("expandable_segments:True,max_split:100",
     r"Unrecognized key 'max_split' in CUDA allocator config"),
    ("max_split_size_mb:10",
     r"max_split_size_mb too small, must be >= 20 \(key 'max_split_size_mb'\)"),
    ("max_non_split_rounding_mb:5", r"max_non_split_rounding_mb too small, must be >= 20"),
    ("large_segment_size_mb:10", r"large_segment_size_mb must be > 10 MB"),
    ("garbage_collection_threshold:1.5",
     r"garbage_collect_threshold is invalid, set it in \(0\.0, 1\.0\)"),
    ("garbage_collection_threshold:0", r"garbage_collect_threshold is invalid"),
    ("roundup_power2_divisions:3", r"divisions has to be power of 2"),
    ("roundup_power2_divisions:[256:3]", r"power of 2 or 0 to disable roundup"),
    ("roundup_power2_divisions:[300:2]", r"intervals have to be power of 2"),
    ("roundup_power2_divisions:[256:1", r"Index out of bounds|closing bracket"),
    ("expandable_segments:true",
     r"Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'"),
    ("max_split_size_mb:abc", r"stoull: no conversion of 'abc' \(key 'max_split_size_mb'\)"),
    ("max_split_size_mb", r"Index out of bounds in ConfigTokenizer"),
    ("backend:magic", r"Unknown allocator backend, options are native and cudaMallocAsync"),
    ("per_process_memory_fraction:1.5", r"per_process_memory_fraction is invalid"),
    ("pinned_num_register_threads:3", r"register threads has to be power of 2, got 3"),
    ("pinned_num_register_threads:256", r"less than or equal to 128, got 256"),
])
def test_pytorch_rejects_and_so_do_we(text, message):
    with pytest.raises(AllocatorConfigError, match=message):
        parse_alloc_conf(text)


def test_an_error_names_the_whole_text():
    with pytest.raises(AllocatorConfigError) as caught:
        parse_alloc_conf("expandable_segments:True,bogus_key:7")
    assert "bogus_key" in str(caught.value)
    assert "expandable_segments:True,bogus_key:7" in str(caught.value)
