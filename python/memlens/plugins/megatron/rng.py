"""Megatron's CUDA RNG tracker on the simulated GPU.

Megatron keeps its RNG states through `torch.cuda.default_generators`; these functions keep them
through `torch.cuda.get_rng_state`/`set_rng_state`, which the simulation answers (graph-safe
states, which Megatron's tracker keeps as generators where CUDA graphs are captured, in
generators of the simulated GPU). `fork` is the
tracker's own, without its check that the CPU generator did not move (it compares the states'
values, which a trace does not have, and only ever logs a warning).
"""

from __future__ import annotations

import contextlib


def get_state(device=-1, clone=False, graph_safe=False):
    """The state as a tensor; graph-safe (the tracker of a job with CUDA graphs, which seeds
    its states with `manual_seed`), as a generator of the simulated GPU holding it, as CUDA's
    `clone_state` gives one."""
    import torch

    state = torch.cuda.get_rng_state(_cuda_device(device))
    if not graph_safe:
        return state
    return torch.Generator(device=_cuda_device(device)).set_state(state)


def set_state(new_state, device=-1, graph_safe=False):
    import torch

    if not isinstance(new_state, torch.Tensor):  # a graph-safe state: a generator
        new_state = new_state.get_state()
    torch.cuda.set_rng_state(new_state, _cuda_device(device))


def _cuda_device(device):
    import torch

    if device == -1 or device is None:
        return torch.device("cuda", torch.cuda.current_device())
    if isinstance(device, int):
        return torch.device("cuda", device)
    return torch.device(device)


@contextlib.contextmanager
def fork(self, name=None):
    """CudaRNGStatesTracker.fork: switch to the named state, run, keep its new value and switch
    back (Megatron's own also compares CPU generator states, to log a warning)."""
    from megatron.core.tensor_parallel import random as r

    name = name or r._MODEL_PARALLEL_RNG_TRACKER_NAME
    if name not in self.states_:
        raise Exception(f"cuda rng state {name} is not added")
    previous, previous_name = r._get_cuda_rng_state(), self._current_state_name
    if previous_name != "default-rng":
        self.states_[previous_name] = previous
    r._set_cuda_rng_state(self.states_[name])
    self._current_state_name = name
    try:
        yield
    finally:
        self.states_[name] = r._get_cuda_rng_state()
        if previous_name != "default-rng":
            previous = self.states_[previous_name]
        r._set_cuda_rng_state(previous)
        self._current_state_name = previous_name
