"""safetensors checkpoints read as fake tensors: the stored shapes and dtypes, no data read.

`from_pretrained` of a local checkpoint (transformers 5: `safe_open(...).get_slice(k)` per
tensor, materialized with `slice[...]`), `safetensors.torch.load_file` (PEFT adapters, the
Trainer's resume) and any `safe_open(...).get_tensor(k)` made the tensor from the file's bytes:
a real host tensor of the checkpoint's full size (3.3 GiB of host RSS for a 0.5B bf16 model, a
70B one would not fit in the machine), and real parameters the rest of the trace then treats
apart from the fake ones (`.to("cuda")` of a real parameter makes a new Parameter, where a
script's optimizer, built before, holds the old one: DeepSpeed's ZeRO-2 failed on it).

Inside a trace (a FakeTensorMode active in the calling thread), `safe_open` is a stand-in that
reads only the file's header (the real `safe_open` does, it maps the file without touching
it): every tensor it hands out is a new fake tensor of the stored shape and dtype (a slice's
`[...]` or `[a:b]` the shape that indexing gives) on the device `safe_open` was given.
Tensors memlens itself left out of a file it wrote in a trace (safetensors.py: the header's
`memlens.fake_tensors`) are read back the same way. Outside a fake mode it is the real one.
"""

from __future__ import annotations

import json

import torch

from ...patches import checkpoint_files


# Where a trace's save_file keeps the dtypes and shapes of the fake tensors it left out
# (safetensors.py).
METADATA_KEY = "memlens.fake_tensors"


def _fake_mode_active() -> bool:
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def _device(device) -> torch.device:
    return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)


class FakeSlice:
    """What `safe_open(...).get_slice(k)` returns: its shape and dtype, and a fake tensor for
    any index. `made_fake()`: the accountant's context in which a host tensor made from
    nothing is fake (a small one outside a module's constructor would be real)."""

    def __init__(self, shape: list[int], dtype_name: str, device: torch.device,
                 made_fake) -> None:
        self._shape, self._dtype_name, self._device = list(shape), dtype_name, device
        self._made_fake = made_fake

    def get_shape(self) -> list[int]:
        return list(self._shape)

    def get_dtype(self) -> str:
        return self._dtype_name

    def __getitem__(self, index) -> torch.Tensor:
        from safetensors.torch import _getdtype

        shape = torch.empty(self._shape, device="meta")[index].shape  # the indexed shape
        with self._made_fake():
            return torch.empty(shape, dtype=_getdtype(self._dtype_name), device=self._device)


class FakeSafeOpen:
    """`safetensors.safe_open` handing out fake tensors (the module's docstring)."""

    def __init__(self, real, device, made_fake) -> None:
        self._real, self._device, self._made_fake = real, _device(device), made_fake
        self._left_out: dict[str, tuple[str, list[int]]] = {}
        metadata = real.metadata() or {}
        if METADATA_KEY in metadata:  # written by a trace: dtypes as torch spells them
            from safetensors.torch import _TYPES

            names = {str(v).replace("torch.", ""): k for k, v in _TYPES.items()}
            for key, (dtype, shape) in json.loads(metadata[METADATA_KEY]).items():
                self._left_out[key] = (names[dtype], shape)

    def __enter__(self) -> "FakeSafeOpen":
        self._real.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        return self._real.__exit__(*exc)

    def keys(self) -> list[str]:
        return [*self._real.keys(), *self._left_out]

    def offset_keys(self) -> list[str]:
        return [*self._real.offset_keys(), *self._left_out]

    def metadata(self):
        return self._real.metadata()

    def get_slice(self, name: str) -> FakeSlice:
        if name in self._left_out:
            dtype, shape = self._left_out[name]
            return FakeSlice(shape, dtype, self._device, self._made_fake)
        real = self._real.get_slice(name)
        return FakeSlice(real.get_shape(), real.get_dtype(), self._device, self._made_fake)

    def get_tensor(self, name: str) -> torch.Tensor:
        return self.get_slice(name)[...]

    def get_tensors(self) -> dict[str, torch.Tensor]:
        return {name: self.get_tensor(name) for name in self.offset_keys()}


def fake_safe_open(original, made_fake):
    """A `safe_open` that is FakeSafeOpen inside a fake mode and `original` elsewhere."""

    def safe_open(filename, framework, device="cpu", **kwargs):
        # a file saved in this trace was written elsewhere (patches/checkpoint_files.py)
        real = original(checkpoint_files.saved_at(filename), framework, device=device, **kwargs)
        if framework not in ("pt", "torch") or not _fake_mode_active():
            return real
        return FakeSafeOpen(real, device, made_fake)

    safe_open.__wrapped__ = original
    return safe_open
