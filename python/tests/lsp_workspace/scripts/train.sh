#!/usr/bin/env bash
# Train the example GPT with torchrun (one process: the test machine has no GPU).
set -euo pipefail
NPROC=${NPROC:-1}
torchrun --standalone --nproc_per_node=$NPROC train.py \
    --n-layer 1 --block-size 64 --batch-size 2 --dtype float32
