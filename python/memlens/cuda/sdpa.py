"""Which kernel `F.scaled_dot_product_attention` runs on a CUDA GPU, and calling it.

A CPU-only build (and a CUDA build without a GPU) always decomposes SDPA into the math path,
which materialises the s x s scores. On a GPU, PyTorch picks a fused kernel by the rules of
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (`select_sdp_backend`): the first backend
in priority order that is enabled (`torch.backends.cuda.enable_*_sdp`, the `sdpa_kernel`
context) and whose constraints hold for the GPU's compute capability, the dtypes, head
dimensions, mask, dropout and GQA. We apply those rules, as torch 2.13's CUDA 13 wheel has them,
for the simulated GPU and call the chosen aten op, whose autograd formula then gives the
backward allocations of that kernel. What each kernel keeps for backward:
flash: out + fp32 logsumexp (b, h, s_q) + Philox seed/offset; efficient: out + fp32 logsumexp
(b, h, s_q rounded up to 32) + seed/offset; cuDNN: out + fp32 softmax stats (b, h, s_q, 1) +
seed/offset; math: the s_q x s_k scores, probabilities (and dropout mask).
"""

from __future__ import annotations

import os

import torch

MATH, FLASH, EFFICIENT, CUDNN = 0, 1, 2, 3  # torch._C._SDPBackend values
NAMES = {MATH: "math", FLASH: "flash", EFFICIENT: "efficient", CUDNN: "cudnn"}
BY_NAME = {name: backend for backend, name in NAMES.items()}
_TORCH_DEFAULT_ORDER = [FLASH, EFFICIENT, MATH, CUDNN]
_CUDNN_ORDER = [CUDNN, FLASH, EFFICIENT, MATH]
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def cudnn_deprioritized() -> bool:
    # c10::utils::check_env: "1"/"true"/"TRUE" are true.
    return os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "0") in ("1", "true", "TRUE")


def prefers_cudnn(cc: tuple[int, int]) -> bool:
    """`check_prefer_cudnn_attention`: a CUDA 13 build (cuDNN > 9.15) on any sm9x or sm10x GPU,
    unless TORCH_CUDNN_SDPA_DEPRIORITIZED is set."""
    return cc[0] in (9, 10) and not cudnn_deprioritized()


def priority_order(cc: tuple[int, int], pinned: int | None = None) -> list[int]:
    """The order backends are tried in. PyTorch sets cuDNN first at the first dispatch where
    it prefers cuDNN; a priority the script set with sdpa_kernel(..., set_priority=True) is
    kept. `pinned` (--sdpa-backend) goes first, before either."""
    order = [b for b in torch._C._get_sdp_priority_order() if b in NAMES]
    if order == _TORCH_DEFAULT_ORDER and prefers_cudnn(cc):
        order = list(_CUDNN_ORDER)
    if pinned is not None:
        order = [pinned] + [b for b in order if b != pinned]
    return order


def order_reason(cc: tuple[int, int], pinned: int | None) -> str:
    """Why the order is what it is, in a sentence for the report."""
    sm = f"sm{cc[0]}{cc[1]}"
    if pinned is not None:
        return (f"pinned to {NAMES[pinned]} by --sdpa-backend or the recipe's sdpa_backend "
                f"(the others where it cannot run)")
    if [b for b in torch._C._get_sdp_priority_order() if b in NAMES] != _TORCH_DEFAULT_ORDER:
        return "the priority the script set with sdpa_kernel(..., set_priority=True)"
    if cc[0] in (9, 10) and cudnn_deprioritized():
        return (f"flash first: TORCH_CUDNN_SDPA_DEPRIORITIZED=1 keeps torch's default order on "
                f"{sm}")
    if prefers_cudnn(cc):
        return (f"cuDNN first: torch {torch.__version__.split('+')[0]} built with CUDA 13 "
                f"prefers cuDNN attention on {sm} (check_prefer_cudnn_attention)")
    return f"flash first: torch's default order on {sm} (cuDNN is preferred on sm90/sm10x only)"


def enabled(backend: int) -> bool:
    c = torch._C
    return {MATH: c._get_math_sdp_enabled, FLASH: c._get_flash_sdp_enabled,
            EFFICIENT: c._get_mem_efficient_sdp_enabled, CUDNN: c._get_cudnn_sdp_enabled}[backend]()


def _sm_in(cc, low, high) -> bool:
    return low <= cc <= high


def _input_requires_grad(q, k, v) -> bool:
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


def _heads_ok(q, k, v, enable_gqa: bool, gqa_supported: bool) -> bool:
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        return False
    if q.shape[1] == k.shape[1] == v.shape[1]:
        return True
    return enable_gqa and gqa_supported and k.shape[1] == v.shape[1] and q.shape[1] % k.shape[1] == 0


def _flash_ok(q, k, v, mask, dropout_p, is_causal, enable_gqa, cc) -> bool:
    d = q.shape[-1]
    if _input_requires_grad(q, k, v) and (_sm_in(cc, (8, 6), (8, 9)) or _sm_in(cc, (12, 0), (12, 1))):
        # flash's backward has no kernel for these head sizes on sm86-89 / sm120-121
        if not (d <= 192 or (dropout_p == 0.0 and d > 224)):
            return False
    return (mask is None and q.dtype in _LOW_PRECISION and _sm_in(cc, (8, 0), (12, 1))
            and d == k.shape[-1] == v.shape[-1] and d <= 256
            and not (is_causal and q.shape[2] != k.shape[2])
            and _heads_ok(q, k, v, enable_gqa, gqa_supported=True))


def _efficient_ok(q, k, v, enable_gqa, cc) -> bool:
    half = q.dtype in _LOW_PRECISION
    if q.dtype not in (torch.float32, *_LOW_PRECISION) or (q.dtype == torch.bfloat16 and cc < (8, 0)):
        return False
    # minimum_gemm_alignment: tensor cores from sm80 (sm70 for fp16) want 128-bit rows
    align = (8 if half else 4) if cc >= (8, 0) else (8 if half and cc >= (7, 0) else 1)
    # q, k, v must start at an aligned address (check_data_ptr_alignment_mem_efficient).
    aligned = cc < (8, 0) or all(t.storage_offset() % align == 0 for t in (q, k, v))
    return (q.shape[-1] == k.shape[-1] and q.shape[-1] % align == 0 and v.shape[-1] % align == 0
            and _sm_in(cc, (5, 0), (12, 1)) and aligned and all(t.stride(-1) == 1 for t in (q, k, v))
            and _heads_ok(q, k, v, enable_gqa, gqa_supported=False))


def _cudnn_ok(q, k, v, mask, dropout_p, enable_gqa, cc) -> bool:
    d, d_v, s_q, s_k = q.shape[-1], v.shape[-1], q.shape[2], k.shape[2]
    # cuDNN's attention has no gradient for its bias (derivatives.yaml: attn_bias is not
    # differentiable), so a learned bias (T5's relative position bias) never runs on it.
    learned_bias = mask is not None and mask.requires_grad and torch.is_grad_enabled()
    deterministic = (torch.are_deterministic_algorithms_enabled()
                     and not torch.is_deterministic_algorithms_warn_only_enabled())
    return (q.dtype in _LOW_PRECISION and _sm_in(cc, (8, 0), (12, 1)) and d == k.shape[-1]
            and d % 8 == 0 and d_v % 8 == 0 and d <= 128 and d_v <= 128 and not learned_bias
            and not deterministic and dropout_p * 16.0 == int(dropout_p * 16.0)
            and q.shape[0] <= 65535 and q.shape[1] <= 65535 and s_k != 1
            and not (dropout_p > 0.0 and s_q == 1)
            and _heads_ok(q, k, v, enable_gqa, gqa_supported=True))


def usable(backend: int, q, k, v, mask, dropout_p, is_causal, enable_gqa, cc) -> bool:
    """Whether `backend`'s constraints hold for these inputs (enabled or not)."""
    if backend == MATH:
        return True
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or q.shape[2] == 0 or k.shape[2] == 0:
        return False
    if any(t.stride(-1) != 1 and t.shape[-1] != 1 for t in (q, k, v)):
        return False
    if backend == FLASH:
        return _flash_ok(q, k, v, mask, dropout_p, is_causal, enable_gqa, cc)
    if backend == EFFICIENT:
        return _efficient_ok(q, k, v, enable_gqa, cc)
    return _cudnn_ok(q, k, v, mask, dropout_p, enable_gqa, cc)


def select_backend(q, k, v, mask, dropout_p, is_causal, enable_gqa, cc,
                   pinned: int | None = None) -> int:
    """The backend PyTorch would run for these inputs on a GPU of compute capability `cc`."""
    for backend in priority_order(cc, pinned):
        if enabled(backend) and usable(backend, q, k, v, mask, dropout_p, is_causal, enable_gqa, cc):
            return backend
    raise RuntimeError("No available kernel. Aborting execution. (memlens: no SDPA backend "
                       "enabled in sdpa_kernel() accepts these inputs on the simulated GPU)")


class SdpaLog:
    """What the trace's attention calls ran on, for the report and the snapshot."""

    def __init__(self, cc: tuple[int, int], pinned: str | None = None):
        self.cc = cc
        self.pinned = BY_NAME[pinned] if pinned else None
        self.calls: dict[str, int] = {}
        self.order: list[int] | None = None  # at the first call
        self.reason = ""
        self.disabled: set[str] = set()  # backends the script turned off (enable_*_sdp, sdpa_kernel)
        self.pin_fell_through = 0  # calls the pinned backend could not take

    def record(self, backend: int) -> None:
        if self.order is None:
            self.order = priority_order(self.cc, self.pinned)
            self.reason = order_reason(self.cc, self.pinned)
        name = NAMES[backend]
        self.calls[name] = self.calls.get(name, 0) + 1
        self.disabled.update(NAMES[b] for b in NAMES if not enabled(b))
        if self.pinned is not None and backend != self.pinned:
            self.pin_fell_through += 1

    def to_json(self) -> dict | None:
        if self.order is None:
            return None
        return {"calls": dict(self.calls), "order": [NAMES[b] for b in self.order],
                "reason": self.reason, "pinned": NAMES[self.pinned] if self.pinned is not None else None,
                "disabled_by_script": sorted(self.disabled), "pin_fell_through": self.pin_fell_through}

    def note(self) -> str | None:
        if self.order is None:
            return None
        ran = ", ".join(f"{n} ({c} call{'s' if c != 1 else ''})" for n, c in
                        sorted(self.calls.items(), key=lambda kv: -kv[1]))
        text = f"attention (SDPA) ran on {ran}: {self.reason}"
        if self.disabled:
            text += f"; the script turned off {', '.join(sorted(self.disabled))}"
        if self.pin_fell_through:
            text += (f"; {self.pin_fell_through} call(s) the pinned backend cannot take ran on the "
                     f"next in order")
        return text + "."


def _as_bias(mask, q, k):
    """The additive bias the efficient and cuDNN kernels take (a bool mask becomes -inf where
    False), broadcast to (batch, heads, q, k)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros_like(mask, dtype=q.dtype).masked_fill_(~mask, float("-inf"))
    return mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def run(backend: int, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, math):
    """Call the chosen kernel; `math` is the original F.scaled_dot_product_attention."""
    if backend == FLASH:
        return torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    need_lse = _input_requires_grad(q, k, v)
    if backend == EFFICIENT:
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, _as_bias(mask, q, k), need_lse, dropout_p, is_causal, scale=scale)[0]
    if backend == CUDNN:
        return torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, k, v, _as_bias(mask, q, k), need_lse, dropout_p, is_causal, False, scale=scale)[0]
    return math(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                enable_gqa=enable_gqa)
