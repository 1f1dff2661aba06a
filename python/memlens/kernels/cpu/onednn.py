"""Ask the oneDNN inside this torch build what a primitive will allocate, without running it.

PyTorch's CPU convolutions and low-precision matmuls go through ideep to oneDNN. Which memory
formats oneDNN picks (and so how large ideep's reorder buffers are) and how large a scratchpad
it books are decided at runtime by oneDNN's implementation list and blocking heuristics, from the
ISA, cache sizes and thread count (e.g. src/cpu/x64/matmul/brgemm_matmul_utils.cpp
`init_scratchpad`, common/memory_tracking.hpp `registrar_t::book`). No formula outside oneDNN
reproduces them, so this module creates the same primitive descriptors ideep would create and
queries them: creating a descriptor runs no kernel and allocates no tensor memory.

The oneDNN C API is linked into libtorch_cpu.so but not exported; `symbols.resolve` finds its
functions in the library's symbol table. Where that fails (a stripped build), `available()` is
False and callers fall back to an approximation.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass

from .symbols import resolve

P = ctypes.c_void_p
I64 = ctypes.c_int64
_ANCHOR = "_ZN2at15get_num_threadsEv"  # at::get_num_threads(), exported: gives the load address
_SIGNATURES = {
    "dnnl_engine_create": (ctypes.c_int, ctypes.POINTER(P), ctypes.c_int, ctypes.c_size_t),
    "dnnl_memory_desc_create_with_strides": (ctypes.c_int, ctypes.POINTER(P), ctypes.c_int,
                                             ctypes.POINTER(I64), ctypes.c_int, ctypes.POINTER(I64)),
    "dnnl_memory_desc_create_with_tag": (ctypes.c_int, ctypes.POINTER(P), ctypes.c_int,
                                         ctypes.POINTER(I64), ctypes.c_int, ctypes.c_int),
    "dnnl_memory_desc_destroy": (ctypes.c_int, P),
    "dnnl_memory_desc_equal": (ctypes.c_int, P, P),
    "dnnl_memory_desc_get_size": (ctypes.c_size_t, P),
    "dnnl_memory_desc_query": (ctypes.c_int, P, ctypes.c_int, P),
    "dnnl_primitive_attr_create": (ctypes.c_int, ctypes.POINTER(P)),
    "dnnl_primitive_attr_destroy": (ctypes.c_int, P),
    "dnnl_primitive_attr_set_scratchpad_mode": (ctypes.c_int, P, ctypes.c_int),
    "dnnl_primitive_attr_set_post_ops": (ctypes.c_int, P, P),
    "dnnl_post_ops_create": (ctypes.c_int, ctypes.POINTER(P)),
    "dnnl_post_ops_destroy": (ctypes.c_int, P),
    "dnnl_post_ops_append_sum": (ctypes.c_int, P, ctypes.c_float, ctypes.c_int32, ctypes.c_int),
    "dnnl_primitive_desc_destroy": (ctypes.c_int, P),
    "dnnl_primitive_desc_query": (ctypes.c_int, P, ctypes.c_int, ctypes.c_int, P),
    "dnnl_primitive_desc_query_md": (P, P, ctypes.c_int, ctypes.c_int),
    "dnnl_matmul_primitive_desc_create": (ctypes.c_int, ctypes.POINTER(P), P, P, P, P, P, P),
    "dnnl_convolution_forward_primitive_desc_create": (
        ctypes.c_int, ctypes.POINTER(P), P, ctypes.c_int, ctypes.c_int, P, P, P, P,
        ctypes.POINTER(I64), ctypes.POINTER(I64), ctypes.POINTER(I64), ctypes.POINTER(I64), P),
    "dnnl_convolution_backward_data_primitive_desc_create": (
        ctypes.c_int, ctypes.POINTER(P), P, ctypes.c_int, P, P, P,
        ctypes.POINTER(I64), ctypes.POINTER(I64), ctypes.POINTER(I64), ctypes.POINTER(I64), P, P),
    "dnnl_convolution_backward_weights_primitive_desc_create": (
        ctypes.c_int, ctypes.POINTER(P), P, ctypes.c_int, P, P, P, P,
        ctypes.POINTER(I64), ctypes.POINTER(I64), ctypes.POINTER(I64), ctypes.POINTER(I64), P, P),
}
# enum values from oneapi/dnnl/dnnl_types.h and dnnl_common_types.h (shipped in torch/include)
_CPU, _SCRATCHPAD_USER, _TAG_ANY = 1, 1, 1
_FORWARD_TRAINING, _CONVOLUTION_DIRECT = 64, 1
_QUERY_IMPL_INFO_STR = 8
_QUERY_STRIDES, _QUERY_NDIMS, _QUERY_INNER_NBLKS = 14, 256, 263
MD = {"src": (129, 0), "diff_src": (130, 0), "weights": (131, 0), "bias": (131, 1),
      "diff_weights": (132, 0), "diff_bias": (132, 1), "dst": (133, 0), "diff_dst": (134, 0),
      "scratchpad": (136, 0)}
DTYPES = {"float32": 3, "bfloat16": 2, "float16": 1}


@dataclass(frozen=True)
class Memory:
    """A tensor as ideep describes it to oneDNN: plain with its strides, or format `any`."""

    dims: tuple
    dtype: str
    strides: tuple | None = None  # None: format `any` (oneDNN chooses)

    @staticmethod
    def of(t, dims=None) -> "Memory":
        return Memory(tuple(dims or t.shape), str(t.dtype).replace("torch.", ""), tuple(t.stride()))

    def any(self) -> "Memory":
        return Memory(self.dims, self.dtype)


@dataclass(frozen=True)
class Layout:
    """A memory descriptor a primitive descriptor settled on."""

    nbytes: int
    blocked: bool  # inner blocks (e.g. aBcd16b), not a plain permutation of dims
    strides: tuple  # outer strides (for a plain layout: the element strides)
    same_as_given: bool  # equal to the plain descriptor the caller passed for it (no reorder)


@dataclass(frozen=True)
class Primitive:
    impl: str
    layouts: dict  # md name -> Layout (scratchpad: only nbytes matters)

    def nbytes(self, name: str) -> int:
        layout = self.layouts.get(name)
        return layout.nbytes if layout else 0


class _OneDNN:
    def __init__(self):
        import torch

        path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
        self.fn = {}
        addresses = resolve(path, set(_SIGNATURES), _ANCHOR) if os.path.exists(path) else None
        if addresses is None:
            return
        for name, (res, *argtypes) in _SIGNATURES.items():
            self.fn[name] = ctypes.CFUNCTYPE(res, *argtypes)(addresses[name])
        self.engine = P()
        if self.fn["dnnl_engine_create"](ctypes.byref(self.engine), _CPU, 0) != 0:
            self.fn = {}

    # -- descriptors -----------------------------------------------------------------------
    def md(self, m: Memory | None):
        if m is None:
            return None
        out, n = P(), len(m.dims)
        dims = (I64 * n)(*m.dims)
        if m.strides is None:
            status = self.fn["dnnl_memory_desc_create_with_tag"](ctypes.byref(out), n, dims,
                                                                   DTYPES[m.dtype], _TAG_ANY)
        else:
            status = self.fn["dnnl_memory_desc_create_with_strides"](
                ctypes.byref(out), n, dims, DTYPES[m.dtype], (I64 * n)(*m.strides))
        if status != 0:
            raise ValueError(f"oneDNN refused memory descriptor {m} ({status})")
        return out

    def attr(self, accumulate: bool = False):
        attr = P()
        self.fn["dnnl_primitive_attr_create"](ctypes.byref(attr))
        self.fn["dnnl_primitive_attr_set_scratchpad_mode"](attr, _SCRATCHPAD_USER)
        if accumulate:  # ideep::attr_t::fuse_sum(): dst += op(...)
            ops = P()
            self.fn["dnnl_post_ops_create"](ctypes.byref(ops))
            self.fn["dnnl_post_ops_append_sum"](ops, 1.0, 0, 0)
            self.fn["dnnl_primitive_attr_set_post_ops"](attr, ops)
            self.fn["dnnl_post_ops_destroy"](ops)
        return attr

    def describe(self, pd, given: dict) -> Primitive:
        name = ctypes.c_char_p()
        self.fn["dnnl_primitive_desc_query"](pd, _QUERY_IMPL_INFO_STR, 0, ctypes.byref(name))
        layouts = {}
        for kind, (what, index) in MD.items():
            md = self.fn["dnnl_primitive_desc_query_md"](pd, what, index)
            if not md:
                continue
            ndims, nblks = ctypes.c_int(), ctypes.c_int()
            self.fn["dnnl_memory_desc_query"](md, _QUERY_NDIMS, ctypes.byref(ndims))
            self.fn["dnnl_memory_desc_query"](md, _QUERY_INNER_NBLKS, ctypes.byref(nblks))
            strides_p = ctypes.POINTER(I64)()
            self.fn["dnnl_memory_desc_query"](md, _QUERY_STRIDES, ctypes.byref(strides_p))
            ndims = ndims.value
            same = False
            if kind in given and given[kind].strides is not None:
                user = self.md(given[kind])
                same = bool(self.fn["dnnl_memory_desc_equal"](md, user))
                self.fn["dnnl_memory_desc_destroy"](user)
            layouts[kind] = Layout(int(self.fn["dnnl_memory_desc_get_size"](md)), nblks.value > 0,
                                   tuple(strides_p[i] for i in range(ndims)) if strides_p else (),
                                   same)
        return Primitive(name.value.decode() if name.value else "", layouts)

    def create(self, creator: str, *args, given: dict, hint=None, keep: bool = False):
        pd = P()
        status = self.fn[creator](ctypes.byref(pd), *args)
        if status != 0:
            raise ValueError(f"oneDNN could not create {creator} ({status})")
        if keep:
            return pd
        try:
            return self.describe(pd, given)
        finally:
            self.fn["dnnl_primitive_desc_destroy"](pd)


@functools.cache
def _lib() -> _OneDNN:
    return _OneDNN()


def available() -> bool:
    return bool(_lib().fn)


def _cached(fn):
    """Cache a query per arguments and thread count: oneDNN sizes per-thread buffers with the
    OpenMP thread count current when a descriptor is created (torch.set_num_threads moves it)."""
    import torch

    @functools.lru_cache(maxsize=4096)
    def per_threads(threads, *args):
        return fn(*args)

    @functools.wraps(fn)
    def query(*args):
        return per_threads(torch.get_num_threads(), *args)

    return query


def _dims(values) -> ctypes.Array:
    return (I64 * len(values))(*values)


def _release(lib: _OneDNN, *objects) -> None:
    for kind, obj in objects:
        if obj:
            lib.fn[f"dnnl_{kind}_destroy"](obj)


@_cached
def matmul(src: Memory, weights: Memory, dst: Memory, accumulate: bool) -> Primitive:
    """ideep::matmul_forward::compute as at::native::mkldnn_matmul calls it: plain strided
    descriptors, no bias argument (addmm's bias is copied into dst and accumulated with a sum
    post-op), scratchpad managed by the user."""
    lib = _lib()
    mds = [lib.md(m) for m in (src, weights, dst)]
    attr = lib.attr(accumulate)
    try:
        return lib.create("dnnl_matmul_primitive_desc_create", lib.engine, mds[0], mds[1], None,
                          mds[2], attr, given={"src": src, "weights": weights, "dst": dst})
    finally:
        _release(lib, ("primitive_attr", attr), *(("memory_desc", m) for m in mds))


def _conv_geometry(stride, dilation, padding):
    compatible = [d - 1 for d in dilation]  # ideep utils::get_compatible_dilates
    return _dims(stride), _dims(compatible), _dims(padding), _dims(padding)


def _forward_pd(lib, src: Memory, weights: Memory, bias: Memory | None, dst: Memory, geometry,
                attr):
    mds = [lib.md(m) for m in (src, weights, bias, dst)]
    try:
        return lib.create("dnnl_convolution_forward_primitive_desc_create", lib.engine,
                          _FORWARD_TRAINING, _CONVOLUTION_DIRECT, *mds, *geometry, attr,
                          given={}, keep=True)
    finally:
        _release(lib, *(("memory_desc", m) for m in mds))


@_cached
def conv_forward(src: Memory, weights: Memory, bias: Memory | None, dst: Memory, stride: tuple,
                 dilation: tuple, padding: tuple) -> Primitive:
    """ideep convolution_forward::get_primitive_desc (non-channels-last): every descriptor
    turned to format `any`, prop_kind forward (training), convolution_direct, user scratchpad.
    `src`/`weights` are the plain tensors, to tell whether ideep reorders them."""
    lib = _lib()
    geometry = _conv_geometry(stride, dilation, padding)
    attr = lib.attr()
    pd = _forward_pd(lib, src.any(), weights.any(), bias.any() if bias else None, dst.any(),
                     geometry, attr)
    try:
        return lib.describe(pd, {"src": src, "weights": weights})
    finally:
        _release(lib, ("primitive_desc", pd), ("primitive_attr", attr))


@_cached
def conv_backward_data(diff_src: Memory, weights: Memory, diff_dst: Memory, stride: tuple,
                       dilation: tuple, padding: tuple) -> Primitive:
    """ideep convolution_backward_data::compute_v2 (non-channels-last): a forward hint without
    bias and with default attributes, then the backward-data descriptor, all formats `any`."""
    lib = _lib()
    geometry = _conv_geometry(stride, dilation, padding)
    default, attr = P(), lib.attr()
    lib.fn["dnnl_primitive_attr_create"](ctypes.byref(default))
    hint = _forward_pd(lib, diff_src.any(), weights.any(), None, diff_dst.any(), geometry, default)
    mds = [lib.md(m) for m in (diff_src.any(), weights.any(), diff_dst.any())]
    try:
        return lib.create("dnnl_convolution_backward_data_primitive_desc_create", lib.engine,
                          _CONVOLUTION_DIRECT, *mds, *geometry, hint, attr,
                          given={"diff_dst": diff_dst, "weights": weights})
    finally:
        _release(lib, ("primitive_desc", hint), ("primitive_attr", attr),
                 ("primitive_attr", default), *(("memory_desc", m) for m in mds))


@_cached
def conv_backward_weights(src: Memory, diff_weights: Memory, diff_bias: Memory | None,
                          diff_dst: Memory, stride: tuple, dilation: tuple,
                          padding: tuple) -> Primitive:
    """ideep convolution_backward_weights::compute_impl (non-channels-last): a forward hint with
    bias iff the bias gradient is wanted, user scratchpad on both, all formats `any`."""
    lib = _lib()
    geometry = _conv_geometry(stride, dilation, padding)
    attr = lib.attr()
    bias_any = diff_bias.any() if diff_bias else None
    hint = _forward_pd(lib, src.any(), diff_weights.any(), bias_any, diff_dst.any(), geometry,
                       attr)
    mds = [lib.md(m) for m in (src.any(), diff_weights.any(), bias_any, diff_dst.any())]
    try:
        return lib.create("dnnl_convolution_backward_weights_primitive_desc_create", lib.engine,
                          _CONVOLUTION_DIRECT, *mds, *geometry, hint, attr,
                          given={"diff_dst": diff_dst, "src": src})
    finally:
        _release(lib, ("primitive_desc", hint), ("primitive_attr", attr),
                 *(("memory_desc", m) for m in mds))
