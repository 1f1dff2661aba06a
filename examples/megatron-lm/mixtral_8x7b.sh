#!/bin/bash
# Mixtral-8x7B pretraining with Megatron-LM: 64 GPUs (8 nodes x 8),
# pipeline parallel 4 x data parallel 16, experts split 8 ways (expert parallel 8, expert data
# parallel 2), sequence 4096, micro-batch 1, bf16, distributed optimizer, alltoall dispatcher.
#
# Run from a Megatron-LM checkout (pretrain_gpt.py is relative to it):
#   memlens run --from-script /path/to/memlens/examples/megatron-lm/mixtral_8x7b.sh --ranks all
set -euo pipefail

GPUS_PER_NODE=8
NNODES=8
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-localhost}

CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES \
    --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port 6000 \
    pretrain_gpt.py \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 \
    --expert-model-parallel-size 8 \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 \
    --num-attention-heads 32 --group-query-attention --num-query-groups 8 \
    --seq-length 4096 --max-position-embeddings 32768 \
    --position-embedding-type rope --rotary-base 1000000 \
    --normalization RMSNorm --swiglu --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --attention-dropout 0.0 --hidden-dropout 0.0 \
    --num-experts 8 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss \
    --moe-aux-loss-coeff 1e-2 --moe-token-dispatcher-type alltoall --moe-grouped-gemm \
    --micro-batch-size 1 --global-batch-size 256 \
    --train-iters 500000 --lr 1e-4 --min-lr 1e-5 --lr-decay-style cosine \
    --lr-warmup-iters 2000 --weight-decay 0.1 --clip-grad 1.0 \
    --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.02 \
    --bf16 --use-distributed-optimizer \
    --tokenizer-type NullTokenizer --vocab-size 31999 \
    --mock-data \
    --save checkpoints/mixtral_8x7b --save-interval 1000 --log-interval 10 --eval-iters 10
