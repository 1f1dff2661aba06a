"""Megatron-LM core_v0.19's seams, tested with the megatron-core installed here (0.16.1):
memlens' stand-ins called with 0.19's signatures, and 0.19's checkpoint options, which a trace
must turn off with saving. (megatron-core 0.19 needs Python 3.12: its calls are copied from its
source, megatron/core/optimizer/__init__.py and megatron/training/utils/common_utils.py.)"""

from __future__ import annotations

from argparse import Namespace
from importlib.metadata import version
from types import ModuleType

import pytest
import torch

from memlens.errors import MemlensError
from memlens.patches.patcher import Patcher
from memlens.plugins.megatron import args as megatron_args, training as megatron_training
from memlens.plugins.megatron.optimizer import fused_adam_class
from support import megatron as M


def _validated_args(**kw) -> Namespace:
    """What validate_args leaves of a 16-GPU job (TP 2, PP 2, DP 4) that saves checkpoints
    asynchronously, as 0.19's CI configurations do."""
    base = dict(world_size=16, rank=0, tensor_model_parallel_size=2,
                pipeline_model_parallel_size=2, context_parallel_size=1, data_parallel_size=4,
                virtual_pipeline_model_parallel_size=None,
                microbatch_group_size_per_vp_stage=None, micro_batch_size=1,
                global_batch_size=8, rampup_batch_size=None, train_iters=1000,
                train_samples=None, lr_decay_iters=None, lr_warmup_fraction=None,
                lr_warmup_iters=10, tokenizer_type="NullTokenizer", vocab_size=32000,
                transformer_impl="local", num_experts=None, num_workers=2, mock_data=True,
                data_path=None, split=None, load="/ckpt", save="/ckpt", save_interval=100)
    base.update(kw)
    return Namespace(**base)


@M.NEEDS
def test_saving_off_turns_off_what_only_saving_uses():
    """0.19's --async-save with --use-persistent-ckpt-worker starts a checkpoint worker (which
    needs nvidia-resiliency-ext) although nothing is saved: off with saving, and so is every
    other option named for saving or checkpoint files; the checkpoint format and activation
    recomputation stay the user's."""
    args = _validated_args(
        async_save=True, use_persistent_ckpt_worker=True, async_strategy="nvrx",
        non_persistent_save_interval=50, non_persistent_ckpt_type="local",
        ckpt_convert_format="torch_dist", ckpt_convert_save="/converted", dist_ckpt_workers=2,
        save_config_filepath="/run/config.yaml", ckpt_format="torch_dist", use_dist_ckpt=True,
        recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
        distribute_saved_activations=True)
    megatron_args.set_up(args, iterations=2)
    assert (args.save, args.load, args.save_interval, args.non_persistent_save_interval) == \
        (None, None, None, None)
    assert (args.async_save, args.use_persistent_ckpt_worker) == (False, False)
    assert (args.non_persistent_ckpt_type, args.ckpt_convert_format, args.ckpt_convert_save,
            args.dist_ckpt_workers, args.save_config_filepath) == (None,) * 5
    assert (args.ckpt_format, args.use_dist_ckpt) == ("torch_dist", True)
    assert (args.recompute_granularity, args.recompute_method, args.recompute_num_layers,
            args.distribute_saved_activations) == ("full", "uniform", 1, True)
    assert args.async_strategy == "nvrx"  # no save or ckpt word: how, not whether


@M.NEEDS
def test_value_checks_are_off_by_their_check_name():
    """0.19 checks the weights' hashes across data-parallel replicas before the first iteration
    whenever --check-weight-hash-across-dp-replicas-interval is set (a CI configuration sets 10):
    fake values differ across replicas, so that check, like every `check_*` one, is off; an
    option that only has `check` inside its name stays the user's."""
    args = _validated_args(
        check_weight_hash_across_dp_replicas_interval=10, check_for_nan_in_loss_and_grad=True,
        check_for_spiky_loss=True, check_for_large_grads=True, check_for_nan_in_loss=True,
        use_checkpoint_opt_param_scheduler=True)
    megatron_args.set_up(args, iterations=2)
    assert args.check_weight_hash_across_dp_replicas_interval is None
    assert (args.check_for_nan_in_loss_and_grad, args.check_for_spiky_loss,
            args.check_for_large_grads, args.check_for_nan_in_loss) == (False,) * 4
    assert args.use_checkpoint_opt_param_scheduler is True


def test_logical_and_stand_in_takes_0_19s_group_argument():
    """0.19's training step calls `logical_and_across_model_parallel_group(update_successful,
    group=mp_group)`; 0.16's took the value only. The stand-in the plugin installs answers both
    as this rank's value."""
    utils = ModuleType("megatron.training.utils")

    def logical_and_across_model_parallel_group(input, group=None):  # 0.19's signature
        raise AssertionError("the all-reduce a trace cannot read")

    utils.logical_and_across_model_parallel_group = logical_and_across_model_parallel_group
    patcher = Patcher()

    class Plugin:
        def replace(self, module, name, new):
            patcher.replace_everywhere(module, name, new, lambda: [])

    megatron_training.training_utils(Plugin(), utils)
    try:
        stand_in = utils.logical_and_across_model_parallel_group
        assert stand_in(True, group=object()) is True
        assert stand_in(False, group=None) is False
        assert stand_in(True) is True  # 0.16's call
    finally:
        patcher.undo()
    assert utils.logical_and_across_model_parallel_group is logical_and_across_model_parallel_group


@M.NEEDS
def test_flextron_router_takes_its_own_fallback_without_te():
    """0.19's megatron/elastification/router/hybrid_flex_router.py imports TE's linear classes
    from Megatron's TE extension module, which imports without TE, so `HAVE_TE` is True and the
    router builds classes that cannot be built ("TEColumnParallelLinear() takes no
    arguments"). The patch gives it its own fallback, Megatron's parallel linear layers, and
    says so; undone, the module is as it was."""
    from memlens.plugins.megatron.stand_ins import flextron_router
    from megatron.core.tensor_parallel import layers

    router = ModuleType("megatron.elastification.router.hybrid_flex_router")
    router.HAVE_TE = True  # what 0.19's try-import leaves without TE
    router.TEColumnParallelLinear = type("TEColumnParallelLinear", (), {})
    notes: list[str] = []

    class Plugin:
        patcher = Patcher()

        def note(self, text):
            notes.append(text)

    plugin = Plugin()
    flextron_router(plugin, router)
    try:
        assert router.HAVE_TE is False
        assert router.ColumnParallelLinear is layers.ColumnParallelLinear
        assert router.RowParallelLinear is layers.RowParallelLinear
        assert any("Flextron's router" in n for n in notes)
    finally:
        plugin.patcher.undo()
    assert router.HAVE_TE is True and not hasattr(router, "ColumnParallelLinear")


def _adam_0_19(capturable: bool, params) -> torch.optim.Optimizer:
    """The call megatron-core 0.19's _get_megatron_optimizer_based_on_param_groups makes for
    --optimizer adam with Transformer Engine's or apex's Adam (no precision-aware optimizer)."""
    kwargs = {"params": params, "lr": 1e-4, "weight_decay": 0.1, "betas": (0.9, 0.95),
              "eps": 1e-8, "capturable": capturable, "adam_w_mode": True}
    return fused_adam_class()(**kwargs)


def test_fused_adam_stand_in_accepts_capturable_false():
    """capturable=False (no --optimizer-cuda-graph), which 0.19 passes to every Adam: the
    stand-in, whose first step makes two moments like each parameter (a 4 x 8 fp32 weight:
    2 x 128 B)."""
    weight = torch.nn.Parameter(torch.ones(4, 8))
    weight.grad = torch.ones(4, 8)
    opt = _adam_0_19(False, [weight])
    opt.step()
    moments = opt.state[weight]
    assert sorted(moments) == ["exp_avg", "exp_avg_sq"]
    assert sum(t.numel() * t.element_size() for t in moments.values()) == 2 * 4 * 8 * 4 == 256


def test_fused_adam_stand_in_refuses_capturable_true_naming_the_version():
    with pytest.raises(MemlensError) as refused:
        _adam_0_19(True, [torch.nn.Parameter(torch.ones(2))])
    text = str(refused.value)
    assert f"megatron-core {version('megatron-core')}" in text
    assert "capturable=True (--optimizer-cuda-graph)" in text and "Transformer Engine" in text


@M.NEEDS
def test_an_experimental_attention_variant_without_te_names_version_and_missing_piece():
    """0.19's --experimental-attention-variant (a CI configuration's gated delta net) builds
    its decoder block from Transformer Engine's modules only: without TE the trace stops before
    Megatron's bare assertion, naming megatron-core's version and what is missing."""
    args = _validated_args(transformer_impl="transformer_engine",
                           experimental_attention_variant="gated_delta_net")
    from megatron.core import package_info  # 0.18.2 calls itself 0.18.2+bba59cf there

    with pytest.raises(MemlensError) as e:
        megatron_args.set_up(args, iterations=2)
    assert str(e.value).startswith(f"megatron-core {package_info.__version__}: "
                                   "--experimental-attention-variant gated_delta_net")
    assert "Transformer Engine is not installed here" in str(e.value)
