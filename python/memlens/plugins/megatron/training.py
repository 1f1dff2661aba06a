"""Patches of Megatron-LM's training package (`megatron.training`, not in the megatron-core
wheel) for a trace: its arguments set up once Megatron validated them (args.py), no
compiled helpers, mock batches, and the values it reads back from all-reduced tensors. Each patch is `patch(plugin, module)`
(the plugin is __init__.py).
"""

from __future__ import annotations

import functools
from types import ModuleType

from ...patches.patcher import Patcher
from .data import mock_iterator, model_family


def arguments(plugin, mod: ModuleType) -> None:
    from . import args as megatron_args
    from .stand_ins import want_flash_attention

    original = mod.validate_args
    tracer = plugin.tracer

    @functools.wraps(original)
    def validate_args(args, *rest, **kwargs):
        out = original(args, *rest, **kwargs)  # the user's arguments, as given
        te = getattr(args, "transformer_impl", None) == "transformer_engine"
        # CUDA graphs captured after eager steps: the trace runs up to the first graphed one.
        tracer.iterations = tracer.phases.iterations = megatron_args.traced_iterations(
            args, tracer.iterations)
        for text in megatron_args.set_up(args, tracer.iterations):
            plugin.note(text)
        if te and args.transformer_impl == "local":
            want_flash_attention(plugin)
        return out

    plugin.replace(mod, "validate_args", validate_args)


def initialize(plugin, mod: ModuleType) -> None:
    """No compiling of dataset helpers and fused kernels: the trace runs none of them. TE's
    Userbuffers (`--tp-comm-overlap`) stood in for where TE is absent (userbuffers.py)."""
    from . import userbuffers

    if hasattr(mod, "_compile_dependencies"):
        plugin.replace(mod, "_compile_dependencies", lambda *a, **k: None)
    userbuffers.initialize(plugin, mod)


def training(plugin, mod: ModuleType) -> None:
    """Mock batches instead of datasets and data loaders, of the model's family (GPT, BERT,
    T5), which setup_model_and_optimizer builds before the data iterators; and the iteration's
    end where Megatron-LM measures it (iteration_end)."""
    iteration_end(plugin, mod)
    if not hasattr(mod, "build_train_valid_test_data_iterators"):
        return
    family = ["gpt"]
    if hasattr(mod, "setup_model_and_optimizer"):
        setup = mod.setup_model_and_optimizer

        @functools.wraps(setup)
        def setup_model_and_optimizer(*args, **kwargs):
            out = setup(*args, **kwargs)
            family[0] = model_family(out[0])
            return out

        plugin.replace(mod, "setup_model_and_optimizer", setup_model_and_optimizer)

    def build_train_valid_test_data_iterators(*args, **kwargs):
        from megatron.training import get_args

        margs = get_args()
        # What Megatron learns from the loaders it builds (and broadcasts from rank 0).
        margs.do_train, margs.do_valid, margs.do_test = True, False, False
        return mock_iterator(mod, margs, family[0]), None, None

    plugin.replace(mod, "build_train_valid_test_data_iterators",
                   build_train_valid_test_data_iterators)


def iteration_end(plugin, mod: ModuleType) -> None:
    """Megatron-LM logs an iteration's memory (`training_log`: the allocated bytes its CI
    compares) after `train_step` has reduced the loss and its loop has computed the parameters'
    norm, which with Megatron-FSDP releases the parameters the optimizer step all-gathered
    (`stop_communication`). After the last step the trace stops there, not at the end of
    `optimizer.step()`. Written for Megatron-LM core_v0.16 to 0.19, whose loop calls both by
    these names."""
    if not (hasattr(mod, "train_step") and hasattr(mod, "training_log")):
        return
    phases = plugin.tracer.phases
    train_step, training_log = mod.train_step, mod.training_log
    held = [False]

    @functools.wraps(train_step)
    def held_train_step(*args, **kwargs):
        if not held[0]:  # until this iteration's training_log
            held[0] = True
            phases.hold_stop()
        try:
            return train_step(*args, **kwargs)
        except BaseException:
            held[0] = False
            phases.release_stop(stop=False)
            raise

    @functools.wraps(training_log)
    def releasing_training_log(*args, **kwargs):
        if held[0]:
            held[0] = False
            phases.release_stop()
        return training_log(*args, **kwargs)

    plugin.replace(mod, "train_step", held_train_step)
    plugin.replace(mod, "training_log", releasing_training_log)


def training_utils(plugin, mod: ModuleType) -> None:
    """Whether every model-parallel rank stepped is read back out of an all-reduced tensor:
    every rank of the simulated job runs the same step, so it is this rank's answer."""
    if hasattr(mod, "logical_and_across_model_parallel_group"):
        plugin.replace(mod, "logical_and_across_model_parallel_group",
                       logical_and_across_model_parallel_group)
    if hasattr(mod, "get_batch_on_this_tp_rank"):
        plugin.replace(mod, "get_batch_on_this_tp_rank",
                       _as_first_tp_rank(mod.get_batch_on_this_tp_rank))


def logical_and_across_model_parallel_group(input, group=None) -> bool:
    """Megatron-LM's signature up to core_v0.16 is `(input)`; core_v0.19 (in
    megatron/training/utils/common_utils.py) adds `group=None`, the model-parallel group its
    training step passes. Every rank of the simulated job answers as this one does."""
    return bool(input)


def _as_first_tp_rank(get_batch):
    """Tensor-parallel ranks other than the first receive the batch by broadcast, after reading
    its sizes out of broadcast tensors (values a trace does not have). They hold the same
    tensors as the first rank: let them read the mock batch as it does."""
    @functools.wraps(get_batch)
    def wrapper(data_iterator, *args, **kwargs):
        from megatron.core import parallel_state

        if data_iterator is None or parallel_state.get_tensor_model_parallel_rank() == 0:
            return get_batch(data_iterator, *args, **kwargs)
        with Patcher.swapped(parallel_state, "get_tensor_model_parallel_rank",
                             lambda *a, **k: 0):
            return get_batch(data_iterator, *args, **kwargs)

    return wrapper


PATCHES = {
    "megatron.training.arguments": arguments,
    "megatron.training.initialize": initialize,
    "megatron.training.training": training,
    "megatron.training.utils": training_utils,
}
