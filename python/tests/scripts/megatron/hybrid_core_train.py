"""A small Mamba hybrid (Mamba, attention and MLP layers) trained with megatron.core alone, as
a megatron.core user writes it: nccl process group, parallel_state, the hybrid stack's own
layer spec (Transformer Engine's modules: the only one Megatron ships), bf16 through
Float16Module, Megatron's DistributedDataParallel and optimizer, the pipeline schedules.

    torchrun --nproc_per_node 2 hybrid_core_train.py --tp 2 [--pattern M*M-] [--steps 2]
        [--pattern M*E --experts 4]
        [--no-mem-eff-path]

megatron-core 0.16 names it MambaModel and `mamba_layer_specs.mamba_stack_spec`; 0.19 calls it
HybridModel (`hybrid_layer_specs.hybrid_stack_spec`) and keeps the old names.
"""

import argparse
import os

import torch
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.distributed.finalize_model_grads import finalize_model_grads
from megatron.core.models.mamba.mamba_layer_specs import mamba_stack_spec
from megatron.core.models.mamba.mamba_model import MambaModel
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig

p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=1)
p.add_argument("--pattern", default="M*M-", help="M Mamba, * attention, - MLP, E MoE")
p.add_argument("--experts", type=int, default=None, help="the MoE layers' experts (top-2)")
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--heads", type=int, default=8)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--micro-batch", type=int, default=2)
p.add_argument("--vocab", type=int, default=1024)
p.add_argument("--steps", type=int, default=2)
p.add_argument("--no-mem-eff-path", action="store_true",
               help="mamba_ssm's unfused kernels (Megatron-LM's --disable-mamba-mem-eff-path)")
args = p.parse_args()

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.distributed.init_process_group(backend="nccl")
parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tp)
model_parallel_cuda_manual_seed(1234)

config = TransformerConfig(
    num_layers=len(args.pattern), hidden_size=args.hidden, num_attention_heads=args.heads,
    ffn_hidden_size=4 * args.hidden, bf16=True, params_dtype=torch.bfloat16,
    pipeline_dtype=torch.bfloat16, tensor_model_parallel_size=args.tp,
    mamba_state_dim=32, mamba_head_dim=32, mamba_num_groups=2,  # 16 heads of 32: expand 2
    attention_dropout=0.0, hidden_dropout=0.0, masked_softmax_fusion=False,
    bias_activation_fusion=False, bias_dropout_fusion=False, persist_layer_norm=False,
    gradient_accumulation_fusion=False, use_mamba_mem_eff_path=not args.no_mem_eff_path,
    **(dict(num_moe_experts=args.experts, moe_router_topk=2, moe_ffn_hidden_size=2 * args.hidden,
            moe_token_dispatcher_type="alltoall", moe_grouped_gemm=True,
            moe_aux_loss_coeff=1e-2) if args.experts else {}))
model = MambaModel(config=config, mamba_stack_spec=mamba_stack_spec, vocab_size=args.vocab,
                   max_sequence_length=args.seq, hybrid_override_pattern=args.pattern,
                   pre_process=True, post_process=True)
model.cuda(torch.cuda.current_device())
model = Float16Module(config, model)
model = DistributedDataParallel(config=config, module=model,
                                ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True))
config.no_sync_func = model.no_sync
config.finalize_model_grads_func = finalize_model_grads
optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True), [model])


def batches():
    while True:
        tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device="cuda")
        yield {"tokens": tokens, "labels": torch.roll(tokens, -1, 1),
               "position_ids": torch.arange(args.seq, device="cuda").expand_as(tokens)}


def forward_step(data_iterator, model):
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
    return output, lambda out: (out.float().mean(), {"lm loss": out.float().mean()})


forward_backward = get_forward_backward_func()
data = batches()
for step in range(args.steps):
    model.zero_grad_buffer()
    optimizer.zero_grad()
    forward_backward(forward_step_func=forward_step, data_iterator=data, model=model,
                     num_microbatches=1, seq_length=args.seq, micro_batch_size=args.micro_batch,
                     forward_only=False)
    optimizer.step()
