"""The TorchDispatchMode that books every op's new storages into the ledger.

It sits above FakeTensorMode: each op runs fake (no real memory), then every output whose
storage the ledger has not seen is a new allocation. Views and in-place results share a storage
that is already booked, so they cost nothing. The storage's weakref frees it.
"""

from __future__ import annotations

import contextlib
import sys
import threading

import torch
from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor, unset_fake_temporarily
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .. import categories as C
from ..cuda.pinned_memory import PinnedFakeStorages, pinning_available
from ..kernels.cuda import COLLECTIVE_NAMESPACES
from .accountant_host import AccountantHost
from .alias_ops import answered as answered_alias
from .composite_ops import decompose_here
from .dynamic_sizes import bounded_result
from .factory_ops import answered as answered_factory
from .healthy_values import HEALTHY_OPS, note_healthy_value
from .host_compute import runs_on_host
from .inplace_ops import answered
from .like_ops import answered as answered_like
from .made_up_values import MadeUpValues, op_name
from .shadow_values import carry, sized_by_shadows, sized_result
from .phases import SETUP

aten = torch.ops.aten
_local_scalar_dense = aten._local_scalar_dense.default
_DEVICE = torch.ops.prim.device.default
_ITEM = aten.item.default
_PASSTHROUGH = {torch.ops.prim.device.default, aten.sym_size.default, aten.sym_stride.default,
                aten.sym_numel.default, aten.sym_storage_offset.default, aten.is_contiguous.default,
                aten.detach.default, aten.view.default, aten._unsafe_view.default,
                aten.t.default, aten.transpose.int, aten.permute.default, aten.expand.default,
                aten.unsqueeze.default, aten.squeeze.dim, aten.slice.Tensor, aten.select.int,
                aten.as_strided.default, aten.alias.default}
_VIEWS = _PASSTHROUGH - {torch.ops.prim.device.default, aten.sym_size.default,
                         aten.sym_stride.default, aten.sym_numel.default,
                         aten.sym_storage_offset.default, aten.is_contiguous.default}
# Host ops that compute no value: the script's constant wrapped (`torch.tensor([scale])`) and
# views of it. A block that runs only these on the host is still one program (layer replay).
_NO_HOST_VALUE = _PASSTHROUGH | {aten.lift_fresh.default}
_current_node = torch._C._current_autograd_node
_WAIT_TENSOR = getattr(getattr(torch.ops, "_c10d_functional", None), "wait_tensor", None)
_WAIT_TENSOR = _WAIT_TENSOR.default if _WAIT_TENSOR is not None else None
# Ops FakeTensorMode has no fake kernel for (it would run them on real data and fail): what
# they mean for memory. record_stream delays the block's return to its pool (the ledger tells
# the allocator model); pinning copies to host memory (below, so that the copy is booked), and
# a fake copy remembers it is pinned (cuda/pinned_memory.py).
_RECORD_STREAM = aten.record_stream.default
_IS_PINNED = aten.is_pinned.default
_PIN_MEMORY = aten._pin_memory.default
_PLAIN_TYPES = (torch.Tensor, torch._subclasses.FakeTensor, torch.nn.Parameter)


def _plain(types) -> bool:
    return all(t in _PLAIN_TYPES or issubclass(t, torch._subclasses.FakeTensor) for t in types)


def _numel(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _all_empty(tree) -> bool:
    """`tree` holds tensors and none has an element (an op on no tensor makes values of its
    own)."""
    found = [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]
    return bool(found) and all(t.numel() == 0 for t in found)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class Accountant(TorchDispatchMode):
    def __init__(self, tracer: AccountantHost):
        super().__init__()
        self.tracer = tracer
        self.ledger = tracer.ledger
        self._mutable: dict = {}
        self._mask_arg: dict = {}
        self._names: dict = {}
        self.values = MadeUpValues(tracer)  # what a trace answers for values it cannot know
        self.placeholders = self.values.placeholders
        self._persistent_rids: dict[tuple, int] = {}  # a persistent item's key -> its record
        self._all_fake = 0  # inside made_fake(): no op runs on the host
        self._copying_real = 0  # inside copying_real(): host ops run on the host
        self.pinned = PinnedFakeStorages(self.ledger)
        self._unbooked = 0  # inside unbooked(): ops run fake and book nothing
        # Ops with effects beyond the ledger (computed on the host, collectives, streams): a
        # block that runs one is not replayed (engine/layer_replay.py).
        self.unreplayable_ops = 0
        self._one_op_at_a_time = threading.RLock()

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Dynamo compiles with this mode off (what it traces allocates nothing) and the
        compiled program runs with it on (engine/compiled.py)."""
        return True

    @contextlib.contextmanager
    def made_fake(self):
        """New tensors are fake inside the block, even when made from nothing on the host (the
        buffers of a compiled program)."""
        self._all_fake += 1
        try:
            yield
        finally:
            self._all_fake -= 1

    @contextlib.contextmanager
    def unbooked(self):
        """Ops inside the block run fake and book nothing: a replayed block's tensors, made on
        records the replay has booked (engine/layer_replay.py)."""
        self._unbooked += 1
        try:
            yield
        finally:
            self._unbooked -= 1

    @contextlib.contextmanager
    def copying_real(self):
        """A real tensor is being copied (`copy.deepcopy`): the copy is real, made from
        nothing or not, in a module's constructor too (host_compute.runs_on_host)."""
        self._copying_real += 1
        try:
            yield
        finally:
            self._copying_real -= 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _DEVICE and type(args[0]) is _FakeTensor:
            # A fake tensor's device, asked by C++ (setting `.grad`, grouping a foreach op's
            # tensors): thousands a step, answered as FakeTensorMode answers it.
            return args[0].fake_device
        # Autograd runs backward on one thread per device: with several simulated GPUs (a
        # DataParallel step) they run at once, and FakeTensorMode keeps its state in itself,
        # not per thread. One op at a time, as the ledger wants too.
        with self._one_op_at_a_time:
            return self._dispatch(func, types, args, kwargs)

    def _dispatch(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._unbooked:
            return func(*args, **kwargs)
        if func.namespace == "profiler":  # record_function markers: no tensors, no memory
            return func(*args, **kwargs)
        if decompose_here(func, args):  # a composite op that skipped the autograd keys
            with self:
                return func.decompose(*args, **kwargs)
        if _FakeTensor not in types and not self._all_fake and runs_on_host(
                func, types, args, kwargs, sys._getframe(2), self._copying_real > 0):
            return self._run_on_host(func, args, kwargs)
        if func in _PASSTHROUGH:
            done, out = answered_alias(func, args, kwargs, getattr(self.tracer, "fake_mode", None))
            if not done:
                out = func(*args, **kwargs)
            if func in _VIEWS:  # a view of host-made values shows them (shadow_values.py)
                carry(func, args, kwargs, out)
            return out
        phases = self.tracer.phases
        if phases.may_stop:
            raise self.tracer.stop()
        if func is _local_scalar_dense or func is _ITEM:  # _ITEM: whole, under inference mode
            # A DTensor's value (`.item()` of a clipped grad norm) is its local tensor's: let
            # DTensor dispatch, and read the local tensor when it comes back here.
            return self.values.read(args[0]) if _plain(types) else NotImplemented
        if func is _WAIT_TENSOR:
            # Eager wait_tensor hands back its input; the fake kernel makes a new tensor that
            # would be booked as a second copy of every functional collective's output.
            if self.tracer.collectives is not None:  # noted for layer replay (nccl_work.py)
                self.tracer.collectives.wait_tensor(args[0])
            else:
                self.unreplayable_ops += 1
            return args[0]
        if func is _RECORD_STREAM:
            self.unreplayable_ops += 1
            return self._record_stream(*args)
        if func is _IS_PINNED:
            return self.pinned.is_pinned(args[0])
        pinned = func is _PIN_MEMORY or kwargs.get("pin_memory") is True
        if func is _PIN_MEMORY:  # FSDP's CPU offload: a copy in (page-locked) host memory
            func, args, kwargs = aten.clone.default, (args[0],), {}
        if not _plain(types):
            # A tensor subclass (DTensor, FSDP's wrappers): its outer tensor is a shell with no
            # memory of its own. Let the subclass run; the ops it runs on its inner tensors
            # (the local shards, which hold the bytes) come back here and are booked.
            return NotImplemented
        try:
            # Done here where the result needs no FakeTensorMode: in-place ops that cannot
            # fail (inplace_ops.py), new tensors like their input (like_ops.py) or made from
            # sizes alone (factory_ops.py).
            mode = getattr(self.tracer, "fake_mode", None)
            done, out = answered(func, args, kwargs, mode)
            if not done:
                done, out = answered_like(func, args, kwargs, mode)
            if not done:
                done, out = answered_factory(func, args, kwargs, mode)
            if not done:
                out = func(*args, **kwargs)
        except Exception as e:
            kind = type(e).__name__
            if kind == "DynamicOutputShapeException":
                return self._sized_by_values(func, args, kwargs)
            elif kind == "DataDependentOutputException":
                real = sized_by_shadows(func, args, kwargs)
                return self.values.result_of(func) if real is None else real
            else:
                raise
        carry(func, args, kwargs, out)
        if func in HEALTHY_OPS:
            note_healthy_value(func, args, out)
        booked = self._book_outputs(func, args, kwargs, out)
        if pinned:
            self.unreplayable_ops += 1
            self.pinned.mark(out)
        if func.namespace in COLLECTIVE_NAMESPACES and self.tracer.collectives is not None:
            # Which NCCL stream it runs on and what its work keeps alive (nccl_work.py).
            self.tracer.collectives.issued(func, args, kwargs, out)
        return booked

    def _book_outputs(self, func, args, kwargs, out):
        booked = self._unmasked(func, args, kwargs, out)
        plan = self.tracer.workspaces(func, args, kwargs, booked)
        if plan is None:
            self._book(func, booked)
        else:
            self._run_plan(func, plan, booked)
        for item in self.tracer.workspaces.persistent(func, args, kwargs, out):
            self._persistent(item)
        return out

    def _run_on_host(self, func, args, kwargs):
        """A host op computed for real (see host_compute.py). Its new storages are the
        script's host memory and are booked; views and in-place results of host tensors are
        not (their storage may be numpy's, which no allocator of torch's holds)."""
        phases = self.tracer.phases
        if phases.may_stop:
            raise self.tracer.stop()
        # Host values a replayed block would not have; an empty tensor (a cache's start) has
        # none, nor does a constant wrapped or viewed (Megatron's fused softmax takes its scale
        # as `torch.tensor([scale])[0]`).
        empty_in = _all_empty((args, kwargs))
        if not empty_in and func not in _NO_HOST_VALUE:
            self.unreplayable_ops += 1
        if func is _RECORD_STREAM:
            return None  # a host tensor: no CUDA allocator holds it
        if (func is _IS_PINNED or func is _PIN_MEMORY) and not pinning_available():
            # No CUDA hooks to pin with (a CPU target): a copy, on the host, never pinned.
            if func is _IS_PINNED:
                return False
            func, args, kwargs = aten.clone.default, (args[0],), {}
        with unset_fake_temporarily():
            out = func(*args, **kwargs)
        if empty_in and not _all_empty(out):
            self.unreplayable_ops += 1
        if func in _PASSTHROUGH or func is _local_scalar_dense or func._schema.is_mutable:
            return out
        return self._book_outputs(func, args, kwargs, out)

    def _sized_by_values(self, func, args, kwargs):
        """An op whose result's size depends on values: the real size where its inputs' values
        are known (shadow_values.py), else the policy's (`_bounded`)."""
        out = sized_result(func, args, kwargs)
        if out is None:
            return self._bounded(func, args, kwargs)
        return self._book_outputs(func, args, kwargs, out)

    def _bounded(self, func, args, kwargs):
        """An op whose result's size depends on tensor values, on fake inputs: the size the
        policy picks within the op's bound (dynamic_sizes.py), with a note at the user's line;
        an op with no bound is an error naming it."""
        policy = self.tracer.dynamic_size_policy
        result = bounded_result(func, args, kwargs, policy)
        if result is None:
            raise self.values.data_dependent(func, "the size of its result depends on tensor "
                                             "values", policy) from None
        out, bound, size, temporary_bytes = result
        self.values.note(f"size of {op_name(func)}", f"{size} of at most {bound}", depth=2)
        held = None
        if temporary_bytes:  # the kernel's own index tensors, alive while it runs
            module, _, stack, backward = self._context()
            device = self.tracer.device_key(out.device)
            held = self.ledger.alloc(temporary_bytes, device, "int64", (temporary_bytes // 8,),
                                     C.TEMPORARY, module, self.tracer.phases.index,
                                     self.ledger.op_id("nonzero"), stack, backward=backward)
        booked = self._book_outputs(func, args, kwargs, out)
        if held is not None:
            self.ledger.free(held)
        return booked

    def take_persistent(self, item) -> None:
        """A library's memory taken on first use and kept for good, asked for outside an op's
        dispatch (a plugin's stand-in kernel that makes its output without a GEMM op): booked
        once per key, as the op rules' (`WorkspaceModel.persistent`) are."""
        for fresh in self.tracer.workspaces.take([item]):
            self._persistent(fresh)

    def book_collective_buffer(self, nbytes: int, device: torch.device) -> int:
        """A buffer ProcessGroupNCCL allocates for a collective (kernels/nccl_work.py)."""
        module, _, stack, backward = self._context()
        return self.ledger.alloc(nbytes, self.tracer.device_key(device), "uint8", (nbytes,),
                                 C.TEMPORARY, module, self.tracer.phases.index,
                                 self.ledger.op_id("nccl_buffer"), stack, backward=backward)

    def _record_stream(self, t, stream) -> None:
        """`t.record_stream(stream)`: the allocation holding t's storage is used on `stream`."""
        try:
            rid = self.ledger.storage_rid(t.untyped_storage())
        except (RuntimeError, NotImplementedError):
            return None
        if rid is not None:
            self.ledger.record_stream(rid, int(stream.stream_id))
        return None

    # -- booking ---------------------------------------------------------------------------
    def _unmasked(self, func, args, kwargs, out):
        """The outputs a real kernel allocates. Backward ops with an `output_mask` return an
        undefined tensor where the mask is False, but some fake kernels (e.g. the meta of
        native_batch_norm_backward) return a full-size tensor there: it is no allocation."""
        index = self._mask_arg.get(func)
        if index is None:
            index = self._mask_arg[func] = next(
                (i for i, a in enumerate(func._schema.arguments) if a.name == "output_mask"), -1)
        if index < 0 or not isinstance(out, (tuple, list)):
            return out
        mask = args[index] if index < len(args) else kwargs.get("output_mask")
        if mask is None:
            return out
        return tuple(None if i < len(mask) and not mask[i] else t for i, t in enumerate(out))

    def _book(self, func, out) -> None:
        if isinstance(out, torch.Tensor):
            self._book_tensor(func, out)
        elif isinstance(out, (tuple, list)):
            for t in out:
                if isinstance(t, torch.Tensor):
                    self._book_tensor(func, t)

    def _book_tensor(self, func, t: torch.Tensor) -> None:
        if t.device.type == "meta":  # shapes only (a model built on meta): no memory anywhere
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        ledger = self.ledger
        rid = ledger.storage_rid(st)
        if rid is not None:
            mutable = self._mutable.get(func)
            if mutable is None:
                mutable = self._mutable[func] = func._schema.is_mutable
            if mutable and st.nbytes() != ledger.records[rid].nbytes:
                self._resized(self._op(func), tuple(t.shape), st, rid)
            return
        self._new(func, t, st)

    def storage_resized(self, st) -> None:
        """`UntypedStorage.resize_` called directly (FSDP frees unsharded parameters with
        `resize_(0)` and re-allocates them with `resize_(n)`): no op the dispatch mode sees."""
        rid = self.ledger.storage_rid(st)
        if rid is None:
            return
        rec = self.ledger.records[rid]
        if rec.free_seq >= 0 and st.nbytes() == 0:
            return
        if rec.free_seq >= 0 or st.nbytes() != rec.nbytes:
            itemsize = rec.nbytes // max(1, _numel(rec.shape)) if rec.nbytes else 1
            self._resized(self.ledger.op_id("resize_"), (st.nbytes() // max(1, itemsize),), st,
                          rid)

    def _new(self, func, t, st) -> int:
        ledger = self.ledger
        module, category, stack, backward = self._context()
        rid = ledger.alloc(st.nbytes(), self.tracer.device_key(t.device), _dtype_name(t.dtype),
                           tuple(t.shape), category, module, self.tracer.phases.index,
                           self._op(func), stack, backward=backward)
        ledger.track_storage(st, rid)
        return rid

    def _resized(self, op: int, shape: tuple, st, old_rid) -> None:
        """A storage changed size (resize_, set_, out= into a smaller tensor): the old block is
        freed and a new one of the new size, of the same kind, is allocated."""
        old = self.ledger.records[old_rid]
        self.ledger.free(old_rid)
        if st.nbytes() > 0:
            module, _, stack, backward = self._context()
            rid = self.ledger.alloc(st.nbytes(), old.device, old.dtype, shape, old.category,
                                    module, self.tracer.phases.index, op, stack,
                                    backward=backward)
            self.ledger.retarget_storage(st, rid)

    def _run_plan(self, func, plan, out) -> None:
        """Book the op's outputs and its kernel's own buffers in the order the kernel makes
        them (see `kernels.buffers.Plan`): buffers are temporaries of the op's module and phase."""
        outs = list(out) if isinstance(out, (tuple, list)) else [out]

        def book(indices) -> None:
            for i in indices:
                if i < len(outs) and isinstance(outs[i], torch.Tensor):
                    self._book_tensor(func, outs[i])

        named = plan.named_outputs()
        book(i for i in range(len(outs)) if i not in named)
        ref = next((t for t in outs if isinstance(t, torch.Tensor)), None)
        device = self.tracer.device_key(ref.device) if ref is not None else "cpu"
        module, _, stack, backward = self._context()
        op, phase = self._op(func), self.tracer.phases.index
        held: dict[int, int] = {}
        for step in plan.steps:
            if step[0] == "alloc":
                n = step[2]
                held[step[1]] = self.ledger.alloc(n, device, "uint8", (n,), C.TEMPORARY, module,
                                                  phase, op, stack, backward=backward)
            elif step[0] == "free":
                rid = held.pop(step[1], None)
                if rid is not None:
                    self.ledger.free(rid)
            else:
                book(step[1])
        for rid in held.values():
            self.ledger.free(rid)

    def clear_cublas_workspaces(self) -> None:
        """`torch._C._cuda_clearCublasWorkspaces()`: every cuBLAS workspace is freed, and the
        next matmul on a handle and stream takes one again (Inductor's CUDA graph trees clear
        them around each warm-up and recording, so that the graph's are in its pool)."""
        for key in [k for k in self._persistent_rids if k[0] == "cublas"]:
            self.ledger.free(self._persistent_rids.pop(key))
            self.tracer.workspaces.forget(key)

    def persistent_rids(self) -> set[int]:
        """The records of libraries' memory taken on first use and kept (cuBLAS workspaces)."""
        return set(self._persistent_rids.values())

    def _persistent(self, item) -> None:
        """A library's memory taken on first use and kept (a cuBLAS workspace): it belongs to
        no module and is freed only when the library lets it go (clear_cublas_workspaces)."""
        _, _, stack, backward = self._context()
        self._persistent_rids[item.key] = self.ledger.alloc(
            item.nbytes, self.tracer.device_key(item.device), "uint8", (item.nbytes,), C.OTHER,
            -1, self.tracer.phases.index, self.ledger.op_id(item.label), stack,
            backward=backward)

    def _context(self) -> tuple[int, int, int, bool]:
        """(module, initial category, stack, in backward) for an allocation made now."""
        tracer = self.tracer
        module = tracer.modules.current()
        backward = _current_node() is not None
        if tracer.phases.in_step or backward or tracer.modules.stack:
            category = C.TEMPORARY
        elif tracer.phases.state != SETUP:
            # Inside an iteration, outside modules (the loss, a hand-written update's `lr * grad`,
            # logging after the step): temporaries. What is still alive when the next forward
            # begins (the next batch) becomes an input then (PhaseTracker).
            category = C.TEMPORARY
        else:
            category = C.INPUT
        return module, category, tracer.stacks.capture(sys._getframe(1)), backward

    def _op(self, func) -> int:
        oid = self._names.get(func)
        if oid is None:
            oid = self._names[func] = self.ledger.op_id(str(func.overloadpacket).replace("aten.", ""))
        return oid
