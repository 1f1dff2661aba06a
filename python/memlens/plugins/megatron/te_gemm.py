"""Transformer Engine's GEMM workspace, for configurations that ask for Transformer Engine where
it is not installed (the layers' GEMMs then run in Megatron's local linear modules).

TE's linear modules (TELayerNormColumnParallelLinear, TERowParallelLinear, ... of the TE layer
spec) run every GEMM through `general_gemm` on TE's own cuBLASLt handle, with a workspace TE
allocates itself through PyTorch's caching allocator, so `torch.cuda.max_memory_allocated`
counts it. As TE 2.10 does it (`transformer_engine/pytorch/cpp_extensions/gemm.py`):
`get_cublas_workspace(device, ub=False, grouped_gemm=False)` is `functools.lru_cache`d, so one
workspace per device, made at the first GEMM (the first layer's forward), shared by forward and
backward and kept until the process exits, of `get_cublas_workspace_size_bytes()` bytes:
32 MiB + 1 KiB on compute capability 9.0 or newer (32 MiB before TE 2.10, whose extra KiB is
for NVFP4's alignment and scales), 4 MiB before Hopper. PyTorch's own cuBLAS workspaces (one per
thread's handle: kernels/cuda.py) are not taken by those GEMMs: a layer's matmuls take TE's
workspace instead. Megatron's modules outside the layer spec (the output layer, a
ColumnParallelLinear with TE too) still run on PyTorch's handles.

TE's grouped GEMM (`--moe-grouped-gemm` with TE's layers: TEGroupedMLP) takes its own
workspaces, `get_cublas_workspace(device, ub=False, grouped_gemm=True)`: one of the same size
per compute stream (`tex.get_num_cublas_streams()`, four), made at the first grouped GEMM and
kept, beside the one above. The stand-in for TE's GroupedLinear (grouped_linear.py) takes
those four at its first grouped GEMM (`take_grouped`).

Megatron's MoE router (moe_utils.RouterGatingLinearFunction) runs its GEMMs through TE's
`general_gemm` wherever TE is installed, with any layer spec (`--transformer-impl local` too):
where TE is absent here they run as that call does (`general_gemm`), taking TE's workspace, as
on a GPU machine with Megatron's container (TE installed). Megatron's CI measured it: its
local-spec MoE configurations hold 32 MiB + 1 KiB more on H100s than on A100s (4 MiB there).

With `--tp-comm-overlap`, the GEMMs TE overlaps with Userbuffers take three more in one tensor
(userbuffers.py).
"""

from __future__ import annotations

import functools

from ...patches import Patcher

TE_WORKSPACE_OP = "te_cublas_workspace"
TE_GROUPED_WORKSPACE_OP = "te_grouped_gemm_workspace"
GROUPED_GEMM_STREAMS = 4  # TE's nvte_get_num_compute_streams()
MARK = "memlens_te_gemm"
# Multi-latent attention's down projections: MLASelfAttention accepts only the classes it
# names (`in [Linear, TEColumnParallelLinear, ColumnParallelLinear]`), so they stay Megatron's
# own. Their GEMMs take PyTorch's cuBLAS workspaces, which the output layer's have made
# already (forward and backward), so nothing more is held.
MLA_CHECKED = frozenset({"linear_q_down_proj", "linear_kv_down_proj", "linear_qkv_down_proj"})


def workspace_bytes(cc_major: int) -> int:
    """TE 2.10's get_cublas_workspace_size_bytes()."""
    return 32 * 1024 * 1024 + 1024 if cc_major >= 9 else 4_194_304


@functools.cache
def te_gemm_class(cls: type) -> type:
    """`cls` (Megatron's ColumnParallelLinear or RowParallelLinear) marked as standing in for
    TE's linear: the same module, named as it is; its GEMMs take TE's workspace. TE's linear
    modules ignore `defer_embedding_wgrad_compute`, which only Megatron's output layer (given
    an activation buffer) acts on; Megatron's own linear would take it for itself and fail
    without that buffer."""

    def forward(self, *args, **kwargs):
        if not getattr(self.config, "defer_embedding_wgrad_compute", False):
            return cls.forward(self, *args, **kwargs)
        with Patcher.swapped(self.config, "defer_embedding_wgrad_compute", False):
            return cls.forward(self, *args, **kwargs)

    def backward_dw(self):
        """TE's deferred weight-gradient GEMM (`--delay-wgrad-compute`): these layers compute
        theirs in backward (grouped_linear.py says so in the report). Megatron 0.16's own
        linear layers have no such method; TE's have."""

    def __init__(self, *args, **kwargs):
        cls.__init__(self, *args, **kwargs)
        # which of TE's Userbuffers its GEMMs use (qkv, proj, fc1, fc2: userbuffers.py);
        # Megatron's own layers take the name and drop it
        self._memlens_ub_name = kwargs.get("tp_comm_buffer_name")

    return type(cls.__name__, (cls,), {
        "__module__": cls.__module__, "__qualname__": cls.__qualname__, MARK: True,
        "__init__": __init__, "forward": forward, "backward_dw": backward_dw,
        "__doc__": f"{cls.__name__}, standing in for Transformer Engine's linear module "
                   "(memlens/plugins/megatron/te_gemm.py): its GEMMs use TE's workspace."})


@functools.cache
def layer_norm_column_parallel_class() -> type:
    """TE's TELayerNormColumnParallelLinear (the norm fused into the linear module: a layer
    built from TE's spec has no norm of its own) as Megatron's norm, then its
    ColumnParallelLinear on TE's workspace: the same parameters, and for backward the input,
    the norm's statistics and the normalised input, as TE's LayerNormLinear saves."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    base = te_gemm_class(ColumnParallelLinear)

    class TELayerNormColumnParallelLinear(base):
        __doc__ = layer_norm_column_parallel_class.__doc__

        def __init__(self, input_size, output_size, *, config, **kwargs):
            super().__init__(input_size, output_size, config=config, **kwargs)
            self.layer_norm = WrappedTorchNorm(config=config, hidden_size=input_size,
                                               eps=config.layernorm_epsilon)

        def forward(self, x, *args, **kwargs):
            return super().forward(self.layer_norm(x), *args, **kwargs)

    return TELayerNormColumnParallelLinear


def use_te_gemms(spec) -> bool:
    """Mark every ColumnParallelLinear and RowParallelLinear of a layer spec (ModuleSpec tree)
    as TE's linear; True if one was found."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    from .spec_swap import swap_in_spec

    linears = (ColumnParallelLinear, RowParallelLinear)
    return swap_in_spec(spec, lambda value: te_gemm_class(value) if value in linears else None,
                        left=MLA_CHECKED)


def workspace(plugin, device):
    """TE's GEMM workspace on `device` (a Persistent: booked once, at its first GEMM)."""
    from ...kernels.cuda import device_key
    from ...kernels.plan import Persistent

    return Persistent(("te_cublas", device_key(device)), TE_WORKSPACE_OP,
                      workspace_bytes(plugin.tracer.device.major), device)


def take_workspace(plugin, device, module=None, weight_gradient: bool = False) -> None:
    """TE's GEMM workspace, taken (once per device) as its first GEMM does: for a GEMM of
    `module` that TE overlaps with its communication, the Userbuffers one (userbuffers.py)."""
    plugin.tracer.accountant.take_persistent(_workspace_for(plugin, device, module,
                                                            weight_gradient))


def take_in_current_module(plugin, device, weight_gradient: bool = False) -> None:
    """A GEMM of no matmul op (apex's fused weight-gradient kernel) in a layer standing in for
    TE's: TE's workspace, as its GEMM takes it."""
    module = _current_stand_in(plugin.tracer.modules)
    if module is not None:
        plugin.te_gemm(device, module, weight_gradient)


def _current_stand_in(modules):
    """The layer standing in for TE's linear that runs now (forward or backward), or None."""
    idx = modules.current()
    module = modules.infos[idx].module if idx >= 0 else None
    return module if getattr(module, MARK, False) else None


def _workspace_for(plugin, device, module, weight_gradient: bool):
    # TE's Userbuffers' own workspace for the GEMMs they overlap (set by userbuffers.py)
    own = plugin.userbuffers(device, module, weight_gradient) \
        if plugin.userbuffers is not None and module is not None else None
    return own if own is not None else workspace(plugin, device)


def general_gemm(plugin):
    """Megatron's `te_general_gemm` (TE's `general_gemm`, which Megatron's MoE router runs its
    GEMMs through wherever Transformer Engine is installed, whatever the layer spec:
    moe_utils.RouterGatingLinearFunction): D = op(B) @ op(A) for layouts TN, NN and NT, a new
    output of `out_dtype` (cuBLASLt reads bf16 and writes fp32 without a cast), on TE's
    workspace."""
    import torch

    def te_general_gemm(A, B, out_dtype=None, layout="TN", out=None, bias=None, grad=False):
        a = A.t() if layout[0] == "T" else A
        b = B.t() if layout[1] == "T" else B
        take_workspace(plugin, B.device)
        if out is None:
            out = torch.empty((b.shape[0], a.shape[1]), dtype=out_dtype or B.dtype,
                              device=B.device)
        return [out, None, None, None]

    return te_general_gemm


def take_grouped(plugin, device) -> None:
    """TE's grouped-GEMM workspaces, taken (once per device) as its first grouped GEMM does."""
    from ...kernels.cuda import device_key
    from ...kernels.plan import Persistent

    nbytes = workspace_bytes(plugin.tracer.device.major)
    for stream in range(GROUPED_GEMM_STREAMS):
        plugin.tracer.accountant.take_persistent(Persistent(
            ("te_cublas_grouped", device_key(device), stream), TE_GROUPED_WORKSPACE_OP, nbytes,
            device))


def install(plugin) -> None:
    """The layers' GEMMs (inside a marked module, forward or backward) take TE's one
    workspace per device instead of PyTorch's per-thread ones. A stand-in GEMM that makes its
    output without a matmul op (the FP8 linear's, fp8_linear.py) takes it itself
    (`plugin.te_gemm`)."""
    import torch

    tracer = plugin.tracer
    rules = getattr(tracer.workspaces, "cuda", None)
    if rules is None or getattr(rules.gemm_workspace, MARK, False):
        return
    modules = tracer.modules
    nbytes = workspace_bytes(tracer.device.major)

    def gemm_workspace(out):
        module = _current_stand_in(modules)
        if module is None:
            return None
        weight = getattr(module, "weight", None)  # a backward GEMM making the weight's gradient
        wgrad = weight is not None and torch._C._current_autograd_node() is not None and \
            tuple(out.shape) == tuple(weight.shape)
        return _workspace_for(plugin, out.device, module, wgrad)

    plugin.te_gemm = functools.partial(take_workspace, plugin)
    setattr(gemm_workspace, MARK, True)
    plugin.patcher.setattr(rules, "gemm_workspace", gemm_workspace)
    plugin.note("Transformer Engine is not installed here: the layers' GEMMs take TE's own "
                f"cuBLAS workspace ({nbytes:,} B per device, kept from the first GEMM), not "
                "PyTorch's per-thread ones (plugins/megatron/te_gemm.py)")
