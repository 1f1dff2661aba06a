"""torchao's float8 training (`convert_to_float8_training`): FP8 copies of weights and their
scales are the "fp8 weights/scales" subcategory of parameters.

Activated when `torchao` starts to be imported. Every FP8 tensor torchao makes is a
`Float8TrainingTensor`, a wrapper whose bytes are its inner `_data` (FP8) and `_scale` (fp32:
one scalar per tensor, or one per row); the accountant books those inner storages only. A
wrapper made with the weight role (the cast of a weight for the forward GEMM, its recast in
backward, FSDP2's FP8 shard before the all-gather and the unsharded weight after it) marks its
data and scale as FP8 weights. `precompute_float8_dynamic_scale_for_fsdp` keeps one fp32 scale
per weight until the next forward: marked too. Casts of inputs and gradients are temporaries,
and what autograd saves (torchao saves the high-precision input and weight) activations, as
for any op. Nothing else changes: the ops run as torchao runs them.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType

from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin


class Plugin(LibraryPlugin):
    watches = {"torchao.float8.float8_training_tensor": "training_tensor",
               "torchao.float8.fsdp_utils": "fsdp_utils"}

    def training_tensor(self, mod: ModuleType) -> None:
        import torchao

        check_tested("torchao_float8", torchao.__version__)
        cls, weight_role = mod.Float8TrainingTensor, mod.GemmInputRole.WEIGHT
        original_new = cls.__dict__["__new__"].__func__  # a staticmethod in the class body
        mark_fp8 = self.tracer.classifier.mark_fp8

        @functools.wraps(original_new)
        def new(klass, data, scale, *args, **kwargs):
            t = original_new(klass, data, scale, *args, **kwargs)
            if t._gemm_input_role is weight_role:
                mark_fp8(data)
                mark_fp8(scale)
            return t

        self.patcher.setattr(cls, "__new__", staticmethod(new))

    def fsdp_utils(self, mod: ModuleType) -> None:
        original = mod.precompute_float8_dynamic_scale_for_fsdp
        mark_fp8 = self.tracer.classifier.mark_fp8

        @functools.wraps(original)
        def precompute_float8_dynamic_scale_for_fsdp(module):
            original(module)
            for p in module.parameters():
                local = getattr(p, "_local_tensor", p)
                mark_fp8(getattr(local, "_precomputed_scale", None))

        # Bound by name in torchao.float8 (its __init__ runs after this module's body).
        self.patcher.replace_everywhere(
            mod, "precompute_float8_dynamic_scale_for_fsdp",
            precompute_float8_dynamic_scale_for_fsdp,
            lambda: [m for name, m in list(sys.modules.items())
                     if name.startswith("torchao") and m is not None])
