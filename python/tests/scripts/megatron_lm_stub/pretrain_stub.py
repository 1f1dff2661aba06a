"""An entry point in Megatron-LM's shape: initialize_megatron (arguments from the command line),
a megatron.core GPT (model chunks with an interleaved pipeline), data iterators from megatron.training, the training loop."""

import sys

import torch
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.distributed.finalize_model_grads import finalize_model_grads
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.num_microbatches_calculator import get_num_microbatches
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.training import get_args
from megatron.training.initialize import finish_mpu_init, initialize_megatron
from megatron.training.training import build_train_valid_test_data_iterators, train
from megatron.training.utils import get_batch_on_this_tp_rank

args = initialize_megatron(sys.argv[1:])
torch.cuda.set_device(args.rank % torch.cuda.device_count())
torch.distributed.init_process_group("nccl")
chunks = args.virtual_pipeline_model_parallel_size
parallel_state.initialize_model_parallel(args.tensor_model_parallel_size,
                                         args.pipeline_model_parallel_size,
                                         virtual_pipeline_model_parallel_size=chunks)
finish_mpu_init(args)
model_parallel_cuda_manual_seed(1234)
config = TransformerConfig(
    num_layers=args.num_layers, hidden_size=args.hidden_size,
    num_attention_heads=args.num_attention_heads, bf16=True, params_dtype=torch.bfloat16,
    pipeline_dtype=torch.bfloat16, tensor_model_parallel_size=args.tensor_model_parallel_size,
    pipeline_model_parallel_size=args.pipeline_model_parallel_size,
    virtual_pipeline_model_parallel_size=chunks,
    microbatch_group_size_per_vp_stage=args.microbatch_group_size_per_vp_stage,
    persist_layer_norm=False, masked_softmax_fusion=False, gradient_accumulation_fusion=False,
    num_moe_experts=args.num_experts, moe_grouped_gemm=args.moe_grouped_gemm,
    add_bias_linear=not args.disable_bias_linear, sequence_parallel=args.sequence_parallel,
    tp_comm_overlap=args.tp_comm_overlap)


def build(vp_stage):
    """One model chunk, as Megatron-LM's get_model builds each (TE layer spec)."""
    first = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
    last = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
    spec = get_gpt_layer_with_transformer_engine_spec(num_experts=args.num_experts,
                                                      moe_grouped_gemm=args.moe_grouped_gemm)
    chunk = GPTModel(config=config, transformer_layer_spec=spec,
                     vocab_size=args.padded_vocab_size, max_sequence_length=args.seq_length,
                     pre_process=first, post_process=last, vp_stage=vp_stage)
    chunk.cuda(torch.cuda.current_device())
    if args.use_megatron_fsdp:  # as Megatron-LM's get_model wraps it
        from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

        return FullyShardedDataParallel(
            config=config, module=Float16Module(config, chunk),
            ddp_config=DistributedDataParallelConfig(
                grad_reduce_in_fp32=True, use_distributed_optimizer=True, use_megatron_fsdp=True,
                data_parallel_sharding_strategy=args.data_parallel_sharding_strategy))
    return DistributedDataParallel(config, DistributedDataParallelConfig(grad_reduce_in_fp32=True),
                                   Float16Module(config, chunk), disable_bucketing=bool(vp_stage))


models = [build(i) for i in range(chunks)] if chunks else [build(None)]
config.finalize_model_grads_func = finalize_model_grads
optimizer = get_megatron_optimizer(
    OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True,
                    use_distributed_optimizer=args.use_megatron_fsdp), models)
data, _, _ = build_train_valid_test_data_iterators(None)
forward_backward = get_forward_backward_func()
margs = get_args()


def forward_step(data_iterator, model):
    batch = get_batch_on_this_tp_rank(data_iterator)
    out = model(batch["tokens"], batch["position_ids"], batch["attention_mask"],
                labels=batch["labels"])
    return out, lambda t: (t.float().mean(), {})


def step(data_iterator):
    for m in models:
        m.zero_grad_buffer()
    forward_backward(forward_step_func=forward_step,
                     data_iterator=[data_iterator] * len(models) if chunks else data_iterator,
                     model=models if chunks else models[0],
                     num_microbatches=get_num_microbatches(),  # as Megatron-LM's train_step
                     seq_length=margs.seq_length, micro_batch_size=margs.micro_batch_size,
                     forward_only=False)
    return optimizer.step()[:2]  # whether it stepped, the gradient norm


train(margs, step, data, models)
