#!/bin/bash
# Llama-3-8B pretraining with Megatron-LM: 64 GPUs (8 nodes x 8),
# tensor parallel 4 x pipeline parallel 2 x data parallel 8, sequence 8192, micro-batch 1,
# bf16, sequence parallel, distributed optimizer.
#
# Run from a Megatron-LM checkout (pretrain_gpt.py is relative to it). On the cluster each node
# runs this with its NODE_RANK; memlens reads the torchrun line and traces every rank here:
#   memlens run --from-script /path/to/memlens/examples/megatron-lm/llama3_8b.sh --ranks all
set -euo pipefail

GPUS_PER_NODE=8
NNODES=8
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-localhost}

CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES \
    --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port 6000 \
    pretrain_gpt.py \
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --sequence-parallel \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 \
    --num-attention-heads 32 --group-query-attention --num-query-groups 8 \
    --seq-length 8192 --max-position-embeddings 8192 \
    --position-embedding-type rope --rotary-base 500000 \
    --normalization RMSNorm --swiglu --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --attention-dropout 0.0 --hidden-dropout 0.0 \
    --micro-batch-size 1 --global-batch-size 512 \
    --train-iters 250000 --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine \
    --lr-warmup-iters 2000 --weight-decay 0.1 --clip-grad 1.0 \
    --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.02 \
    --bf16 --use-distributed-optimizer \
    --tokenizer-type NullTokenizer --vocab-size 128255 \
    --mock-data \
    --save checkpoints/llama3_8b --save-interval 1000 --log-interval 10 --eval-iters 10
# NullTokenizer adds one token (end of document): 128255 + 1 = Llama-3's 128256.
