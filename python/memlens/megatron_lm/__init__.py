"""Megatron-LM's `--memory-tracing` flag. `integrations/megatron-lm.patch` imports this path
(`memlens.megatron_lm.prepare()`, `session()`); the code is `memory_tracing.py`."""

from .memory_tracing import FLAG, SNAPSHOT_FLAG, enabled, prepare, session, snapshot_path

__all__ = ["FLAG", "SNAPSHOT_FLAG", "enabled", "prepare", "session", "snapshot_path"]
