"""Megatron's fine-grained activation offloading (`--fine-grained-activation-offloading
--offload-modules ...`, `pipeline_parallel/fine_grained_activation_offload.py`) in a trace.

Megatron offloads the tensors autograd saves inside the named modules to pinned host memory on a
copy stream, and reloads them before their backward. Two things stop it here:

- It turns TE's CPU-offload flag on and off around each offloaded region
  (`cpu_offload.CPUOffloadEnabled`), and raises "TE CPU offload is not available" where TE is
  absent. The flag only tells TE's own modules to mark what they keep; none run here. It stands
  in as a namespace with the flag.
- It leaves alone (0.19) or refuses (0.16) every `FakeTensor`, a "stray" tensor of
  torch.compile's tracing, and in a trace every device tensor is one: nothing would be
  offloaded. The trace's own tensors (of its fake mode) count as the device tensors they stand
  for; a tensor of another fake mode is still a stray one.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace


def te_cpu_offload(plugin, mod: ModuleType) -> None:
    if getattr(mod, "HAVE_TE", True) or getattr(mod, "cpu_offload", False) is not None:
        return
    plugin.patcher.setattr(mod, "cpu_offload", SimpleNamespace(CPUOffloadEnabled=False))


def offload_handler(plugin, mod: ModuleType) -> None:
    """0.19 asks `ChunkOffloadHandler._can_manage_tensor_for_offload(tensor)`, and leaves a
    stray tensor on the device; 0.16 asserts in `tensor_push` that none is pushed. Either way
    the trace's own fake tensors are the device tensors they stand for."""
    handler = getattr(mod, "ChunkOffloadHandler", None)
    if handler is None:
        return
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    def stray(tensor) -> bool:
        return isinstance(tensor, FunctionalTensor) or (
            isinstance(tensor, FakeTensor) and
            tensor.fake_mode is not getattr(plugin.tracer, "fake_mode", None))

    if hasattr(handler, "_can_manage_tensor_for_offload"):  # 0.19
        def _can_manage_tensor_for_offload(tensor) -> bool:
            return not stray(tensor) and not isinstance(tensor, torch.nn.Parameter) \
                and tensor.device.type == "cuda"

        plugin.patcher.setattr(handler, "_can_manage_tensor_for_offload",
                               staticmethod(_can_manage_tensor_for_offload))
        return
    original = handler.tensor_push

    def tensor_push(self, tensor):  # 0.16's, without its assertion for the trace's tensors
        if stray(tensor):
            return original(self, tensor)  # Megatron's own assertion
        tag = (self._offloaded_group_index, self._tensor_count_current_group)
        self._tensor_count_current_group += 1
        self.offload_groups[self._offloaded_group_index - 1].push_tensor(tag, tensor)
        return tag

    plugin.patcher.setattr(handler, "tensor_push", tensor_push)


PATCHES = {
    "megatron.core.extensions.transformer_engine": te_cpu_offload,
    "megatron.core.pipeline_parallel.fine_grained_activation_offload": offload_handler,
}
