"""DeepSpeed (ZeRO stages 0-3, offload, its optimizers) traced unmodified on a simulated GPU.

Activated when `deepspeed` is imported inside a trace. DeepSpeed's own code runs: its engine,
ZeRO's flat buffers and partitions, buckets and prefetching, `deepspeed.comm` over the
simulated rank's fake process group. What is replaced is what needs the CUDA platform rather
than torch: the JIT-compiled ops (op_builders.py). Patches are applied as DeepSpeed's modules
are imported and undone when the trace ends.
"""

from __future__ import annotations

import functools
from types import ModuleType

from ...errors import MemlensError
from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin
from . import op_builders, zero_states


class Plugin(LibraryPlugin):
    watches = {"deepspeed.ops.op_builder.builder": "op_builder",
               "deepspeed.runtime.zero.utils": "zero_utils",
               "deepspeed.runtime.zero.stage_1_and_2": "optimizer_wrapper",
               "deepspeed.runtime.zero.stage3": "optimizer_wrapper",
               "deepspeed.runtime.bf16_optimizer": "optimizer_wrapper",
               "deepspeed.runtime.fp16.fused_optimizer": "optimizer_wrapper",
               "deepspeed.runtime.fp16.unfused_optimizer": "optimizer_wrapper",
               "deepspeed.comm.comm": "comm"}

    def comm(self, mod: ModuleType) -> None:
        """`deepspeed.init_distributed()` (which `deepspeed.initialize` calls) runs on the
        simulated rank's fake process group. Without a simulated rank there is none, and
        DeepSpeed would look for MPI (mpi4py) to find one: a clear error instead."""
        version = _version()
        original = mod.init_distributed
        tracer = self.tracer

        @functools.wraps(original)
        def init_distributed(*args, **kwargs):
            import torch.distributed as dist

            if tracer.rank is None and not (dist.is_available() and dist.is_initialized()):
                raise MemlensError(
                    f"DeepSpeed {version}: deepspeed.init_distributed() (also called by "
                    "deepspeed.initialize) needs a process group, and this trace simulates "
                    "no distributed job: give memlens --world-size N (--world-size 1 for one "
                    "GPU) and --rank R, or trace the `deepspeed`/`torchrun` launch line "
                    "(--from-script)")
            return original(*args, **kwargs)

        self.patcher.setattr(mod, "init_distributed", init_distributed)

    def op_builder(self, mod: ModuleType) -> None:
        version = _version()
        add_note = self.tracer.add_note
        loaded: dict[str, object] = {}

        def load(builder, verbose=False):
            if builder.name not in loaded:
                loaded[builder.name] = op_builders.stand_in(builder.name, version)
                add_note(f"DeepSpeed: the {builder.name} op is a memlens stand-in (never "
                         "compiled; it allocates what the kernel allocates)")
            return loaded[builder.name]

        self.patcher.setattr(mod.OpBuilder, "load", load)

    def optimizer_wrapper(self, mod: ModuleType) -> None:
        """A ZeRO stage's or a 16-bit optimizer's module: its wrapper is named by the module's
        last part (zero_states._BUFFERS: stage_1_and_2, stage3, bf16_optimizer, ...)."""
        _version()
        zero_states.patch(self, mod, mod.__name__.rsplit(".", 1)[1])

    def zero_utils(self, mod: ModuleType) -> None:
        """ZeRO-3 checks at each step that every rank traced the same submodule order: rank 0's
        list length is broadcast and read back with `.item()`, a value a trace does not have.
        Every rank of a simulated job is this process running the same script, so rank 0's list
        is this rank's own: the checks pass, as they do on a healthy job."""
        _version()
        for name in ("assert_ints_same_as_other_ranks", "assert_lst_len_same_as_other_ranks"):
            self.patcher.setattr(mod, name, _agrees)


def _agrees(values) -> None:
    return None


def _version() -> str:
    from importlib.metadata import version

    v = version("deepspeed")
    check_tested("deepspeed", v)
    return v
