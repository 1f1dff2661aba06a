"""Megatron's Mamba layers (hybrid and Mamba models) without `mamba_ssm`, a CUDA package.

Megatron's MambaMixer trains through `mamba_split_conv1d_scan_combined` (the memory-efficient
path, `use_mamba_mem_eff_path`, on by default) and normalises with mamba_ssm's gated RMSNorm;
without mamba_ssm it refuses to build ("MambaSSM is not installed"). The stand-ins below hold
what mamba_ssm's Triton kernels hold, as written in mamba_ssm (commit 0048fbf, which
Megatron-LM core_v0.19.0 pins; unchanged at e9594ce) and causal-conv1d 1.6: each kernel's
outputs and intermediates at their shapes and dtypes, allocated and freed in the kernels'
order, and what each autograd Function saves. Their values are not computed (a trace has none).

    ssd_combined.py  MambaSplitConv1dScanCombinedFn, _mamba_chunk_scan_combined_fwd/_bwd
    layernorm_gated.py  LayerNormFn (RMSNorm, norm_before_gate=False, no z on this path)
    causal_conv1d_interface.py  causal_conv1d_fwd/bwd_function (inside the split Function)

Names: b batch, L sequence, H heads, P head dimension, G groups, N state size, C chunk size,
c = ceil(L / C) chunks. The unfused path (`--disable-mamba-mem-eff-path`, which Megatron calls
untested for training) is refused by name.
"""

from __future__ import annotations

import math
from types import ModuleType

import torch

from ...errors import MemlensError

F32 = torch.float32


def _sm_count(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _chunk_scan_fwd(x_dtype, b, L, H, P, G, N, C, device, state_dtype):
    """_mamba_chunk_scan_combined_fwd with z given (the split Function's gate): returns (out,
    out_x, dt_out, dA_cumsum, passed states, final states); the chunk states and CB are freed
    inside it."""
    c = math.ceil(L / C)
    dt_out = torch.empty(b, H, c, C, dtype=F32, device=device)  # _chunk_cumsum_fwd
    dA_cumsum = torch.empty(b, H, c, C, dtype=F32, device=device)
    states = torch.empty(b, c, H, P, N, dtype=F32, device=device)  # _chunk_state_fwd
    passed = torch.empty(b, c, H, P * N, dtype=state_dtype, device=device)  # _state_passing_fwd
    final = torch.empty(b, H, P * N, dtype=F32, device=device)
    del states
    cb = torch.empty(b, c, G, C, C, dtype=F32, device=device)  # _bmm_chunk_fwd
    out = torch.empty(b, L, H, P, dtype=x_dtype, device=device)  # _chunk_scan_fwd
    out_x = torch.empty(b, L, H, P, dtype=x_dtype, device=device)  # before the gate
    del cb
    return out, out_x, dt_out, dA_cumsum, passed, final


def _chunk_scan_bwd(x_dtype, b, L, H, P, G, N, C, device, state_dtype):
    """_mamba_chunk_scan_combined_bwd with its gradient outputs given (the split Function
    passes views of its own buffers): every intermediate, in the kernels' order. Returns the
    small gradients (dA, ddt_bias: fp32; dD)."""
    c = math.ceil(L / C)
    splits = max(1, math.ceil((H // G) / max(min(math.ceil(b * c * H / _sm_count(device)),
                                                 H // G), 1)))
    dt_in = torch.empty(b, L, H, dtype=x_dtype, device=device)  # dt.clone()
    dA_cumsum = torch.empty(b, H, c, C, dtype=F32, device=device)  # recomputed
    dt = torch.empty(b, H, c, C, dtype=F32, device=device)
    cb = torch.empty(b, c, G, C, C, dtype=F32, device=device)
    states = torch.empty(b, c, H, P, N, dtype=F32, device=device)
    passed = torch.empty(b, c, H, P * N, dtype=F32, device=device)  # no out_dtype: fp32
    final = torch.empty(b, H, P * N, dtype=F32, device=device)
    del final, states
    dD_z = torch.empty(math.ceil(C / 32), b, c, H, 1, dtype=F32, device=device)  # _bwd_dz
    dD_z = dD_z.sum(dim=(0, 1, 2, 4))
    dout_x = torch.empty(b, L, H, P, dtype=x_dtype, device=device)
    dstates = torch.empty(b, c, H, P, N, dtype=F32, device=device)  # _chunk_scan_bwd_dstates
    dstates_passed = torch.empty(b, c, H, P * N, dtype=state_dtype, device=device)
    states_converted = torch.empty(b, c, H, P * N, dtype=state_dtype, device=device)
    ddA_chunk = torch.empty(b, H, c, math.ceil(P * N / 64), dtype=F32, device=device).sum(-1)
    del passed, dstates
    dD = torch.zeros(math.ceil(C / 32), b, c, H, 1, dtype=F32, device=device)  # _bwd_dx
    dD = dD.sum(dim=(0, 1, 2, 4)).to(x_dtype)
    ddt = torch.empty(b, H, c, C, dtype=F32, device=device)
    ddA_next = torch.empty(b, H, c, C, dtype=F32, device=device)  # _chunk_state_bwd_db
    dB = torch.empty(b, L, splits, G, N, dtype=F32, device=device).sum(2)
    ddA_prev = torch.empty(b, H, c, C, dtype=F32, device=device)  # _chunk_scan_bwd_dC
    dC = torch.empty(b, L, splits, G, N, dtype=F32, device=device).sum(2)
    dcb = torch.empty(b, c, splits, G, C, C, dtype=F32, device=device).sum(2)  # _bwd_dcb
    del dB, dC, dcb, cb, dstates_passed, states_converted  # into the given dB, dC (bmm bwd)
    ddA_prev = ddA_prev.flip([-1]).cumsum(dim=-1).flip([-1])
    ddA = torch.empty(b, H, c, math.ceil(C / 32), C, dtype=F32, device=device).sum(-2)
    ddA += ddA_next + ddA_prev
    del ddA_next, ddA_prev, ddA_chunk, dt_in, dout_x, dA_cumsum, dt, ddt, ddA, dD_z
    dA = torch.empty(H, dtype=F32, device=device)  # _chunk_cumsum_bwd
    ddt_bias = torch.empty(H, dtype=F32, device=device)
    return dA, ddt_bias, dD


class SplitConv1dScanCombined(torch.autograd.Function):
    """mamba_ssm's MambaSplitConv1dScanCombinedFn on Megatron's path (no RMSNorm or output
    projection inside, no initial states): saves the input and the pre-gate output only;
    backward recomputes the convolution and the chunked scan."""

    @staticmethod
    def forward(ctx, zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size, headdim,
                ngroups, state_dtype):
        b, L, width = zxbcdt.shape
        H = A.shape[0]
        P = headdim
        dc = conv1d_weight.shape[0]  # the convolved x, B, C: H P + 2 G N
        N = (dc - H * P) // (2 * ngroups)
        assert width == H * P + dc + H, "zxbcdt is z, xBC, dt"
        xbc_conv = torch.empty(b, L, dc, dtype=zxbcdt.dtype, device=zxbcdt.device)
        out, out_x, *rest = _chunk_scan_fwd(zxbcdt.dtype, b, L, H, P, ngroups, N, chunk_size,
                                            zxbcdt.device, state_dtype)
        del xbc_conv, rest
        ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias)
        ctx.sizes = (b, L, H, P, ngroups, N, chunk_size, state_dtype)
        return out.view(b, L, H * P)

    @staticmethod
    def backward(ctx, dout):
        zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias = ctx.saved_tensors
        b, L, H, P, G, N, C, state_dtype = ctx.sizes
        device, dtype = zxbcdt.device, zxbcdt.dtype
        dc = conv1d_weight.shape[0]
        xbc_conv = torch.empty(b, L, dc, dtype=dtype, device=device)  # recomputed
        dzxbcdt = torch.empty_like(zxbcdt)  # dz and ddt are views of it
        dxbc = torch.empty(b, L, dc, dtype=dtype, device=device)  # dx, dB, dC are views
        dA, ddt_bias, dD = _chunk_scan_bwd(dtype, b, L, H, P, G, N, C, device, state_dtype)
        del xbc_conv
        dweight = torch.zeros(conv1d_weight.shape, dtype=F32, device=device)  # conv bwd
        dbias = torch.zeros(conv1d_bias.shape, dtype=F32, device=device)
        dweight, dbias = dweight.to(conv1d_weight.dtype), dbias.to(conv1d_bias.dtype)
        del dxbc
        return (dzxbcdt, dweight, dbias, ddt_bias.to(dt_bias.dtype), dA.to(A.dtype),
                dD.to(D.dtype), None, None, None, None)


def mamba_split_conv1d_scan_combined(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D,
                                     chunk_size, initial_states=None, seq_idx=None,
                                     dt_limit=(0.0, float("inf")), return_final_states=False,
                                     activation="silu", rmsnorm_weight=None, rmsnorm_eps=1e-6,
                                     outproj_weight=None, outproj_bias=None, headdim=None,
                                     ngroups=1, norm_before_gate=True, state_dtype=None):
    """mamba_ssm.ops.triton.ssd_combined.mamba_split_conv1d_scan_combined, as Megatron's
    training step calls it (its signature, with `state_dtype`, which Megatron looks for)."""
    unsupported = {"initial_states": initial_states, "seq_idx (packed sequences)": seq_idx,
                   "rmsnorm_weight": rmsnorm_weight, "outproj_weight": outproj_weight}
    named = [name for name, value in unsupported.items() if value is not None]
    if named or return_final_states or headdim is None:
        raise MemlensError("memlens' stand-in for mamba_ssm's mamba_split_conv1d_scan_combined "
                           "models Megatron's training call only; this one passes "
                           f"{', '.join(named or ['return_final_states or D per channel'])}: "
                           "install mamba_ssm to trace it")
    return SplitConv1dScanCombined.apply(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D,
                                         chunk_size, headdim, ngroups,
                                         state_dtype or zxbcdt.dtype)


def mamba_chunk_scan_combined(*args, **kwargs):
    raise MemlensError("Megatron's unfused Mamba path (--disable-mamba-mem-eff-path) calls "
                       "mamba_ssm's mamba_chunk_scan_combined, which memlens' stand-in does not "
                       "model: trace without the flag (the default, memory-efficient path), or "
                       "install mamba_ssm")


class _GatedRMSNormFn(torch.autograd.Function):
    """mamba_ssm's LayerNormFn as an RMSNorm without z (Megatron gates inside the scan):
    out and per-row-and-group fp32 rstd; saves x, the weight and rstd."""

    @staticmethod
    def forward(ctx, x, weight, group_size):
        rows = x.numel() // x.shape[-1]
        groups = x.shape[-1] // group_size
        out = torch.empty_like(x)
        rstd = torch.empty(groups * rows, dtype=F32, device=x.device)
        ctx.save_for_backward(x, weight, rstd)
        ctx.groups = groups
        return out

    @staticmethod
    def backward(ctx, dout):
        x, weight, rstd = ctx.saved_tensors
        dx = torch.empty_like(x)
        width = x.shape[-1]
        group_size = width // ctx.groups
        block = min(65536 // x.element_size(), 1 << max(group_size - 1, 0).bit_length())
        warps = min(max(block // 256, 1), 8)
        row_groups = math.ceil(_sm_count(x.device) * math.ceil(4 / warps) / ctx.groups)
        dw = torch.empty(row_groups, width, dtype=F32, device=x.device).sum(0).to(weight.dtype)
        return dx, dw, None


def gated_rms_norm_class() -> type:
    """mamba_ssm.ops.triton.layernorm_gated.RMSNorm: a weight of `hidden_size`, normalised in
    groups of `group_size`."""

    class GatedRMSNorm(torch.nn.Module):
        def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True,
                     device=None, dtype=None):
            super().__init__()
            self.eps, self.norm_before_gate = eps, norm_before_gate
            self.group_size = group_size or hidden_size
            self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device,
                                                        dtype=dtype))
            self.register_parameter("bias", None)

        def forward(self, x, z=None):
            if z is not None:
                raise MemlensError("memlens' stand-in for mamba_ssm's gated RMSNorm models "
                                   "Megatron's training call (no z): install mamba_ssm")
            return _GatedRMSNormFn.apply(x, self.weight, self.group_size)

    return GatedRMSNorm


def mamba_mixer(plugin, mod: ModuleType) -> None:
    """Stand in for mamba_ssm where it is not installed (Megatron then left None and a
    MagicMock in the module): the mixer's kernels and its norm class."""
    if getattr(mod, "HAVE_MAMBA_SSM", True) or not hasattr(mod, "MambaMixer"):
        return
    norm = gated_rms_norm_class()
    norm.__name__ = norm.__qualname__ = "ExtendedRMSNorm"
    for name, value in (("HAVE_MAMBA_SSM", True), ("MAMBA_HAS_STATE_DTYPE", True),
                        ("RMSNormGated", norm), ("ExtendedRMSNorm", norm),
                        ("mamba_split_conv1d_scan_combined", mamba_split_conv1d_scan_combined),
                        ("mamba_chunk_scan_combined", mamba_chunk_scan_combined)):
        # 0.16 leaves the kernels undefined and has no MAMBA_HAS_STATE_DTYPE (no state_dtype)
        if name != "MAMBA_HAS_STATE_DTYPE" or hasattr(mod, name):
            plugin.patcher.setattr(mod, name, value)
    plugin.note("mamba_ssm is not installed here: Megatron's Mamba layers ran memlens' "
                "stand-ins for its kernels (the memory-efficient split convolution and chunked "
                "scan, the gated RMSNorm), which allocate and save what mamba_ssm's Triton "
                "kernels do")


PATCHES = {
    "megatron.core.ssm.mamba_mixer": mamba_mixer,
}
