#!/bin/bash
# Pretrain the tiny model on 2 nodes of 4 GPUs, written the way Megatron-LM's example launch
# scripts are: exported CUDA/NCCL settings, positional arguments with defaults, bash arrays of
# arguments, arithmetic, and a cd to the code before torchrun.
#   bash megatron_style.sh [CHECKPOINT_PATH] [HIDDEN_SIZE]
set -euo pipefail

export CUDA_DEVICE_MAX_CONNECTIONS=1
export NCCL_IB_SL=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

CHECKPOINT_PATH=${1:-checkpoints/tiny}
HIDDEN_SIZE=${2:-256}
LOG_DIR=${LOG_DIR:-$PWD/logs}
CODE_DIR=$(dirname "$(readlink -f "$0")")

GPUS_PER_NODE=4
NUM_NODES=2
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-6000}
NODE_RANK=${NODE_RANK:-0}
WORLD_SIZE=$((GPUS_PER_NODE * NUM_NODES))

DISTRIBUTED_ARGS=(
    --nproc_per_node "$GPUS_PER_NODE"
    --nnodes "$NUM_NODES"
    --node_rank "$NODE_RANK"
    --master_addr "$MASTER_ADDR"
    --master_port "$MASTER_PORT"
)

MODEL_ARGS=(
    --num-layers 2
    --hidden-size "$HIDDEN_SIZE"
    --ffn-hidden-size $((4 * HIDDEN_SIZE))
)

TRAINING_ARGS=(
    --micro-batch-size 2
    --global-batch-size $((2 * WORLD_SIZE))
    --train-iters 100
    --save "$CHECKPOINT_PATH"
    --report "$LOG_DIR/report-{rank}.json"
)

mkdir -p "$LOG_DIR"
echo "launching on $WORLD_SIZE GPUs" >> "$LOG_DIR/launches.log"
cd "$CODE_DIR"
torchrun "${DISTRIBUTED_ARGS[@]}" tiny_train.py \
    "${MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}"
