"""safetensors (Hugging Face checkpoints: `save_pretrained`, the Trainer's checkpoints) with
fake tensors.

Activated when `safetensors.torch` is imported inside a trace; patched right after its body has
run, so modules that then bind its functions by name (`transformers.pytorch_utils` binds
`storage_ptr`, `transformers.modeling_utils` binds `save_file`) bind the patched ones. Undone
when the trace ends.

- `storage_ptr`: a fake tensor's storage has no address (every one answers 0, with a warning),
  so every tensor of a state dict would look like one shared storage and saving refuses tied
  weights that are not tied. A fake tensor answers its storage's identity instead, as unique and
  as stable as an address.
- `save_file` / `save`: safetensors copies each tensor's bytes from its address; a fake tensor has
  none. The file is written with the real tensors only; each fake tensor's dtype and shape go into
  the header's metadata (`memlens.fake_tensors`), and a note says which file left out how many.
  Writing zeros instead would write a model's full size to disk for a trace.
- `safe_open` (in safetensors and in the modules that bind it by name: safetensors.torch,
  transformers' modeling_utils and modeling_layers): reading a checkpoint makes fake tensors of
  the stored shapes and dtypes without reading the data (fake_checkpoint.py).
"""

from __future__ import annotations

import functools
import json
import os
from types import ModuleType

from ...patches import checkpoint_files
from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin
from .fake_checkpoint import METADATA_KEY, fake_safe_open




def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


# Modules that bind `safe_open` by name (`from safetensors import safe_open`) at import; the
# package itself binds it from its extension module (patched first, as it is imported).
_BINDS_SAFE_OPEN = ("safetensors", "transformers.modeling_utils", "transformers.modeling_layers")


class Plugin(LibraryPlugin):
    watches = {"safetensors._safetensors_rust": "extension", "safetensors.torch": "patch",
               **{name: "bind_safe_open" for name in _BINDS_SAFE_OPEN}}

    def extension(self, mod: ModuleType) -> None:
        check_tested("hf_safetensors", getattr(mod, "__version__", "0"))
        self._original_safe_open = mod.safe_open
        self._safe_open = fake_safe_open(mod.safe_open, self.tracer.accountant.made_fake)
        self.patcher.setattr(mod, "safe_open", self._safe_open)

    def bind_safe_open(self, mod: ModuleType) -> None:
        original = getattr(self, "_original_safe_open", None)
        if original is not None and getattr(mod, "safe_open", None) is original:
            self.patcher.setattr(mod, "safe_open", self._safe_open)

    def patch(self, mod: ModuleType) -> None:
        import safetensors

        check_tested("hf_safetensors", getattr(safetensors, "__version__", "0"))
        self.bind_safe_open(mod)
        original_ptr = mod.storage_ptr

        @functools.wraps(original_ptr)
        def storage_ptr(tensor):
            if _is_fake(tensor):
                return tensor.untyped_storage()._cdata
            return original_ptr(tensor)

        self.patcher.setattr(mod, "storage_ptr", storage_ptr)
        original_save_file, original_save = mod.save_file, mod.save

        @functools.wraps(original_save_file)
        def save_file(tensors, filename, metadata=None):
            real, metadata = self._leave_out_fakes(tensors, metadata, f"save_file {filename}")
            if len(real) < len(tensors) and os.path.exists(filename):
                filename = checkpoint_files.redirected(filename)  # never over the user's file
            return original_save_file(real, filename, metadata=metadata)

        @functools.wraps(original_save)
        def save(tensors, metadata=None):
            real, metadata = self._leave_out_fakes(tensors, metadata, "save")
            return original_save(real, metadata=metadata)

        self.patcher.setattr(mod, "save_file", save_file)
        self.patcher.setattr(mod, "save", save)

    def _leave_out_fakes(self, tensors: dict, metadata: dict | None, what: str):
        """(the real tensors, the metadata with the fake ones' dtypes and shapes)."""
        fakes = {k: v for k, v in tensors.items() if _is_fake(v)}
        if not fakes:
            return tensors, metadata
        specs = {k: [str(v.dtype).replace("torch.", ""), list(v.shape)] for k, v in fakes.items()}
        self.tracer.notes.append(f"safetensors.{what}: {len(fakes)} fake tensors left out (a "
                                 f"trace has no values; dtypes and shapes in the header's "
                                 f"metadata, {METADATA_KEY})")
        real = {k: v for k, v in tensors.items() if k not in fakes}
        return real, {**(metadata or {}), METADATA_KEY: json.dumps(specs)}
