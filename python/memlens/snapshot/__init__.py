"""The snapshot: a versioned JSON document, the contract between the engine and its readers."""

from .build import FORMAT, VERSION, build_snapshot
from .io import read_snapshot, validate_snapshot, write_snapshot

__all__ = ["FORMAT", "VERSION", "build_snapshot", "read_snapshot", "validate_snapshot",
           "write_snapshot"]
