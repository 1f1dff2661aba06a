"""A small GPT trained with megatron.core alone, launched like any Megatron job:

    torchrun --nproc_per_node 8 gpt_core_train.py --tp 2 --pp 2 [--sp] [--recompute selective]
        [--distributed-optimizer] [--moe-experts 4 --ep 2] [--spec te] [--query-groups 2]
        [--attention-backend unfused] [--rope] [--cp 2] [--mla]
        [--cp 4 --cp-comm-type a2a+p2p --hierarchical-cp 2 2]
        [--grad-accum-fusion] [--overlap-grad-reduce] [--overlap-param-gather]
        [--spec te --grouped-gemm --overlap-moe-ep-comm --delay-wgrad-compute] [--spec modelopt]
        [--moe-router-load-balancing-type sinkhorn] [--moe-dispatcher allgather]
        [--spec te --grouped-gemm --recompute selective --recompute-modules moe_act]
        [--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-param]

Written the way a megatron.core user writes it: nccl process group, parallel_state,
GPTModel with the local (no Transformer Engine) layer spec, bf16 through Float16Module,
Megatron's DistributedDataParallel and optimizer, and the pipeline schedules.
"""

import argparse
import os

import torch
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.distributed.finalize_model_grads import finalize_model_grads
from megatron.core.models.gpt.gpt_layer_specs import (get_gpt_layer_local_spec,
                                                      get_gpt_layer_with_transformer_engine_spec)
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.enums import AttnBackend
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
from megatron.core.utils import get_batch_on_this_cp_rank

p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=1)
p.add_argument("--pp", type=int, default=1)
p.add_argument("--ep", type=int, default=1)
p.add_argument("--cp", type=int, default=1, help="context parallelism")
p.add_argument("--cp-comm-type", default=None, choices=("p2p", "a2a", "a2a+p2p"))
p.add_argument("--hierarchical-cp", type=int, nargs=2, default=None, metavar=("A2A", "P2P"),
               help="the inner (all-to-all) and outer (ring) sizes of a2a+p2p")
p.add_argument("--sp", action="store_true", help="sequence parallelism")
p.add_argument("--layernorm-1p", action="store_true", help="zero-centered gamma, as Megatron-LM's "
               "--apply-layernorm-1p")
p.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
p.add_argument("--distributed-optimizer", action="store_true")
p.add_argument("--layers", type=int, default=4)
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--heads", type=int, default=8)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--micro-batch", type=int, default=2)
p.add_argument("--microbatches", type=int, default=None, help="default: the pipeline depth")
p.add_argument("--vocab", type=int, default=1024)
p.add_argument("--moe-experts", type=int, default=None)
p.add_argument("--moe-topk", type=int, default=2)
p.add_argument("--moe-router-load-balancing-type", default="aux_loss",
               choices=("aux_loss", "seq_aux_loss", "sinkhorn", "none"))
p.add_argument("--moe-score-function", choices=("softmax", "sigmoid"), default="softmax")
p.add_argument("--moe-expert-bias", action="store_true",
               help="aux-loss-free balancing by a per-expert bias (needs sigmoid scores)")
p.add_argument("--moe-router-fusion", action="store_true",
               help="the router's top-k, scores and auxiliary loss in TE's fused kernels")
p.add_argument("--moe-dispatcher", choices=("alltoall", "allgather", "flex"), default="alltoall")
p.add_argument("--grouped-gemm", action="store_true", help="the experts' GEMMs grouped "
               "(TEGroupedMLP with the TE spec)")
p.add_argument("--overlap-moe-ep-comm", action="store_true",
               help="the experts' all-to-all overlapped with another micro-batch's compute "
               "(Megatron's combined 1F1B)")
p.add_argument("--delay-wgrad-compute", action="store_true",
               help="with --overlap-moe-ep-comm: weight gradients computed after the "
               "backward of each layer's parts, overlapping the all-to-all")
p.add_argument("--recompute-modules", nargs="+", default=None,
               help="with --recompute selective: what it recomputes (Megatron: core_attn)")
p.add_argument("--grad-accum-fusion", action="store_true",
               help="Megatron-LM's default: wgrad accumulated into main_grad by a fused kernel")
p.add_argument("--defer-embedding-wgrad", action="store_true",
               help="the output layer's weight gradient computed at the pipeline flush "
                    "(Megatron-LM's --defer-embedding-wgrad-compute; needs --grad-accum-fusion)")
p.add_argument("--megatron-fsdp", action="store_true",
               help="Megatron-FSDP (ZeRO-3: parameters, gradients and optimizer states "
                    "sharded over data-parallel ranks) instead of Megatron's DDP")
p.add_argument("--te-cuda-graphs", type=int, default=None, metavar="WARMUP",
               help="Transformer Engine's CUDA graphs of every layer (TECudaGraphHelper), "
                    "captured after WARMUP eager steps, as Megatron-LM's training loop does")
p.add_argument("--overlap-grad-reduce", action="store_true")
p.add_argument("--overlap-param-gather", action="store_true", help="with the distributed optimizer")
p.add_argument("--softmax-type", choices=("vanilla", "off-by-one", "learnable"), default="vanilla",
               help="learnable: a softmax offset per head (gpt-oss's attention sinks)")
p.add_argument("--nccl-ub", action="store_true",
               help="DDP's buffers in NCCL's registered memory pool (Megatron-LM's --use-nccl-ub)")
p.add_argument("--offload-modules", nargs="+", default=None,
               help="fine-grained activation offloading of these modules' saved tensors")
p.add_argument("--steps", type=int, default=5)
p.add_argument("--spec", choices=("local", "te", "modelopt"), default="local",
               help="te: the Transformer Engine layer spec, as TE users build their models")
p.add_argument("--query-groups", type=int, default=None, help="grouped-query attention")
p.add_argument("--attention-backend", choices=("flash", "fused", "unfused", "local", "auto"),
               default="auto")
p.add_argument("--rope", action="store_true", help="rotary positions instead of learned ones")
p.add_argument("--mla", action="store_true",
               help="multi-latent attention: low-rank q and kv projections, q/k heads of 32 + 16 "
                    "rotary dims, v heads of 32")
p.add_argument("--fp8-format", choices=("hybrid", "e4m3"), default=None)
p.add_argument("--fp8-recipe", choices=("delayed", "tensorwise", "mxfp8", "blockwise"),
               default="delayed")
p.add_argument("--fp8-amax-history-len", type=int, default=1)
p.add_argument("--fp8-param", action="store_true", help="FP8 parameters (Megatron-LM's "
               "--fp8-param-gather), with the distributed optimizer")
args = p.parse_args()

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
torch.distributed.init_process_group(backend="nccl")
parallel_state.initialize_model_parallel(
    tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
    expert_model_parallel_size=args.ep, context_parallel_size=args.cp,
    hierarchical_context_parallel_sizes=args.hierarchical_cp)
# Graph-safe RNG states (generators) with CUDA graphs, as Megatron-LM's initialize keeps them
model_parallel_cuda_manual_seed(1234, use_cudagraphable_rng=args.te_cuda_graphs is not None)

moe = {}
if args.moe_experts:
    moe = dict(num_moe_experts=args.moe_experts, moe_router_topk=args.moe_topk,
               moe_token_dispatcher_type=args.moe_dispatcher,
               moe_router_load_balancing_type=args.moe_router_load_balancing_type,
               moe_ffn_hidden_size=2 * args.hidden, moe_grouped_gemm=args.grouped_gemm,
               moe_router_pre_softmax=args.moe_topk == 1,  # Megatron asks it of top-1
               moe_router_score_function=args.moe_score_function,
               moe_router_enable_expert_bias=args.moe_expert_bias,
               moe_router_fusion=args.moe_router_fusion,
               # Sinkhorn balances without an auxiliary loss (Megatron refuses one)
               moe_aux_loss_coeff=0.0 if args.moe_router_load_balancing_type in ("sinkhorn", "none")
               else 1e-2)
mla = dict(q_lora_rank=64, kv_lora_rank=64, qk_head_dim=32, qk_pos_emb_head_dim=16,
           v_head_dim=32, rope_type="rope") if args.mla else {}
config = (MLATransformerConfig if args.mla else TransformerConfig)(
    num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
    ffn_hidden_size=4 * args.hidden, bf16=True, params_dtype=torch.bfloat16,
    pipeline_dtype=torch.bfloat16, tensor_model_parallel_size=args.tp,
    pipeline_model_parallel_size=args.pp, expert_model_parallel_size=args.ep,
    context_parallel_size=args.cp, sequence_parallel=args.sp, num_query_groups=args.query_groups,
    cp_comm_type=args.cp_comm_type,
    attention_backend=AttnBackend[args.attention_backend],
    **(dict(softmax_type=args.softmax_type) if args.softmax_type != "vanilla" else {}),
    # Korthikanti et al.'s layer: GeLU MLP of 4h with biases, eager softmax in 16 bits,
    # dropout after the attention probabilities and after both projections.
    attention_softmax_in_fp32=False, masked_softmax_fusion=False, bias_activation_fusion=False,
    bias_dropout_fusion=False, gradient_accumulation_fusion=args.grad_accum_fusion,
    defer_embedding_wgrad_compute=args.defer_embedding_wgrad,
    overlap_moe_expert_parallel_comm=args.overlap_moe_ep_comm,
    delay_wgrad_compute=args.delay_wgrad_compute,
    persist_layer_norm=False, layernorm_zero_centered_gamma=args.layernorm_1p,
    attention_dropout=0.1, hidden_dropout=0.1,
    recompute_granularity=None if args.recompute == "none" else args.recompute,
    **(dict(recompute_modules=args.recompute_modules) if args.recompute_modules else {}),
    # every saved tensor of the offloaded modules, however small (Megatron's default: 1 M
    # elements and up)
    **(dict(fine_grained_activation_offloading=True, offload_modules=args.offload_modules,
            min_offloaded_tensor_size=1) if args.offload_modules else {}),
    recompute_method="uniform" if args.recompute == "full" else None,
    recompute_num_layers=1 if args.recompute == "full" else None,
    fp8=args.fp8_format, fp8_recipe=args.fp8_recipe,
    fp8_amax_history_len=args.fp8_amax_history_len, fp8_param=args.fp8_param,
    **(dict(cuda_graph_impl="transformer_engine", cuda_graph_warmup_steps=args.te_cuda_graphs)
       if args.te_cuda_graphs is not None else {}),
    **moe, **mla)

if args.spec == "modelopt":  # Megatron's ModelOpt spec: local layers, TE's norms and attention
    from megatron.core.post_training.modelopt.gpt.model_specs import get_gpt_modelopt_spec

    layer_spec = get_gpt_modelopt_spec(config)
else:
    spec = get_gpt_layer_local_spec if args.spec == "local" else \
        get_gpt_layer_with_transformer_engine_spec
    layer_spec = spec(num_experts=args.moe_experts, moe_grouped_gemm=args.grouped_gemm,
                      multi_latent_attention=args.mla)
model = GPTModel(config=config, transformer_layer_spec=layer_spec,
                 vocab_size=args.vocab, max_sequence_length=args.seq,
                 pre_process=parallel_state.is_pipeline_first_stage(),
                 post_process=parallel_state.is_pipeline_last_stage(),
                 share_embeddings_and_output_weights=False,
                 position_embedding_type="rope" if args.rope or args.mla else "learned_absolute")
model.cuda(torch.cuda.current_device())
model = Float16Module(config, model)
distributed_optimizer = args.distributed_optimizer or args.megatron_fsdp
ddp_config = DistributedDataParallelConfig(
    grad_reduce_in_fp32=True, use_distributed_optimizer=distributed_optimizer,
    overlap_grad_reduce=args.overlap_grad_reduce, overlap_param_gather=args.overlap_param_gather,
    delay_wgrad_compute=args.delay_wgrad_compute, nccl_ub=args.nccl_ub,
    **(dict(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params")
       if args.megatron_fsdp else {}))
if args.megatron_fsdp:
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    model = FullyShardedDataParallel(config=config, ddp_config=ddp_config, module=model)
else:
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
config.no_sync_func = model.no_sync
config.finalize_model_grads_func = finalize_model_grads
if args.overlap_grad_reduce:  # as Megatron-LM's training loop sets them up
    config.grad_sync_func = model.start_grad_sync
if args.overlap_param_gather:
    config.param_sync_func = model.start_param_sync

optimizer = get_megatron_optimizer(
    OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True,
                    use_distributed_optimizer=distributed_optimizer,
                    overlap_param_gather=args.overlap_param_gather),
    [model])


def batches():
    # One causal mask for every layer, as Megatron's GPT datasets make it (without one, each
    # layer would build and keep an s x s mask of its own).
    causal = torch.triu(torch.ones(args.seq, args.seq, dtype=torch.bool, device="cuda"), 1)
    while True:
        tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device="cuda")
        yield {"tokens": tokens, "labels": torch.roll(tokens, -1, 1),
               "position_ids": torch.arange(args.seq, device="cuda").expand_as(tokens),
               "attention_mask": causal.expand(args.micro_batch, 1, args.seq, args.seq)}


def forward_step(data_iterator, model, return_schedule_plan=False):
    batch = next(data_iterator)
    if args.cp > 1:  # each context-parallel rank keeps its chunks of the sequence
        batch = get_batch_on_this_cp_rank(batch)

    def loss_func(output_tensor):
        loss = output_tensor.float().mean()
        return loss, {"lm loss": loss}

    inputs = (batch["tokens"], batch["position_ids"], batch["attention_mask"])
    if return_schedule_plan:  # the combined 1F1B schedule (--overlap-moe-ep-comm) runs it
        return model.build_schedule_plan(*inputs, labels=batch["labels"]), loss_func
    return model(*inputs, labels=batch["labels"]), loss_func


forward_backward = get_forward_backward_func()
data = batches()
for step in range(args.steps):
    if step == args.te_cuda_graphs:
        from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator
        from megatron.core.transformer.cuda_graphs import TECudaGraphHelper

        dp = parallel_state.get_data_parallel_world_size()
        init_num_microbatches_calculator(  # the helper asks it, as Megatron-LM sets it up
            torch.distributed.get_rank(), None,
            args.micro_batch * (args.microbatches or args.pp) * dp, args.micro_batch, dp)
        graphs = TECudaGraphHelper(model=[model], config=config, seq_length=args.seq,
                                   micro_batch_size=args.micro_batch, optimizers=[optimizer])
        graphs.create_cudagraphs()
        if args.overlap_param_gather:  # the parameters' all-gathers before a replayed layer
            graphs.cuda_graph_set_manual_hooks()
    model.zero_grad_buffer()
    optimizer.zero_grad()
    forward_backward(forward_step_func=forward_step, data_iterator=data, model=model,
                     num_microbatches=args.microbatches or args.pp, seq_length=args.seq,
                     micro_batch_size=args.micro_batch, decoder_seq_length=args.seq,
                     forward_only=False)
    update_successful, grad_norm, _ = optimizer.step()
