"""Memory CUDA libraries take on their own during an op, as PyTorch 2.13 takes it.

cuBLAS workspace. Every matmul-family op asks at::cuda::getCurrentCUDABlasHandle() for the
calling thread's handle (aten/src/ATen/cuda/CublasHandlePool.cpp). On the first use of a
(handle, stream) pair, setWorkspaceForHandle allocates getChosenWorkspaceSize() bytes through
the caching allocator and keeps them until the process exits; cuBLASLt shares that workspace
(TORCH_CUBLASLT_UNIFIED_WORKSPACE defaults to on). The op's output is allocated before the GEMM
runs, so the workspace comes right after it. Handles are per thread: forward and the optimizer
run on the main thread, backward on autograd's device thread, so a training step takes two
workspaces, and a matmul on another stream (torch.cuda.stream(s)) one more per thread and
stream. Not modelled: the separate cuBLASLt workspace of TORCH_CUBLASLT_UNIFIED_WORKSPACE=0
(CUBLASLT_WORKSPACE_SIZE, 1 MiB by default). A library that runs a GEMM on a cuBLAS handle and
workspace of its own (Transformer Engine) takes that instead: `CudaRules.gemm_workspace`, which
a plugin standing in for the library sets.

NCCL. Communicators (and their buffers, outside the caching allocator) are created per process
group at its first operation; the rules note, per device, which groups ran a collective (ring
connections) or sent to / received from which peers, and the report sizes the buffers
(allocator/nccl.py).
"""

from __future__ import annotations

import functools

import torch

from ..allocator.outside import cublas_workspace_bytes
from ..cuda.streams import STREAMS
from . import logsumexp
from .plan import Persistent

aten = torch.ops.aten
CUBLAS_WORKSPACE_OP = "cublas_workspace"
# Ops whose CUDA kernels are cuBLAS / cuBLASLt calls (matmul, linear and their backward
# decompose into these before they reach a dispatch mode).
CUBLAS_OPS = ("mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot",
              "_addmm_activation", "_scaled_mm", "_int_mm")
COLLECTIVE_NAMESPACES = frozenset({"c10d", "_c10d_functional", "c10d_functional"})


def _overloads(names) -> set:
    funcs = set()
    for name in names:
        packet = getattr(aten, name, None)
        if packet is not None:
            funcs.update(getattr(packet, o) for o in packet.overloads())
    return funcs


def _first_tensor(obj) -> torch.Tensor | None:
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, (tuple, list)):
        for item in obj:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def device_key(device: torch.device) -> str:
    return f"{device.type}:{device.index if device.index is not None else 0}"


class CudaRules:
    def __init__(self, spec=None):
        self.capability = (spec.major, spec.minor) if spec is not None else (9, 0)
        self._cublas_ops = _overloads(CUBLAS_OPS)
        # device -> process group -> {name, ranks, ring, send, recv}: NCCL's communicators
        self.communicators: dict[str, dict[str, dict]] = {}
        # A plugin's library GEMMs: (the op's output) -> the library's own workspace (a
        # Persistent) for a matmul-family op run now inside one of its stand-ins, or None
        # (PyTorch's handle).
        self.gemm_workspace = None

    def persistent_rule(self, func):
        if func in self._cublas_ops:
            return self._cublas_workspace
        if func.namespace in COLLECTIVE_NAMESPACES:
            return self._collective(func)
        return None

    def _cublas_workspace(self, args, kwargs, out) -> list[Persistent]:
        t = _first_tensor(out)
        if t is None or t.device.type != "cuda":
            return []
        if self.gemm_workspace is not None:
            own = self.gemm_workspace(t)
            if own is not None:  # the library's handle: PyTorch's is not used
                return [own]
        # Backward runs on autograd's device thread, which has a cuBLAS handle of its own.
        thread = "backward" if torch._C._current_autograd_node() is not None else "main"
        # Read when first needed: the traced script's CUBLAS_WORKSPACE_CONFIG.
        nbytes = cublas_workspace_bytes(*self.capability)
        stream = STREAMS.current_id(t.device.index or 0)  # one workspace per (handle, stream)
        return [Persistent(("cublas", device_key(t.device), thread, stream), CUBLAS_WORKSPACE_OP,
                           nbytes, t.device)]

    def _collective(self, func):
        name = func._schema.name.partition("::")[2]
        direction = {"send": "send", "recv_": "recv", "recv_any_source_": "recv"}.get(name)
        peer_index = next((i for i, a in enumerate(func._schema.arguments)
                           if a.name in ("dst", "src", "dstRank", "srcRank")), None)

        def rule(args, kwargs, out) -> list[Persistent]:
            t = _first_tensor(out)
            if t is None:  # not `or`: the truth value of a tensor is an error
                t = _first_tensor(args)
            if t is None or t.device.type != "cuda":
                return []
            group = _process_group(args)
            if group is None:
                return []
            use = self.communicators.setdefault(device_key(t.device), {}).setdefault(
                getattr(group, "group_name", None) or id(group),
                {"name": _group_name(group), "ranks": group.size(), "ring": False,
                 "send": set(), "recv": set()})
            if direction is None:
                use["ring"] = True
            elif peer_index is not None and peer_index < len(args):
                use[direction].add(int(args[peer_index]))
            return []

        return rule


def _process_group(args):
    """The process group an op runs on: a c10d op's ProcessGroup argument (a ScriptObject in
    dispatch), or a functional collective's group name."""
    import torch.distributed as dist

    for a in args:
        if isinstance(a, torch.ScriptObject):
            try:
                return dist.ProcessGroup.unbox(a)
            except (RuntimeError, TypeError):
                continue
        if isinstance(a, dist.ProcessGroup):
            return a
    name = next((a for a in reversed(args) if isinstance(a, str)), None)
    if name is not None:
        try:
            return dist.distributed_c10d._resolve_process_group(name)
        except (KeyError, RuntimeError, ValueError):
            return None
    return None


def _group_name(group) -> str:
    """How a report names a group: its description (a device mesh's `mesh_dp`), else its id."""
    import torch.distributed as dist

    if group is dist.GroupMember.WORLD:
        return "default"
    desc = getattr(group, "group_desc", None)
    if desc and desc != "undefined":
        return desc
    return f"group {getattr(group, 'group_name', '?')}"


def _round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


def _dense_backward_sizes(b: int, h: int, h_k: int, s_q: int, s_k: int, d: int,
                          element_size: int) -> list[int]:
    """FlashAttention-2's mha_bwd (aten/src/ATen/native/transformers/cuda/flash_attn/
    flash_api.cpp) allocates, after dq/dk/dv: softmax_d (fp32, batch x heads x seqlen_q rounded
    to 128), dq_accum (fp32, batch x seqlen_q rounded x heads x head size rounded to 32, or 64
    above 128; `loop` is always true there) and, for grouped-query attention, dk/dv expanded to
    all query heads. All are freed when the op returns (softmax_d is dropped by the aten op)."""
    head = _round_up(d, 8)
    head_rounded = _round_up(head, 32 if head <= 128 else 64)
    s_q_rounded = _round_up(s_q, 128)
    sizes = [b * h * s_q_rounded * 4, b * s_q_rounded * h * head_rounded * 4]
    if h_k != h:
        sizes += [b * s_k * h * head * element_size] * 2
    return sizes


def _flash_backward(args, kwargs, out) -> list[int]:
    """SDPA's FlashAttention-2 backward: its inputs are (batch, heads, seqlen, head size)."""
    query, key = args[1], args[2]  # args[0] is grad_out
    b, h, s_q, d = query.shape
    return _dense_backward_sizes(b, h, key.shape[1], s_q, key.shape[2], d,
                                 query.element_size())


def _flash_attention_backward(args, kwargs, out) -> list[int]:
    """`aten::_flash_attention_backward` called directly (flash-attn's layout: batch, seqlen,
    heads, head size), or on packed sequences (total, heads, head size) with cumulative
    lengths: mha_varlen_bwd's softmax_d (fp32, heads x (total_q + 128 x batch)), dq_accum
    (fp32, (total_q + 128 x batch) x heads x head size rounded) and, for grouped-query
    attention, dk/dv expanded to (total_k x heads x head size)."""
    query, key, cum_seq_q = args[1], args[2], args[6]
    if cum_seq_q is None or cum_seq_q.numel() == 0:
        b, s_q, h, d = query.shape
        return _dense_backward_sizes(b, h, key.shape[2], s_q, key.shape[1], d,
                                     query.element_size())
    total_q, h, d = query.shape
    total_k, h_k = key.shape[0], key.shape[1]
    batch = cum_seq_q.numel() - 1
    head = _round_up(d, 8)
    head_rounded = _round_up(head, 32 if head <= 128 else 64)
    rows = total_q + 128 * batch
    sizes = [h * rows * 4, rows * h * head_rounded * 4]
    if h_k != h:
        sizes += [total_k * h * head * query.element_size()] * 2
    return sizes


def flash_num_splits(batch_heads_m_blocks: int, num_sms: int, n_blocks: int,
                     max_splits: int = 128) -> int:
    """FlashAttention-2's num_splits_heuristic (flash_api.cpp): the fewest key/value splits
    that reach 85 % of the best wave efficiency, none when the blocks almost fill the SMs."""
    if batch_heads_m_blocks >= 0.8 * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, n_blocks)

    def eligible(n: int) -> bool:  # one more split that gives the same blocks per split is none
        return n == 1 or -(-n_blocks // n) != -(-n_blocks // (n - 1))

    efficiency = {}
    for n in range(1, max_splits + 1):
        if eligible(n):
            waves = batch_heads_m_blocks * n / num_sms
            efficiency[n] = waves / -(-waves // 1)
    best = max(efficiency.values(), default=0.0)
    return next((n for n, e in efficiency.items() if e >= 0.85 * best), 1)


def _splitkv_sizes(sm_count: int, b: int, h: int, s_q: int, s_k: int, d: int) -> list[int]:
    """mha_fwd (flash_api.cpp) splits the keys when the batch leaves SMs idle and dropout is off
    (set_params_splitkv): fp32 partial results per split, softmax_lse_accum (splits x b x h x
    s_q) and out_accum (splits x b x h x s_q x head size rounded to 32, or 64 above 128),
    freed when the op returns. The heuristic counts 2 x the SMs (128 threads per block)."""
    head = _round_up(d, 8)
    head_rounded = _round_up(head, 32 if head <= 128 else 64)
    block_n = 256 if head <= 64 else (128 if head <= 128 else 64)
    splits = flash_num_splits(b * h * -(-s_q // 64), 2 * sm_count, -(-s_k // block_n))
    if splits <= 1:
        return []
    return [splits * b * h * s_q * 4, splits * b * h * s_q * head_rounded * 4]


def _flash_forward(sm_count: int, args, kwargs, out) -> list[int]:
    """SDPA's FlashAttention-2 forward: (batch, heads, seqlen, head size) inputs."""
    query, key, dropout_p = args[0], args[1], args[3] if len(args) > 3 else 0.0
    if dropout_p > 0.0:
        return []
    b, h, s_q, d = query.shape
    return _splitkv_sizes(sm_count, b, h, s_q, key.shape[2], d)


def _flash_attention_forward(sm_count: int, args, kwargs, out) -> list[int]:
    """`aten::_flash_attention_forward` called directly: on (batch, seqlen, heads, head size)
    it is mha_fwd, which may split the keys; on packed sequences it is mha_varlen_fwd, which
    splits only when decoding (one query per sequence)."""
    query, key, cum_seq_q, dropout_p = args[0], args[1], args[3], args[7]
    if dropout_p > 0.0 or cum_seq_q is not None:
        return []
    b, s_q, h, d = query.shape
    return _splitkv_sizes(sm_count, b, h, s_q, key.shape[1], d)


SCALED_MM_REFUSED = ("torch._scaled_mm is only supported on CUDA devices with compute capability "
                     ">= 9.0 or 8.9, or ROCm MI300+")


def _scaled_mm(capability: tuple[int, int], args, kwargs, out) -> list[int]:
    """FP8 GEMM (ScaledBlas.cpp, _scaled_mm_out_cuda). The GPU must have FP8 tensor cores: below
    compute capability 8.9 the kernel refuses with this message (the Meta kernel checks no
    device). Otherwise it takes nothing but its output (the Meta kernel's M x N of out_dtype)
    and the cuBLAS workspace: tensorwise scaling, and rowwise on cuBLAS >= 12.9 (the CUDA 13.0
    build memlens simulates), are cuBLASLt calls on the shared workspace. Not modelled: with an
    older cuBLAS (CUDA 12.8 builds), rowwise runs CUTLASS,
    which pads scale_a to a multiple of 256 rows (M x 4 bytes, freed in the op) when M is not
    one, and asks a zero-byte workspace of its persistent kernel."""
    if capability < (8, 9):
        raise RuntimeError(SCALED_MM_REFUSED)
    return []


CUDA_RULES = {aten._scaled_dot_product_flash_attention_backward.default: _flash_backward,
              aten._flash_attention_backward.default: _flash_attention_backward,
              aten.logsumexp.default: logsumexp.cuda}


def cuda_rules(spec) -> dict:
    """CUDA_RULES with the rules that depend on the device (its SM count, its capability)."""
    sm_count = spec.sm_count if spec is not None else 132
    capability = (spec.major, spec.minor) if spec is not None else (9, 0)
    return {**CUDA_RULES, aten._scaled_dot_product_flash_attention.default:
            functools.partial(_flash_forward, sm_count),
            aten._flash_attention_forward.default:
            functools.partial(_flash_attention_forward, sm_count),
            aten._scaled_mm.default: functools.partial(_scaled_mm, capability),
            aten._scaled_mm.out: functools.partial(_scaled_mm, capability)}
