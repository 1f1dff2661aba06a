"""`memlens fit --ray auto|ADDRESS|local`: each trace a Ray task.

A task declares what one trace needs (`--ray-cpus`, `--ray-memory`: one core and 2 GiB of host
memory by default) and runs the same worker process as the local runner, in a temporary folder
of the node it lands on; it returns the result with the files the trace wrote, which the
driver puts into the run folder. So the nodes need the job's files at the same paths (a shared
file system, or the same checkout) but not the driver's disk. Results come back as they
finish; a task that fails is reported like a worker that failed (the driver retries it once).

Ray is optional (`pip install memlens[ray]`): it is imported only here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import MemlensError
from .trace_point import trace

DEFAULT_MEMORY = 2 << 30


def _trace_task(request: dict[str, Any]) -> dict[str, Any]:
    """Body of the Ray task: trace in a temporary folder, return the result and its files."""
    folder = Path(tempfile.mkdtemp(prefix="memlens-fit-"))
    try:
        result = trace(request, folder)
        files = {str(p.relative_to(folder)): p.read_bytes()
                 for p in sorted(folder.rglob("*")) if p.is_file()}
        return {"result": result, "files": files}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class RayRunner:
    def __init__(self, address: str, jobs: int | None, cpus: float = 1.0,
                 memory: int = DEFAULT_MEMORY):
        try:
            import ray
        except ImportError:
            raise MemlensError("--ray needs Ray: pip install 'memlens[ray]'") from None
        self._ray = ray
        self._started = False
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        if not ray.is_initialized():
            runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
                p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)}}
            kwargs: dict[str, Any] = {"runtime_env": runtime_env, "log_to_driver": False}
            if address == "local":
                kwargs.update(num_cpus=jobs or os.cpu_count() or 1, include_dashboard=False)
            elif address != "auto" or not os.environ.get("RAY_ADDRESS"):
                kwargs["address"] = address
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise MemlensError(f"cannot reach the Ray cluster at {address}: {e}") from None
            self._started = True
        self._task = ray.remote(_trace_task).options(num_cpus=cpus, memory=memory,
                                                     max_retries=0)
        cluster_cpus = int(ray.cluster_resources().get("CPU", 1) // max(cpus, 1e-9))
        self.slots = max(1, jobs or cluster_cpus)
        self._pending: dict[Any, tuple[Any, Path]] = {}
        self.description = f"Ray ({self.slots} tasks at a time, {cluster_cpus} fit the cluster)"

    def submit(self, tag: Any, request: dict[str, Any], folder: Path) -> None:
        self._pending[self._task.remote(request)] = (tag, folder)

    def in_flight(self) -> int:
        return len(self._pending)

    def wait(self) -> list[tuple[Any, dict[str, Any]]]:
        ready, _ = self._ray.wait(list(self._pending), num_returns=1)
        out = []
        for ref in ready:
            tag, folder = self._pending.pop(ref)
            try:
                answer = self._ray.get(ref)
            except Exception as e:  # the task or its node failed
                out.append((tag, {"status": "error", "retry": True, "error": {
                    "kind": "RayTaskFailed", "message": str(e).splitlines()[0][:500]}}))
                continue
            folder.mkdir(parents=True, exist_ok=True)
            for name, data in answer["files"].items():
                path = folder / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            out.append((tag, answer["result"]))
        return out

    def close(self, cancel: bool = False) -> None:
        if cancel:
            for ref in list(self._pending):
                self._ray.cancel(ref, force=True)
        self._pending.clear()
        if self._started:
            self._ray.shutdown()
