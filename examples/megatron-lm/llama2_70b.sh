#!/bin/bash
# Llama-2-70B pretraining with Megatron-LM: 64 GPUs (8 nodes x 8),
# tensor parallel 8 x pipeline parallel 4 x data parallel 2, sequence 4096, micro-batch 1,
# bf16, sequence parallel, distributed optimizer.
#
# Run from a Megatron-LM checkout (pretrain_gpt.py is relative to it):
#   memlens run --from-script /path/to/memlens/examples/megatron-lm/llama2_70b.sh --ranks all
set -euo pipefail

GPUS_PER_NODE=8
NNODES=8
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-localhost}

CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES \
    --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port 6000 \
    pretrain_gpt.py \
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel \
    --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 \
    --num-attention-heads 64 --group-query-attention --num-query-groups 8 \
    --seq-length 4096 --max-position-embeddings 4096 \
    --position-embedding-type rope \
    --normalization RMSNorm --swiglu --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --attention-dropout 0.0 --hidden-dropout 0.0 \
    --micro-batch-size 1 --global-batch-size 1024 \
    --train-iters 500000 --lr 1.5e-4 --min-lr 1.5e-5 --lr-decay-style cosine \
    --lr-warmup-iters 2000 --weight-decay 0.1 --clip-grad 1.0 \
    --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.02 \
    --bf16 --use-distributed-optimizer \
    --tokenizer-type NullTokenizer --vocab-size 31999 \
    --mock-data \
    --save checkpoints/llama2_70b --save-interval 1000 --log-interval 10 --eval-iters 10
# NullTokenizer adds one token (end of document): 31999 + 1 = Llama-2's 32000.
