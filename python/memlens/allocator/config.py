"""PYTORCH_CUDA_ALLOC_CONF, read the way PyTorch 2.13 reads it.

PyTorch parses the string twice, with one tokenizer (c10/core/AllocatorConfig.h,
`ConfigTokenizer`): `CUDAAllocatorConfig::parseArgs` (c10/cuda/CUDAAllocatorConfig.cpp) takes the
CUDA-only keys, `AcceleratorAllocatorConfig::parseArgs` (c10/core/AllocatorConfig.cpp) the shared
ones; each skips the other's keys and rejects a key neither knows. The CUDA pass runs first when the
allocator starts (`DeviceCachingAllocator` asks for `per_process_memory_fraction` before anything
else), so its message is the one a user sees for an unknown key. We walk the tokens with the same
index arithmetic, including its leniencies: `checkToken` only *compares* (a missing ':' or ',' is
not an error by itself), and numbers are read with C++ `stoull`/`stod`, which accept a numeric
prefix ("64abc" is 64).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MiB = 1024 * 1024
SIZE_MAX = 2**64 - 1  # std::numeric_limits<size_t>::max(): "no limit"
ROUNDUP_INTERVALS = 16  # divisions for sizes 1 MiB .. 32 GiB and above, one per power of two
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc


class AllocatorConfigError(ValueError):
    """The configuration string is one PyTorch would refuse; the message says why and where."""


@dataclass(frozen=True)
class AllocatorConfig:
    """The allocator settings the model obeys. Sizes are bytes; SIZE_MAX means unlimited."""

    max_split_size: int = SIZE_MAX
    max_non_split_rounding_size: int = 20 * MiB  # defaults to large_segment_size
    large_segment_size: int = 20 * MiB  # kLargeBuffer unless large_segment_size_mb is set
    garbage_collection_threshold: float = 0.0
    # 16 entries: divisions for [0, 2 MiB), [2, 4) MiB, ... , [32 GiB, inf); 0 or 1 = plain 512 B.
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    expandable_segments: bool = False
    backend_cuda_malloc_async: bool = False
    per_process_memory_fraction: float = 1.0
    # Accepted and kept so a report can echo them; they change nothing the model computes.
    release_lock_on_cudamalloc: bool = False
    pinned_use_cuda_host_register: bool = False
    pinned_num_register_threads: int = 1
    pinned_use_background_threads: bool = False
    pinned_reserve_segment_size_mb: int = 0
    pinned_max_round_threshold: int = SIZE_MAX
    pinned_max_cached_size: int = SIZE_MAX
    pinned_free_catch_all: bool = False
    graph_capture_record_stream_reuse: bool = False
    throw_on_cudamalloc_oom: bool = False
    text: str = ""
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def divisions_for(self, size: int) -> int:
        """`AcceleratorAllocatorConfig::roundup_power2_divisions(size)`: bucket by power of two."""
        log_size = size.bit_length() - 1
        index = max(log_size - 20, 0)  # intervals start at 1 MiB = 2**20
        return self.roundup_power2_divisions[min(index, ROUNDUP_INTERVALS - 1)]


# Keys each pass owns (2.13's AcceleratorAllocatorConfig::getMutableKeys and
# CUDAAllocatorConfig::getKeys); a key outside both sets is refused.
ACCELERATOR_KEYS = frozenset({
    "large_segment_size_mb", "max_split_size_mb", "max_non_split_rounding_mb",
    "garbage_collection_threshold", "roundup_power2_divisions", "expandable_segments",
    "pinned_use_background_threads", "pinned_max_round_threshold_mb", "pinned_max_cached_size_mb",
})
CUDA_KEYS = frozenset({
    "backend", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
    "release_lock_on_hipmalloc", "pinned_use_hip_host_register",
    "graph_capture_record_stream_reuse", "pinned_reserve_segment_size_mb",
    "pinned_num_register_threads", "per_process_memory_fraction", "pinned_free_catch_all",
    "throw_on_cudamalloc_oom",
})
ALL_KEYS = ACCELERATOR_KEYS | CUDA_KEYS


class _Tokens:
    """c10's ConfigTokenizer: ',' ':' '[' ']' are tokens of their own; whitespace is dropped."""

    def __init__(self, text: str):
        self.text = text
        self.items: list[str] = []
        buf = ""
        for ch in text:
            if ch in ",:[]":
                if buf:
                    self.items.append(buf)
                    buf = ""
                self.items.append(ch)
            elif not ch.isspace():
                buf += ch
        if buf:
            self.items.append(buf)

    def __len__(self) -> int:
        return len(self.items)

    def error(self, message: str, key: str | None = None) -> AllocatorConfigError:
        where = f" (key '{key}')" if key else ""
        return AllocatorConfigError(f"{message}{where} in PYTORCH_CUDA_ALLOC_CONF={self.text!r}")

    def at(self, i: int, key: str | None = None) -> str:
        if i >= len(self.items):  # TORCH_INTERNAL_ASSERT in checkIndex
            raise self.error("Index out of bounds in ConfigTokenizer", key)
        return self.items[i]

    def size_t(self, i: int, key: str) -> int:
        return _stoull(self.at(i, key), self, key)

    def double(self, i: int, key: str) -> float:
        return _stod(self.at(i, key), self, key)

    def boolean(self, i: int, key: str) -> bool:
        token = self.at(i, key)
        if token not in ("True", "False"):
            raise self.error(f"Expected 'True' or 'False' at index {i} in ConfigTokenizer but "
                             f"got '{token}'", key)
        return token == "True"

    def skip_key(self, i: int) -> int:
        """Index of the key's value, or of the ']' closing a list value."""
        key = self.items[i]
        self.at(i + 1, key)  # the ':' (compared, never enforced)
        i += 2
        if self.at(i, key) != "[":
            return i
        i += 1
        while i < len(self.items) and self.items[i] != "]":
            i += 1
        if i >= len(self.items):
            raise self.error("Expected closing bracket ']' in ConfigTokenizer but reached end "
                             "of config", key)
        return i


_INT_PREFIX = re.compile(r"[+-]?\d+")
_FLOAT_PREFIX = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)",
                           re.IGNORECASE)


def _stoull(token: str, tokens: _Tokens, key: str) -> int:
    """std::stoull: a decimal prefix; a minus sign wraps modulo 2**64 as C++ does."""
    m = _INT_PREFIX.match(token)
    if not m:
        raise tokens.error(f"stoull: no conversion of '{token}'", key)
    value = int(m.group())
    if abs(value) > SIZE_MAX:
        raise tokens.error(f"stoull: '{token}' out of range", key)
    return value % 2**64


def _stod(token: str, tokens: _Tokens, key: str) -> float:
    m = _FLOAT_PREFIX.match(token)
    if not m:
        raise tokens.error(f"stod: no conversion of '{token}'", key)
    return float(m.group())


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def parse_alloc_conf(text: str | None) -> AllocatorConfig:
    """Parse a PYTORCH_CUDA_ALLOC_CONF value; raise AllocatorConfigError where PyTorch would."""
    if not text:
        return AllocatorConfig()
    tokens = _Tokens(text)
    values: dict = {"text": text}
    warnings: list[str] = []
    native_option_used = _parse_cuda_keys(tokens, values)
    _parse_accelerator_keys(tokens, values)
    if values.get("backend_cuda_malloc_async") and native_option_used:
        # PyTorch's own wording; in 2.13 only the CUDA-pass keys set the flag that triggers it.
        warnings.append("backend:cudaMallocAsync ignores max_split_size_mb,"
                        "roundup_power2_divisions, and garbage_collect_threshold.")
    return AllocatorConfig(**values, warnings=tuple(warnings))


def _parse_cuda_keys(tokens: _Tokens, values: dict) -> bool:
    """CUDAAllocatorConfig::parseArgs; answers whether a native-only CUDA option was given."""
    native_option_used = False
    i = 0
    while i < len(tokens):
        key = tokens.items[i]
        if key == "backend":
            i += 2
            backend = tokens.at(i, key)
            if backend not in ("native", "cudaMallocAsync"):
                raise tokens.error("Unknown allocator backend, options are native and "
                                   "cudaMallocAsync", key)
            values["backend_cuda_malloc_async"] = backend == "cudaMallocAsync"
        elif key in CUDA_KEYS:
            i = _parse_cuda_option(tokens, i, key, values)
            native_option_used = True
        else:
            if key not in ALL_KEYS:
                raise tokens.error(f"Unrecognized key '{key}' in CUDA allocator config.", key)
            i = tokens.skip_key(i)
        i = i + 2 if i + 1 < len(tokens) else i + 1  # step over the ',' (not enforced)
    return native_option_used


def _parse_cuda_option(tokens: _Tokens, i: int, key: str, values: dict) -> int:
    i += 2  # past the key and its ':'
    if key in ("release_lock_on_cudamalloc", "release_lock_on_hipmalloc"):
        values["release_lock_on_cudamalloc"] = tokens.boolean(i, key)
    elif key in ("pinned_use_cuda_host_register", "pinned_use_hip_host_register"):
        values["pinned_use_cuda_host_register"] = tokens.boolean(i, key)
    elif key == "pinned_num_register_threads":
        n = tokens.size_t(i, key)
        if not _is_pow2(n):
            raise tokens.error(f"Number of register threads has to be power of 2, got {n}", key)
        if n > 128:
            raise tokens.error("Number of register threads should be less than or equal to "
                               f"128, got {n}", key)
        values["pinned_num_register_threads"] = n
    elif key == "pinned_reserve_segment_size_mb":
        n = tokens.size_t(i, key)
        if n == 0:
            raise tokens.error("Pinned reserve segment size has to be greater than 0", key)
        values["pinned_reserve_segment_size_mb"] = n
    elif key == "per_process_memory_fraction":
        fraction = tokens.double(i, key)
        if not 0.0 <= fraction <= 1.0:
            raise tokens.error("per_process_memory_fraction is invalid, set it in [0.0, 1.0]",
                               key)
        values["per_process_memory_fraction"] = fraction
    else:  # graph_capture_record_stream_reuse, pinned_free_catch_all, throw_on_cudamalloc_oom
        values[key] = tokens.boolean(i, key)
    return i


def _parse_accelerator_keys(tokens: _Tokens, values: dict) -> None:
    """AcceleratorAllocatorConfig::parseArgs: large_segment_size_mb first, then the rest."""
    i = 0
    while i < len(tokens):  # the first walk visits every token, not only keys
        if tokens.items[i] == "large_segment_size_mb":
            n = tokens.size_t(i + 2, "large_segment_size_mb")
            if n <= MIN_LARGE_ALLOC // MiB:
                raise tokens.error("CachingAllocator option large_segment_size_mb must be > "
                                   f"{MIN_LARGE_ALLOC // MiB} MB", "large_segment_size_mb")
            values["large_segment_size"] = min(n, SIZE_MAX // MiB) * MiB
            i += 2
        i += 1
    large = values.get("large_segment_size", AllocatorConfig.large_segment_size)
    values["max_non_split_rounding_size"] = large

    i = 0
    while i < len(tokens):
        key = tokens.items[i]
        if key == "large_segment_size_mb":
            i = tokens.skip_key(i)
        elif key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            n = tokens.size_t(i + 2, key)
            if n < large // MiB:
                raise tokens.error(f"CachingAllocator option {key} too small, must be >= "
                                   f"{large // MiB}", key)
            field_name = "max_split_size" if key == "max_split_size_mb" else \
                "max_non_split_rounding_size"
            values[field_name] = min(n, SIZE_MAX // MiB) * MiB
            i += 2
        elif key == "garbage_collection_threshold":
            threshold = tokens.double(i + 2, key)
            if not 0.0 < threshold < 1.0:
                raise tokens.error("garbage_collect_threshold is invalid, set it in (0.0, 1.0)",
                                   key)
            values["garbage_collection_threshold"] = threshold
            i += 2
        elif key == "roundup_power2_divisions":
            i = _parse_roundup(tokens, i, values)
        elif key in ("expandable_segments", "pinned_use_background_threads"):
            values[key] = tokens.boolean(i + 2, key)
            i += 2
        elif key in ("pinned_max_round_threshold_mb", "pinned_max_cached_size_mb"):
            values[key[:-3]] = min(tokens.size_t(i + 2, key), SIZE_MAX // MiB) * MiB
            i += 2
        else:
            if key not in ALL_KEYS:
                raise tokens.error(f"Unrecognized key '{key}' in Accelerator allocator config.",
                                   key)
            i = tokens.skip_key(i)
        i = i + 2 if i + 1 < len(tokens) else i + 1


def _parse_roundup(tokens: _Tokens, i: int, values: dict) -> int:
    """Either one number for every size, or `[256:1,512:2,>:4]` (boundaries in MiB)."""
    key = "roundup_power2_divisions"
    divisions = [0] * ROUNDUP_INTERVALS
    i += 2
    if tokens.at(i, key) != "[":
        n = tokens.size_t(i, key)
        if not _is_pow2(n):
            raise tokens.error("For roundups, the divisions has to be power of 2 ", key)
        values[key] = (n,) * ROUNDUP_INTERVALS
        return i
    first_value, last_index = True, 0
    i += 1
    while i < len(tokens) and tokens.items[i] != "]":
        boundary_index = i
        tokens.at(i + 1, key)  # the ':' between boundary and value (compared only)
        i += 2
        n = tokens.size_t(i, key)
        if n != 0 and not _is_pow2(n):
            raise tokens.error("For roundups, the divisions has to be power of 2 or 0 to "
                               "disable roundup ", key)
        if tokens.items[boundary_index] == ">":
            for j in range(last_index + 1, ROUNDUP_INTERVALS):
                divisions[j] = n
        else:
            boundary = tokens.size_t(boundary_index, key)
            if not _is_pow2(boundary):
                raise tokens.error("For roundups, the intervals have to be power of 2 ", key)
            index = min(boundary.bit_length() - 1, ROUNDUP_INTERVALS - 1)
            if first_value:  # sizes below the first boundary take its value too
                divisions[:index] = [n] * index
                first_value = False
            divisions[index] = n
            last_index = index
        if tokens.at(i + 1, key) != "]":
            i += 1  # the ',' (compared only)
        i += 1
    if i >= len(tokens):
        raise tokens.error("Expected closing bracket ']' in ConfigTokenizer but reached end of "
                           "config", key)
    values[key] = tuple(divisions)
    return i
