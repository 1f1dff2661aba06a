#!/bin/bash
# Pretrain with the stand-in on one node of 4 GPUs (TP 2, PP 2), written as Megatron-LM's example
# launch scripts are: exported CUDA/NCCL settings that Megatron checks, positional paths, bash
# arrays expanded both unquoted and quoted.
#   bash launch_pretrain.sh DATA_PREFIX [CHECKPOINT_PATH] [EXTRA ARGS...]

export CUDA_DEVICE_MAX_CONNECTIONS=1  # tensor parallelism needs it
export NCCL_ALGO=Ring                 # --deterministic-mode needs it
export NCCL_IB_TIMEOUT=19

DATA_PATH=$1
CHECKPOINT_PATH=${2:-/tmp/stub-checkpoints}
shift 2
HERE=$(dirname "$(readlink -f "$0")")

DISTRIBUTED_ARGS=(
    --nproc_per_node 4
    --nnodes 1
    --master_addr localhost
    --master_port 6000
)

MODEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 2
    --num-layers 4
    --hidden-size 128
    --num-attention-heads 4
    --seq-length 64
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 32
    --train-iters 1000
    --lr-warmup-iters 10
    --bf16
    --deterministic-mode
)

DATA_ARGS=(
    --data-path 0.5 "${DATA_PATH}_a_text_document" 0.5 "${DATA_PATH}_b_text_document"
    --split 949,50,1
    --data-cache-path "$CHECKPOINT_PATH/cache"
    --vocab-size 1000
    --tokenizer-type GPT2BPETokenizer
)

cd "$HERE"
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_stub.py \
    "${MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    --save "$CHECKPOINT_PATH" --load "$CHECKPOINT_PATH" "$@"
