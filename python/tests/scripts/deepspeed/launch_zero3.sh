#!/bin/bash
# ZeRO-3 on one node of 4 GPUs, as DeepSpeed's tutorials launch it.
STAGE=3
deepspeed --num_gpus 4 "$(dirname "$0")/zero_mlp.py" --stage "$STAGE"
