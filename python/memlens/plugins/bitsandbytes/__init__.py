"""bitsandbytes (4-bit / 8-bit weights, 8-bit and paged optimizers) on a simulated GPU.

Activated when `bitsandbytes` is imported inside a trace; undone when the trace ends.

bitsandbytes' kernels are `torch.library` operators (`bitsandbytes::quantize_4bit`,
`dequantize_4bit`, `gemv_4bit`, `quantize_blockwise`, `optimizer_update_8bit_blockwise`, ...)
with fake implementations of their own (bitsandbytes/_ops.py): on fake tensors they allocate
exactly their outputs -- packed NF4/FP4 weights of numel/2 bytes, an fp32 absmax per block,
the dequantized weight of forward and backward -- and the accountant books them as it books
any op. What does not run on fake tensors, and what stands in for it here:

- `Params4bit` and `Int8Params` (nn/modules.py) are `nn.Parameter` subclasses made with
  `torch.Tensor._make_subclass(cls, data)`, which refuses a fake tensor (its storage already
  has a Python object, the FakeTensor). fake_params.py makes such a parameter a FakeTensor of a
  class that is both FakeTensor and the library's class: bitsandbytes sees its own parameter
  (attributes, `.cuda()` quantizing), the fake mode sees a fake tensor.
- A 4-bit weight's quantization state (absmax, with double quantization the uint8 absmax, its
  fp32 absmax per 256 and the offset; the 16-value code) is part of the weight: booked as
  parameter bytes of the weight's module, like the packed weight; so are an 8-bit weight's
  fp32 row scales (`Int8Params.SCB`).
- A 4-bit layer's forward (`gemm_4bit`) on CUDA dequantizes the weight into a temporary
  where bitsandbytes' heuristic prefers that to its fused kernel (kernels.py).
- Paged optimizer states (paged.py): `F.get_paged` asks the CUDA driver for managed memory
  through bitsandbytes' C library; `fill` and `prefetch_tensor` call it too.
"""

from __future__ import annotations

import functools
from types import ModuleType

from ... import categories as C
from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin
from .kernels import gemm_4bit_rule
from .fake_params import apply_keeping_fake_params, install_fake_params, tolerate_fake_bookkeeping
from .paged import install_paged


class Plugin(LibraryPlugin):
    watches = {"bitsandbytes.nn.modules": "modules", "bitsandbytes.functional": "functional",
               "bitsandbytes.backends.cuda.ops": "cuda_ops"}

    def modules(self, mod: ModuleType) -> None:
        _check_version()
        install_fake_params(self.patcher)
        tolerate_fake_bookkeeping(self.patcher, mod.Params4bit)
        for name in ("Linear4bit", "Linear8bitLt", "Embedding4bit", "Embedding8bit"):
            cls = getattr(mod, name, None)
            if cls is not None:
                self.patcher.setattr(cls, "_apply", apply_keeping_fake_params(cls._apply))
        classifier, modules = self.tracer.classifier, self.tracer.modules

        def book_quant_state(param) -> None:
            state = getattr(param, "quant_state", None)
            owner = getattr(param, "module", None)
            index = modules.index_of(owner) if owner is not None else None
            for t in _quant_state_tensors(state):
                classifier.mark(t, C.PARAMETER, index)

        original_int8 = mod.Int8Params._quantize

        @functools.wraps(original_int8)
        def quantize_int8(param, *args, **kwargs):
            out = original_int8(param, *args, **kwargs)
            # The int8 weight is the parameter's data; its fp32 row scales (SCB) belong to it.
            classifier.mark(getattr(param, "SCB", None), C.PARAMETER)
            return out

        self.patcher.setattr(mod.Int8Params, "_quantize", quantize_int8)
        for name in ("_quantize", "from_prequantized"):
            original = mod.Params4bit.__dict__[name]
            if isinstance(original, classmethod):
                function = original.__func__

                @functools.wraps(function)
                def from_prequantized(cls, *args, __original=function, **kwargs):
                    param = __original(cls, *args, **kwargs)
                    book_quant_state(param)
                    return param

                self.patcher.setattr(mod.Params4bit, name, classmethod(from_prequantized))
            else:
                @functools.wraps(original)
                def quantize(self, *args, __original=original, **kwargs):
                    param = __original(self, *args, **kwargs)
                    book_quant_state(param)
                    return param

                self.patcher.setattr(mod.Params4bit, name, quantize)

    def functional(self, mod: ModuleType) -> None:
        _check_version()
        install_paged(self.patcher, mod, self.tracer.add_note)

    def cuda_ops(self, mod: ModuleType) -> None:
        import torch

        # bitsandbytes 0.50 added `gemm_4bit` (MatMul4Bit's forward); before it, the forward
        # dequantizes the weight (`dequantize_4bit`) and multiplies, booked as any op.
        if self.tracer.device.type == "cuda" and hasattr(torch.ops.bitsandbytes, "gemm_4bit"):
            self.patcher.defer(self.tracer.workspaces.add_rule(
                torch.ops.bitsandbytes.gemm_4bit.default, gemm_4bit_rule(mod)))


def _quant_state_tensors(state):
    if state is None:
        return
    for attr in ("absmax", "code", "offset"):
        t = getattr(state, attr, None)
        if t is not None:
            yield t
    yield from _quant_state_tensors(getattr(state, "state2", None))


def _check_version() -> None:
    from importlib.metadata import version  # the package is still importing: no __version__

    check_tested("bitsandbytes", version("bitsandbytes"))
