"""Transformer Engine's Userbuffers (Megatron's `--tp-comm-overlap`) where TE is not installed:
what TE 2.10 holds for them, outside PyTorch's allocator and in it.

Megatron-LM's `_initialize_tp_communicators` (megatron/training/initialize.py) calls TE's
`initialize_ub(shape=[seq_length * micro_batch_size // context_parallel_size, hidden_size],
tp_size, quantization_modes, ub_cfgs)` and stops without TE ("needs 'yaml' and
'transformer_engine' packages"). The stand-in holds what that call leaves behind
(`pytorch/module/base.py` and `common/comm_gemm_overlap/` at TE 2.10):

- Outside PyTorch's allocator (cuMemCreate for multicast, or cudaMalloc): one communication
  buffer per GEMM (qkv, proj, fc1 and fc2; fprop, dgrad and wgrad: twelve) and quantization
  mode (FP8 or none; both where Megatron keeps the first or last layers in BF16), each of the
  shape above, uint8 where the mode is FP8 and the GEMM all-gathers (or a pipelined one the
  configuration gives an FP8 buffer), else BF16 (Megatron passes no dtype); a ring-exchange
  reduce-scatter buffer holds (2 tp - 1) / tp of that. Besides them, once a process, the
  communicator's own region (3,223,808 B) and its flags (128 KiB). Each region is rounded up
  to 2 MiB, the usual allocation granularity on Hopper (the driver reports it at run time).
  They are lines of the snapshot's memory outside the allocator, with that basis.
- In PyTorch's allocator: the GEMM workspace of the overlapped GEMMs, one tensor of three
  cuBLAS workspaces (one per overlap stream: 3 x (32 MiB + 1 KiB) on compute capability 9.0
  or newer, 3 x 4 MiB before), made at the first overlapped GEMM and kept
  (`get_cublas_workspace(device, ub=True)`), beside TE's usual workspace, which the GEMMs
  without Userbuffers take (the weight gradients of the row-parallel layers, proj and fc2).
  Every other GEMM of the four layers is overlapped with Megatron's defaults.
- In the layers, under FP8 (fp8_linear.py): the column-parallel ones (qkv, fc1) gather their
  input into the buffer instead of a new tensor, in forward and again in backward, where the
  data-gradient GEMM writes its [rows, hidden] output into the buffer too (the
  reduce-scattered result is a new tensor, as without overlap). In BF16 the stand-in layers
  are Megatron's own, whose gathers use Megatron's global buffer, which the output layer
  keeps in a real run too; their backward's [rows, hidden] data gradient and the row-parallel
  layers' gathered output gradient are booked though TE writes them into the buffer (one
  [rows, hidden] tensor at a time, for the length of one GEMM).
"""

from __future__ import annotations

import functools

from .te_gemm import workspace_bytes as te_workspace_bytes

MiB = 1 << 20
GRANULARITY = 2 * MiB  # cuMemGetAllocationGranularity on Hopper, as commonly reported
REGION_0 = 3_223_808  # userbuffers.h: LOCALSIZE, the communicator's flags and peer pointers
FLAGS = 2 * 64 * 1024  # create_communicator_grouped2: flags_baseptr
UB_STREAMS = 3  # _NUM_MAX_UB_STREAMS
UB_WORKSPACE_OP = "te_ub_cublas_workspace"
LAYERS = ("qkv", "proj", "fc1", "fc2")  # Megatron's tp_comm_buffer_name values

# TE 2.10's initialize_ub: each GEMM's default method, and which all-gather / reduce-scatter
_METHODS = {"ring_exchange": ["qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad"],
            "pipeline": ["proj_fprop", "fc2_fprop"],
            "bulk": ["qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad"],
            "external": ["proj_wgrad", "fc2_wgrad"]}
_ALL_GATHER = ["qkv_fprop", "qkv_dgrad", "proj_dgrad", "proj_wgrad", "fc1_fprop", "fc1_dgrad",
               "fc2_dgrad", "fc2_wgrad"]
_REDUCE_SCATTER = ["proj_fprop", "fc2_fprop", "qkv_wgrad", "fc1_wgrad"]


def buffers(shape: tuple[int, int], tp_size: int, fp8_modes: list[bool],
            ub_cfgs: dict | None) -> list[tuple[str, bool, int]]:
    """(GEMM name, FP8 mode, bytes before rounding) of each communication buffer TE's
    initialize_ub makes, a user's configuration (`--tp-comm-overlap-cfg`) applied as TE
    applies it."""
    methods = {k: list(v) for k, v in _METHODS.items()}
    all_gather, reduce_scatter = list(_ALL_GATHER), list(_REDUCE_SCATTER)
    user = ub_cfgs or {}
    for name in ("qkv_dgrad", "fc1_dgrad"):  # a data gradient reduce-scattered instead
        method = user.get(name, {}).get("method", "bulk")
        if method != "bulk":
            reduce_scatter.remove(name.replace("dgrad", "wgrad"))
            all_gather.remove(name)
            reduce_scatter.append(name)
            methods["bulk"].remove(name)
            methods[method].append(name)
    rows, hidden = shape
    out = []
    for fp8 in fp8_modes:
        for method, names in methods.items():
            for name in names:
                cfg = {"method": method, "is_reduce_scatter": name in reduce_scatter,
                       "fp8_buf": name in all_gather}
                if name in user:
                    cfg.update(user[name])
                    cfg["fp8_buf"] = name in all_gather or (
                        user[name].get("fp8_buf", False) and name in methods["pipeline"])
                size = 1 if fp8 and cfg["fp8_buf"] else 2
                nbytes = rows * hidden * size
                if cfg["method"] == "ring_exchange" and cfg["is_reduce_scatter"]:
                    nbytes = nbytes // tp_size * (2 * tp_size - 1)
                out.append((name, fp8, nbytes))
    return out


def rounded(nbytes: int) -> int:
    return -(-nbytes // GRANULARITY) * GRANULARITY


def outside_item(shape, tp_size: int, fp8_modes: list[bool], ub_cfgs: dict | None):
    """(OutsideItem, short basis): the buffers and the communicator's own memory."""
    from ...allocator.outside import OutsideItem

    made = buffers(shape, tp_size, fp8_modes, ub_cfgs)
    total = sum(rounded(n) for _, _, n in made) + rounded(REGION_0) + FLAGS
    modes = " and ".join("FP8" if fp8 else "BF16" for fp8 in fp8_modes)
    listed = ", ".join(f"{name}{' (FP8)' if fp8 and len(fp8_modes) > 1 else ''} "
                       f"{n:,} B" for name, fp8, n in made)
    basis = (f"Transformer Engine 2.10's initialize_ub as Megatron calls it: {len(made)} "
             f"communication buffers of shape [{shape[0]}, {shape[1]}] ({modes}; {listed}), "
             f"each rounded up to {GRANULARITY // MiB} MiB (the allocation granularity the "
             "driver reports on Hopper, assumed), the communicator's region "
             f"({REGION_0:,} B, rounded likewise) and flags ({FLAGS:,} B); cuMemCreate or "
             "cudaMalloc, outside PyTorch's allocator")
    return (OutsideItem("Userbuffers (TE's TP comm+GEMM overlap)", total, basis),
            f"{len(made)} buffers of [{shape[0]}, {shape[1]}], {modes}; approximate")


def workspace_bytes(cc_major: int) -> int:
    """get_cublas_workspace(device, ub=True): three of TE's workspaces in one tensor."""
    return UB_STREAMS * te_workspace_bytes(cc_major)


def workspace(plugin, device):
    """The overlapped GEMMs' workspace on `device` (a Persistent: booked once, when the
    first overlapped GEMM runs)."""
    from ...kernels.cuda import device_key
    from ...kernels.plan import Persistent

    return Persistent(("te_ub_cublas", device_key(device)), UB_WORKSPACE_OP,
                      workspace_bytes(plugin.tracer.device.major), device)


def _workspace_if_overlapped(plugin, device, module, weight_gradient: bool):
    return workspace(plugin, device) if overlapped(plugin, module, weight_gradient) else None


def overlapped(plugin, module, weight_gradient: bool) -> bool:
    """A GEMM of `module` (a stand-in for TE's linear) that TE runs with Userbuffers: every
    GEMM of Megatron's qkv, proj, fc1 and fc2 layers once they are initialised, but the
    row-parallel layers' weight gradients (proj, fc2) and an expert's."""
    if plugin.userbuffers is None or getattr(module, "_memlens_ub_name", None) not in LAYERS:
        return False
    if getattr(module, "is_expert", False):
        return False
    return not (weight_gradient and module._memlens_ub_name in ("proj", "fc2"))


def initialize(plugin, mod) -> None:
    """Megatron-LM's `_initialize_tp_communicators`, where TE is absent: its configuration
    read as Megatron reads it, TE's buffers noted outside the allocator, the layers'
    overlapped GEMMs on TE's Userbuffers workspace."""
    if not hasattr(mod, "_initialize_tp_communicators") or _have_te():
        return

    def initialize_tp_communicators():
        import torch
        import yaml
        from megatron.training import get_args

        from ...kernels.cuda import device_key

        args = get_args()
        ub_cfgs = {}
        if args.tp_comm_overlap_cfg is not None:
            with open(args.tp_comm_overlap_cfg) as stream:
                ub_cfgs = yaml.safe_load(stream) or {}
        seq = args.decoder_seq_length if getattr(args, "decoder_tp_comm_overlap", False) \
            else args.seq_length
        shape = (seq * args.micro_batch_size // args.context_parallel_size, args.hidden_size)
        fp8_modes = [args.fp8 is not None]
        if args.fp8 is not None and getattr(args, "first_last_layers_bf16", False) and (
                getattr(args, "num_layers_at_start_in_bf16", 0) > 0
                or getattr(args, "num_layers_at_end_in_bf16", 0) > 0):
            fp8_modes.append(False)
        device = device_key(torch.device("cuda", torch.cuda.current_device()))
        item, short = outside_item(shape, args.tensor_model_parallel_size, fp8_modes, ub_cfgs)
        plugin.tracer.outside.append((device, item, short))
        plugin.userbuffers = functools.partial(_workspace_if_overlapped, plugin)
        plugin.note("--tp-comm-overlap without Transformer Engine: TE's Userbuffers are "
                    "memory outside PyTorch's allocator, their GEMMs take TE's Userbuffers "
                    f"workspace ({workspace_bytes(plugin.tracer.device.major):,} B, kept from "
                    "the first); BF16 layers' data gradients stay booked where TE writes them "
                    "into the buffers (plugins/megatron/userbuffers.py)")

    plugin.replace(mod, "_initialize_tp_communicators", initialize_tp_communicators)


@functools.cache
def _have_te() -> bool:
    from importlib.util import find_spec

    return find_spec("transformer_engine") is not None
