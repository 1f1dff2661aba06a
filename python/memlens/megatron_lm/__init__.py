"""The import path `integrations/megatron-lm.patch` calls (`memlens.megatron_lm.prepare()`,
`session()`), kept for Megatron-LM checkouts the patch was applied to; the code is
`memlens.plugins.megatron_lm`."""

from ..plugins.megatron_lm import FLAG, SNAPSHOT_FLAG, enabled, prepare, session, snapshot_path

__all__ = ["FLAG", "SNAPSHOT_FLAG", "enabled", "prepare", "session", "snapshot_path"]
