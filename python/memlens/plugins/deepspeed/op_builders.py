"""Stand-ins for DeepSpeed's compiled ops, in place of its op builders' JIT compilation.

DeepSpeed builds its kernels on first use (`OpBuilder.load()` -> `torch.utils.cpp_extension.
load`, nvcc and CUDA_HOME). A trace has no compiler and needs no arithmetic: each stand-in is a
module with the built extension's functions that allocates what the kernel allocates
(read from DeepSpeed's csrc/) and computes nothing, since tensors are fake.

- fused_adam (csrc/adam/multi_tensor_adam.cu) and fused_lion: multi-tensor apply updates the
  parameters and states in place; nothing of their own.
- cpu_adam, cpu_adagrad, cpu_lion (csrc/adam/cpu_adam_impl.cpp, ...): host loops over the
  tensors' data pointers, in place; nothing of their own.
- fused_lamb (csrc/lamb/fused_lamb_cuda.cpp): two 512-element reduction buffers and the
  1-element coefficient it returns, float (fp16 parameters) or the parameter's dtype.

Any other op DeepSpeed asks for is refused with an error naming it.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch


def _nothing(*args, **kwargs) -> None:
    return None


def _lamb(p, p_copy, m, v, g, *scalars):
    dtype = torch.float32 if p.dtype == torch.float16 else p.dtype
    torch.empty(512, dtype=dtype, device=p.device)  # w_l2_i, freed when the kernel returns
    torch.empty(512, dtype=dtype, device=p.device)  # u_l2_i
    return torch.empty(1, dtype=dtype, device=p.device)  # lamb_coeff_val


STAND_INS = {
    "fused_adam": SimpleNamespace(multi_tensor_adam=_nothing),
    "fused_lion": SimpleNamespace(multi_tensor_lion=_nothing),
    "fused_lamb": SimpleNamespace(lamb=_lamb),
    "cpu_adam": SimpleNamespace(create_adam=_nothing, adam_update=_nothing,
                                adam_rollback=_nothing, destroy_adam=_nothing),
    "cpu_adagrad": SimpleNamespace(create_adagrad=_nothing, adagrad_update=_nothing,
                                   destroy_adagrad=_nothing),
    "cpu_lion": SimpleNamespace(create_lion=_nothing, lion_update=_nothing,
                                destroy_lion=_nothing),
}


def stand_in(name: str, version: str):
    """The stand-in module of DeepSpeed op `name`, or an error naming the op."""
    from ...errors import MemlensError

    module = STAND_INS.get(name)
    if module is None:
        raise MemlensError(
            f"DeepSpeed {version}: the op {name!r} (OpBuilder.load) has no memlens stand-in; "
            f"memlens traces DeepSpeed's {', '.join(sorted(STAND_INS))} ops without compiling "
            "them")
    return module
