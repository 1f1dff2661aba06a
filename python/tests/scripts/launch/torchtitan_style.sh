#!/usr/bin/env bash
# Run the tiny trainer as a module, in the style of torchtitan's run script: settings come from
# the environment with defaults (NGPU=2 bash torchtitan_style.sh), the script's own arguments
# are forwarded as overrides, a sourced env file, a prefix variable on the torchrun line.
set -eo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/env/cluster.env"

NGPU=${NGPU:-8}
LAYERS=${LAYERS:-3}
overrides=()
if [ $# -ne 0 ]; then
    overrides=("$@")
fi

cd "$HERE"
LAUNCH_STYLE=titan \
torchrun --standalone --nproc_per_node="${NGPU}" --local-ranks-filter 0 --role rank --tee 3 \
    -m tiny_train --num-layers "$LAYERS" --hidden-size $((HIDDEN_BASE * 2)) "${overrides[@]}"
