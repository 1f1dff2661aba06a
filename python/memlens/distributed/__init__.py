"""Simulating one rank of a distributed job (see DESIGN.md, Simulation/distributed).

- env.py: the rank's identity and the environment torchrun would give it;
- layout.py: what the traced rank built (meshes, process groups, who used them);
- roles.py: which ranks of the job are provably alike, so one traces for all;
- parallel_runs.py: `--ranks all`: one worker process per distinct rank, table, index file.

The patches of torch.distributed themselves live in memlens/patches/torch_distributed.py.
"""

from .env import RankSpec

__all__ = ["RankSpec"]
