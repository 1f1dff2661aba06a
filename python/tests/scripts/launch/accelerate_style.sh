#!/bin/bash
# A quick one-process check, then the real run under accelerate on 4 GPUs in bf16.
set -eu
cd "$(dirname "$0")"
REPORT=${REPORT:?set REPORT to where the trainer writes its report}

python tiny_train.py --num-layers 1 --hidden-size 32 --train-iters 1 --report "$REPORT"

if [[ ${SKIP_TRAINING:-0} != 1 ]]; then
    accelerate launch --num_processes 4 --mixed_precision bf16 \
        tiny_train.py --num-layers 2 --hidden-size 64 --report "$REPORT"
fi
