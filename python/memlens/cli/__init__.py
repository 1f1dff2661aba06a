"""The `memlens` command line.

    memlens run [--device NAME] [--iterations K] [--snapshot PATH] [--json] -- script.py [ARGS...]
    memlens run --world-size 64 --rank 0 -- train.py ARGS        # one simulated rank
    memlens run --world-size 64 --ranks all -- train.py ARGS     # every distinct rank
    memlens run --launch .vscode/launch.json:"Train 8B" [--ranks all]
    memlens run --from-script scripts/train_llama.sh[:LINE] [--ranks all] [-- SCRIPT ARGS]
    memlens trace path/to/file.py:ClassOrFactory [--device NAME] [...]
    memlens fit --gpus 64 --micro-batch 1,2,4,8 --tp 1,2,4 --from-script train.sh  (docs/fit.md)
    memlens show SNAPSHOT [--json] [--html REPORT.html [--compare OTHER]]
    memlens export SNAPSHOT --memory-viz out.pickle
    memlens devices

torch is imported only once the command needs it: a CUDA target on a CPU-only torch build must
load the fake-CUDA library before torch is imported.
"""

from .main import main

__all__ = ["main"]
