"""A Llama-shaped model trained with megatron.core alone (no Megatron-LM), launched like any
Megatron job:

    torchrun --nproc_per_node 8 --nnodes 8 core_llama.py --tp 8 --pp 4 --sp \
        --layers 80 --hidden 8192 --ffn 28672 --heads 64 --kv-heads 8 --seq 4096 \
        --micro-batch 1 --vocab 32000 --distributed-optimizer

and traced with memlens the same way:

    memlens run --world-size 64 --ranks all -- examples/megatron-lm/core_llama.py --tp 8 ...

Llama's layer: RMSNorm, grouped-query attention with RoPE, SwiGLU MLP, no biases, untied
embeddings; bf16 through Float16Module; Megatron's DistributedDataParallel (fp32 gradients),
its optimizer and pipeline schedules; the Transformer Engine layer spec, as TE users build it.
"""

import argparse
import os

import torch
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.distributed.finalize_model_grads import finalize_model_grads
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig

p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=1)
p.add_argument("--pp", type=int, default=1)
p.add_argument("--sp", action="store_true", help="sequence parallelism")
p.add_argument("--layers", type=int, default=32)
p.add_argument("--hidden", type=int, default=4096)
p.add_argument("--ffn", type=int, default=11008)
p.add_argument("--heads", type=int, default=32)
p.add_argument("--kv-heads", type=int, default=None, help="default: --heads (no GQA)")
p.add_argument("--seq", type=int, default=4096)
p.add_argument("--micro-batch", type=int, default=1)
p.add_argument("--microbatches", type=int, default=None, help="default: the pipeline depth")
p.add_argument("--vocab", type=int, default=32000)
p.add_argument("--distributed-optimizer", action="store_true")
p.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
p.add_argument("--steps", type=int, default=10)
args = p.parse_args()

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.distributed.init_process_group(backend="nccl")
parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tp,
                                         pipeline_model_parallel_size=args.pp)
model_parallel_cuda_manual_seed(1234)

config = TransformerConfig(
    num_layers=args.layers, hidden_size=args.hidden, ffn_hidden_size=args.ffn,
    num_attention_heads=args.heads, num_query_groups=args.kv_heads or args.heads,
    normalization="RMSNorm", gated_linear_unit=True, activation_func=torch.nn.functional.silu,
    add_bias_linear=False, attention_dropout=0.0, hidden_dropout=0.0,
    bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
    tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
    sequence_parallel=args.sp, bias_activation_fusion=True,
    recompute_granularity=None if args.recompute == "none" else args.recompute,
    recompute_method="uniform" if args.recompute == "full" else None,
    recompute_num_layers=1 if args.recompute == "full" else None)

model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(),
                 vocab_size=args.vocab, max_sequence_length=args.seq,
                 pre_process=parallel_state.is_pipeline_first_stage(),
                 post_process=parallel_state.is_pipeline_last_stage(),
                 share_embeddings_and_output_weights=False, position_embedding_type="rope")
model.cuda(torch.cuda.current_device())
model = Float16Module(config, model)
ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                           use_distributed_optimizer=args.distributed_optimizer)
model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
config.no_sync_func = model.no_sync
config.finalize_model_grads_func = finalize_model_grads
optimizer = get_megatron_optimizer(
    OptimizerConfig(optimizer="adam", lr=1.5e-4, bf16=True, clip_grad=1.0,
                    use_distributed_optimizer=args.distributed_optimizer), [model])


def batches():
    while True:
        tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device="cuda")
        yield tokens, torch.arange(args.seq, device="cuda").expand_as(tokens)


def forward_step(data_iterator, model):
    tokens, positions = next(data_iterator)
    output = model(tokens, positions, None, labels=torch.roll(tokens, -1, 1))
    return output, lambda out: (out.float().mean(), {"lm loss": out.float().mean()})


forward_backward = get_forward_backward_func()
data = batches()
for step in range(args.steps):
    model.zero_grad_buffer()
    optimizer.zero_grad()
    forward_backward(forward_step_func=forward_step, data_iterator=data, model=model,
                     num_microbatches=args.microbatches or args.pp, seq_length=args.seq,
                     micro_batch_size=args.micro_batch, forward_only=False)
    optimizer.step()
