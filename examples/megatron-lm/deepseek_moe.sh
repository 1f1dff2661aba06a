#!/bin/bash
# A DeepSeekMoE-16B-style fine-grained MoE with Megatron-LM: 64 routed experts of width 1408
# (6 per token) plus 2 always-on shared experts, the first layer dense. 32 GPUs (4 nodes x 8):
# pipeline parallel 2 x data parallel 16, experts split 8 ways (expert parallel 8, expert data
# parallel 2), sequence 4096, micro-batch 2, bf16, distributed optimizer, alltoall dispatcher.
#
# Run from a Megatron-LM checkout (pretrain_gpt.py is relative to it):
#   memlens run --from-script /path/to/memlens/examples/megatron-lm/deepseek_moe.sh --ranks all
set -euo pipefail

GPUS_PER_NODE=8
NNODES=4
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-localhost}

CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES \
    --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port 6000 \
    pretrain_gpt.py \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 \
    --expert-model-parallel-size 8 \
    --num-layers 28 --hidden-size 2048 --ffn-hidden-size 10944 \
    --num-attention-heads 16 \
    --seq-length 4096 --max-position-embeddings 4096 \
    --position-embedding-type rope \
    --normalization RMSNorm --swiglu --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --attention-dropout 0.0 --hidden-dropout 0.0 \
    --num-experts 64 --moe-router-topk 6 --moe-ffn-hidden-size 1408 \
    --moe-shared-expert-intermediate-size 2816 --moe-layer-freq "([0]+[1]*27)" \
    --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-3 \
    --moe-token-dispatcher-type alltoall --moe-grouped-gemm \
    --micro-batch-size 2 --global-batch-size 1024 \
    --train-iters 500000 --lr 4.2e-4 --min-lr 4.2e-5 --lr-decay-style cosine \
    --lr-warmup-iters 2000 --weight-decay 0.1 --clip-grad 1.0 \
    --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 \
    --bf16 --use-distributed-optimizer \
    --tokenizer-type NullTokenizer --vocab-size 102399 \
    --mock-data \
    --save checkpoints/deepseek_moe --save-interval 1000 --log-interval 10 --eval-iters 10
