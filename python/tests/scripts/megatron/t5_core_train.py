"""A small T5 trained with megatron.core alone, on Transformer Engine's block specs:

    torchrun --nproc_per_node 2 t5_core_train.py [--tp 2] [--attention-backend unfused]

Written the way a megatron.core user writes it: nccl process group, parallel_state, T5Model
with `get_t5_{encoder,decoder}_with_transformer_engine_block_spec`, bf16 through
Float16Module, padding masks as Megatron's T5 dataset makes them, and Adam.
"""

import argparse
import os

import torch
from megatron.core import parallel_state
from megatron.core.models.T5.t5_model import T5Model
from megatron.core.models.T5.t5_spec import (get_t5_decoder_with_transformer_engine_block_spec,
                                             get_t5_encoder_with_transformer_engine_block_spec)
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.enums import AttnBackend
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig

p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=1)
p.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--heads", type=int, default=8)
p.add_argument("--encoder-seq", type=int, default=128)
p.add_argument("--decoder-seq", type=int, default=32)
p.add_argument("--micro-batch", type=int, default=2)
p.add_argument("--vocab", type=int, default=1024)
p.add_argument("--attention-backend", choices=("flash", "fused", "unfused", "auto"),
               default="auto")
p.add_argument("--masked-softmax-fusion", action="store_true",
               help="the fused softmax kernels (Megatron-LM's default)")
p.add_argument("--steps", type=int, default=2)
args = p.parse_args()

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.distributed.init_process_group(backend="nccl")
parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tp)
model_parallel_cuda_manual_seed(1234)

config = TransformerConfig(
    num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
    ffn_hidden_size=4 * args.hidden, bf16=True, params_dtype=torch.bfloat16,
    pipeline_dtype=torch.bfloat16, tensor_model_parallel_size=args.tp,
    attention_backend=AttnBackend[args.attention_backend],
    masked_softmax_fusion=args.masked_softmax_fusion)
model = T5Model(
    config=config, encoder_config=config,
    transformer_encoder_layer_spec=get_t5_encoder_with_transformer_engine_block_spec(args.layers),
    transformer_decoder_layer_spec=get_t5_decoder_with_transformer_engine_block_spec(args.layers),
    vocab_size=args.vocab, max_sequence_length=args.encoder_seq)
model.cuda(torch.cuda.current_device())
model = Float16Module(config, model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

b, s_enc, s_dec = args.micro_batch, args.encoder_seq, args.decoder_seq
for step in range(args.steps):
    encoder_ids = torch.randint(0, args.vocab, (b, s_enc), device="cuda")
    decoder_ids = torch.randint(0, args.vocab, (b, s_dec), device="cuda")
    # Megatron's T5 masks: True where attention is masked out (none here: full sequences).
    enc_mask = torch.zeros(b, 1, s_enc, s_enc, dtype=torch.bool, device="cuda")
    dec_mask = torch.triu(torch.ones(s_dec, s_dec, dtype=torch.bool, device="cuda"), 1)
    enc_dec_mask = torch.zeros(b, 1, s_dec, s_enc, dtype=torch.bool, device="cuda")
    loss = model(encoder_ids, decoder_ids, enc_mask, dec_mask.expand(b, 1, s_dec, s_dec),
                 enc_dec_mask, lm_labels=torch.roll(decoder_ids, -1, 1))
    loss.float().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
