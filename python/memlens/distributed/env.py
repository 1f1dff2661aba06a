"""The simulated rank's identity, and the environment torchrun would give its process."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import MemlensError

MASTER_ADDR = "127.0.0.1"
MASTER_PORT = "29500"  # torchrun's default
GPUS_PER_NODE = 8


def default_nproc_per_node(world_size: int) -> int:
    """Without a launch line that says it: nodes of 8 GPUs, or one node for a job that does not
    fill whole nodes of 8."""
    if world_size > GPUS_PER_NODE and world_size % GPUS_PER_NODE == 0:
        return GPUS_PER_NODE
    return world_size


@dataclass(frozen=True)
class RankSpec:
    """Rank `rank` of a job of `world_size` processes, `nproc_per_node` on each node (torchrun's
    --nproc_per_node; the whole job on one node when not given)."""

    world_size: int
    rank: int = 0
    nproc_per_node: int | None = None

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise MemlensError(f"--world-size must be at least 1, not {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise MemlensError(f"--rank {self.rank} is outside the job: ranks are 0 to "
                               f"{self.world_size - 1}")
        per_node = self.local_world_size
        if self.world_size % per_node:
            raise MemlensError(f"a world size of {self.world_size} does not split into nodes "
                               f"of {per_node} processes")

    @property
    def local_world_size(self) -> int:
        return self.nproc_per_node or self.world_size

    @property
    def local_rank(self) -> int:
        return self.rank % self.local_world_size

    @property
    def node_rank(self) -> int:
        return self.rank // self.local_world_size

    @property
    def nnodes(self) -> int:
        return self.world_size // self.local_world_size

    def with_rank(self, rank: int) -> "RankSpec":
        return RankSpec(self.world_size, rank, self.nproc_per_node)

    def env(self) -> dict[str, str]:
        """The variables torchrun sets for a worker (torch/distributed/elastic/agent/server/
        local_elastic_agent.py), for this rank."""
        return {
            "WORLD_SIZE": str(self.world_size),
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.node_rank),
            "GROUP_WORLD_SIZE": str(self.nnodes),
            "ROLE_RANK": str(self.rank),
            "ROLE_WORLD_SIZE": str(self.world_size),
            "ROLE_NAME": "default",
            "MASTER_ADDR": MASTER_ADDR,
            "MASTER_PORT": MASTER_PORT,
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": "memlens",
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        }

    def to_json(self) -> dict:
        return {"world_size": self.world_size, "rank": self.rank,
                "local_rank": self.local_rank, "local_world_size": self.local_world_size}
