"""Checkpoints a traced script writes stay inside the trace: no file of the user's is written.

A traced step's tensors hold no data, so a checkpoint it writes (`torch.save` of a state dict,
`torch.distributed.checkpoint.save`) would put data-less files where the user keeps real ones:
over a real checkpoint, or as one a later real run finds and resumes from. During a trace:

- `torch.save(obj, path)` serializes into memory (torch's own pickling: fake tensors as the
  meta tensors of their shapes, torch_values.py), and `torch.load(path)` of a path saved in this
  trace reads it back from there; a file object given by the script is written as asked;
- `torch.distributed.checkpoint`'s file-system writers (FileSystemWriter and what derives from
  it) write into a folder of the trace's own (removed when the trace ends), and its
  FileSystemReader reads a checkpoint saved in this trace from there;

each with a note naming the path. What the script reads that it did not save in this trace is
read from disk as before.
"""

from __future__ import annotations

import functools
import io
import os
import shutil
import tempfile
from typing import Any, Callable

import torch

from .patcher import Patcher, check_tested


class CheckpointStore:
    """What the trace saved: files by path (bytes), checkpoint folders by path (their stand-in
    folder under `root`)."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self.note = note
        self.files: dict[str, bytes] = {}
        self.folders: dict[str, str] = {}
        self.root: str | None = None

    def folder_for(self, path: Any) -> str:
        key = _key(path)
        if key not in self.folders:
            if self.root is None:
                self.root = tempfile.mkdtemp(prefix="memlens-checkpoints-")
            self.folders[key] = os.path.join(self.root, str(len(self.folders)))
            self.note(f"torch.distributed.checkpoint to {path}: written into a folder of the "
                      "trace's own, not there (a traced checkpoint holds no data)")
        return self.folders[key]

    def remove(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


def _key(path: Any) -> str:
    return os.path.abspath(os.fspath(path))


def _path(f: Any) -> str | None:
    """The file `f` names, if it is a path (not a file object)."""
    return _key(f) if isinstance(f, (str, os.PathLike)) else None


def apply(patcher: Patcher, note: Callable[[str], None]) -> CheckpointStore:
    """`note(text)`: say it once in the report and the snapshot."""
    check_tested("checkpoint_files", torch.__version__)
    store = CheckpointStore(note)
    patcher.defer(store.remove)
    original_save, original_load = torch.save, torch.load

    @functools.wraps(original_save)
    def save(obj, f, *args, **kwargs):
        path = _path(f)
        if path is None:
            return original_save(obj, f, *args, **kwargs)
        buffer = io.BytesIO()
        original_save(obj, buffer, *args, **kwargs)
        if path not in store.files:
            note(f"torch.save to {os.fspath(f)}: kept in the trace's memory, not written (a "
                 "traced checkpoint holds no data)")
        store.files[path] = buffer.getvalue()
        return None

    @functools.wraps(original_load)
    def load(f, *args, **kwargs):
        path = _path(f)
        if path is not None and path in store.files:
            return original_load(io.BytesIO(store.files[path]), *args, **kwargs)
        return original_load(f, *args, **kwargs)

    patcher.setattr(torch, "save", save)
    patcher.setattr(torch, "load", load)
    patcher.setattr(torch.serialization, "save", save)
    patcher.setattr(torch.serialization, "load", load)
    _distributed_checkpoints(patcher, store)
    return store


def _distributed_checkpoints(patcher: Patcher, store: CheckpointStore) -> None:
    try:
        from torch.distributed.checkpoint import filesystem
    except ImportError:  # a build without torch.distributed
        return
    # Writers and readers take their folder at construction and again in `reset(checkpoint_id)`
    # (what `dcp.save(..., checkpoint_id=...)` calls): both are mapped.
    writer, reader = filesystem._FileSystemWriter, filesystem.FileSystemReader
    writer_init, writer_reset = writer.__init__, writer.reset
    reader_init, reader_reset = reader.__init__, reader.reset

    def saved(path):
        return store.folders.get(_key(path), path) if path else path

    @functools.wraps(writer_init)
    def init_writer(self, path, *args, **kwargs):
        writer_init(self, store.folder_for(path), *args, **kwargs)

    @functools.wraps(writer_reset)
    def reset_writer(self, checkpoint_id=None):
        writer_reset(self, store.folder_for(checkpoint_id) if checkpoint_id else None)

    @functools.wraps(reader_init)
    def init_reader(self, path, *args, **kwargs):
        reader_init(self, saved(path), *args, **kwargs)

    @functools.wraps(reader_reset)
    def reset_reader(self, checkpoint_id=None):
        reader_reset(self, saved(checkpoint_id))

    patcher.setattr(writer, "__init__", init_writer)
    patcher.setattr(writer, "reset", reset_writer)
    patcher.setattr(reader, "__init__", init_reader)
    patcher.setattr(reader, "reset", reset_reader)
