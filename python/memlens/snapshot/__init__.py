"""The snapshot: a versioned JSON document, the contract between the engine and its readers.

The builder is imported when first used: build.py imports torch (seconds), which a reader of
snapshots (`memlens show`, the language server's `snapshot.digest`) must not."""

from .io import FORMAT, VERSION, read_snapshot, validate_snapshot, write_snapshot

__all__ = ["FORMAT", "VERSION", "build_snapshot", "read_snapshot", "validate_snapshot",
           "write_snapshot"]


def __getattr__(name: str):
    if name == "build_snapshot":
        from .build import build_snapshot

        return build_snapshot
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
