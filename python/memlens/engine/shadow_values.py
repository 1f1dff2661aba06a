"""The values of small device tensors made from host data, kept beside their fake tensors.

A fake tensor has no values, so a trace answers placeholders where code reads one. Some models
compute shapes and loop counts from values the host gave them: Qwen2-VL's vision tower builds
its position ids from `image_grid_thw.tolist()`, and its language model's multimodal rotary
indices from the token ids. Those tensors come from the host (the processor's output moved to
the GPU, `torch.tensor([...], device="cuda")`), and a real run's values are known there.

So a fake tensor made from host data of at most LIMIT elements carries a shadow: a real CPU
tensor with its values. An op whose fake inputs all carry shadows (and whose other inputs are
host tensors or plain values) is run for real on the shadows too, and each fake result of at
most LIMIT elements carries the real result; so do deterministic factories of such size
(`torch.arange(n, device="cuda")`). In-place ops update the shadows they write to, or drop
them where an input has none. Values read from a fake tensor with a shadow (`item`, `tolist`,
a bool test) are the shadow's; a result whose size depends on values (`nonzero`, `x[mask]`)
takes the shadow's real size. Everything else stays fake: a weight, an activation, anything
computed from them has no shadow, and reads of it are placeholders as before.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

SHADOW = "_memlens_shadow"
LIMIT = 1 << 16  # elements: token ids of a batch, grids, masks; never activations or weights
_NONDETERMINISTIC = torch.Tag.nondeterministic_seeded
_UNDEFINED = (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
              torch.ops.aten.empty_like.default, torch.ops.aten.new_empty.default,
              torch.ops.aten.new_empty_strided.default)


def shadow_of(t):
    """The real values of `t`: a host tensor's own, a fake tensor's shadow (or the constant
    FakeTensorMode keeps of a one-element tensor made from host data), or None."""
    if isinstance(t, FakeTensor):
        shadow = getattr(t, SHADOW, None)
        return shadow if shadow is not None else t.constant
    return t


def _flat(x, into: list) -> None:
    if isinstance(x, (list, tuple)):
        for item in x:
            _flat(item, into)
    else:
        into.append(x)


def _host_args(x):
    """`x` with every tensor replaced by its real values and every device by the host's;
    _MISSING where some tensor has none. (An uninitialized result, `empty_like` of a tensor
    with values, has none: carry leaves such ops out.)"""
    if isinstance(x, (list, tuple)):
        items = [_host_args(item) for item in x]
        if any(item is _MISSING for item in items):
            return _MISSING
        return type(x)(items) if isinstance(x, list) else tuple(items)
    if isinstance(x, torch.Tensor):
        real = shadow_of(x)
        return _MISSING if real is None else real
    if isinstance(x, torch.device):
        return torch.device("cpu")
    return x


_MISSING = object()


def carry(func, args, kwargs, out) -> None:
    """After a fake op: give its fake results the real values, where all its inputs have
    them; drop the shadows it wrote over where they do not."""
    if func is _COPY:
        _copied(args[0], args[1])
        return
    inputs: list = []
    _flat(args, inputs)
    _flat(list(kwargs.values()), inputs)
    fakes = [t for t in inputs if isinstance(t, FakeTensor)]
    shadowed = all(shadow_of(t) is not None for t in fakes)
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    if not shadowed or func in _UNDEFINED or \
            _NONDETERMINISTIC in func.tags or any(t.numel() > LIMIT for t in tensors):
        _drop_written(func, args)
        return
    results: list = []
    _flat(out if isinstance(out, (list, tuple)) else [out], results)
    fake_results = [r for r in results if isinstance(r, FakeTensor)]
    if not fake_results or any(r.numel() > LIMIT for r in fake_results):
        _drop_written(func, args)
        return
    real_args, real_kwargs = _host_args(args), _host_args(tuple(kwargs.values()))
    if real_args is _MISSING or real_kwargs is _MISSING:
        _drop_written(func, args)
        return
    try:
        with unset_fake_temporarily(), torch._C._DisableTorchDispatch():
            real = func(*real_args, **dict(zip(kwargs, real_kwargs)))
    except Exception:  # an op the host cannot run (a CUDA-only kernel): no values
        _drop_written(func, args)
        return
    real_results: list = []
    _flat(real if isinstance(real, (list, tuple)) else [real], real_results)
    for fake, value in zip(results, real_results):
        if isinstance(fake, FakeTensor) and isinstance(value, torch.Tensor):
            setattr(fake, SHADOW, value)


_COPY = torch.ops.aten.copy_.default


def _copied(dst, src) -> None:
    """`dst.copy_(src)` (a host batch copied into a device buffer): dst has src's values,
    broadcast and cast as copy_ does, where src's are known."""
    if not isinstance(dst, FakeTensor):
        return
    value = shadow_of(src)
    if value is None or dst.numel() > LIMIT or not isinstance(value, torch.Tensor):
        if hasattr(dst, SHADOW):
            delattr(dst, SHADOW)
        return
    with unset_fake_temporarily(), torch._C._DisableTorchDispatch():
        setattr(dst, SHADOW, value.to(dst.dtype).expand(dst.shape).clone())


def _drop_written(func, args) -> None:
    """An op that writes into its arguments without all values known: what it wrote over
    has no known values any more."""
    schema = func._schema
    if not schema.is_mutable:
        return
    for arg, value in zip(schema.arguments, args):
        if arg.alias_info is not None and arg.alias_info.is_write and \
                isinstance(value, FakeTensor) and hasattr(value, SHADOW):
            delattr(value, SHADOW)


def sized_by_shadows(func, args, kwargs):
    """An op whose result's size depends on values, where its inputs' values are all known:
    its real result (computed on the host), or None."""
    inputs: list = []
    _flat(args, inputs)
    _flat(list(kwargs.values()), inputs)
    if not any(isinstance(t, FakeTensor) for t in inputs):
        return None
    real_args, real_kwargs = _host_args(args), _host_args(tuple(kwargs.values()))
    if real_args is _MISSING or real_kwargs is _MISSING:
        return None
    with unset_fake_temporarily(), torch._C._DisableTorchDispatch():
        return func(*real_args, **dict(zip(kwargs, real_kwargs)))


def sized_result(func, args, kwargs):
    """The fake results of an op whose size depends on values, at their real sizes and carrying
    their values, where its inputs' values are all known; else None."""
    real = sized_by_shadows(func, args, kwargs)
    if real is None:
        return None
    inputs: list = []
    _flat(args, inputs)
    device = next(t.device for t in inputs if isinstance(t, FakeTensor))

    def fake(value):
        if not isinstance(value, torch.Tensor):
            return value
        out = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)
        setattr(out, SHADOW, value)
        return out

    return tuple(map(fake, real)) if isinstance(real, (list, tuple)) else fake(real)


def small_values(t, limit: int) -> tuple | None:
    """The values known of a tensor of at most `limit` elements, flat, as Python numbers (a
    cache's window size kept as a tensor); None where none are known or it is larger."""
    real = shadow_of(t)
    if not isinstance(real, torch.Tensor) or real.numel() > limit:
        return None
    with unset_fake_temporarily(), torch._C._DisableTorchDispatch():
        return tuple(real.reshape(-1).tolist())


def give_values(t, values: tuple) -> None:
    """`t` (a fake tensor a replay made) carries `values`, as the traced one did."""
    with unset_fake_temporarily(), torch._C._DisableTorchDispatch():
        setattr(t, SHADOW, torch.tensor(values, dtype=t.dtype).reshape(t.shape))


def share_values(alias, t) -> None:
    """`alias`, a fake tensor standing for `t`'s memory (a CUDA graph's weak reference to its
    static output), carries `t`'s values: the graph's replays write the same there."""
    real = shadow_of(t)
    if isinstance(real, torch.Tensor) and tuple(real.shape) == tuple(alias.shape):
        setattr(alias, SHADOW, real)
