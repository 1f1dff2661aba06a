"""The tracer: everything that must be in place while user code runs, and undone after.

    with Tracer("cpu", iterations=2) as tracer:
        ...  # build the model and run training steps
    snapshot = tracer.snapshot()
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from .. import categories as C
from .accountant import Accountant
from .classifier import Classifier
from . import heap
from .compiled import CompiledPrograms
from ..cuda.sdpa import SdpaLog
from ..devices import DeviceSpec
from ..distributed.env import RankSpec
from ..distributed.layout import Layout
from ..errors import LayerReplayAbandoned, StopTracing
from .layer_replay import LayerReplay
from .ledger import Ledger
from .modules import ModuleTracker
from ..patches import Patcher
from ..patches.patcher import versions_noted
from ..patches import (checkpoint_files, torch_checkpoint, torch_compile, torch_core, torch_data,
                       torch_inductor_cuda, torch_loops, torch_values)
from .healthy_values import mark_finite_check
from .phases import PhaseTracker
from ..plugins import PluginHost
from .stacks import StackTable
from ..kernels.buffers import WorkspaceModel
from ..kernels.nccl_work import NcclWorks


class Tracer:
    def __init__(self, device: DeviceSpec | str = "h100-80gb", iterations: int = 2,
                 rank: RankSpec | None = None, device_count: int = 1, device_index: int = 0,
                 dynamic_sizes: str = "bound", sdpa_backend: str | None = None,
                 layer_replay: bool = False):
        """`rank`: simulate that rank of a distributed job (fake process groups; see
        patches/torch_distributed.py; the caller gives the script the rank's environment): its
        node's GPUs are simulated and the trace describes its local GPU. Without a rank,
        `device_count` GPUs of `device` are simulated and the trace describes
        `cuda:{device_index}`. `dynamic_sizes`: how ops whose result's size depends on tensor
        values are sized (dynamic_sizes.py: "bound", "error" or a fraction of the bound).
        `sdpa_backend`: the attention kernel tried first on a CUDA target (flash, efficient,
        cudnn, math; cuda/sdpa.py), instead of the order torch would use on the device.
        `layer_replay`: identical blocks after the first two are replayed from a recording
        (layer_replay.py); a replay found wrong afterwards raises LayerReplayAbandoned from
        `check_layer_replay`, and the caller traces again without it."""
        if isinstance(device, str):
            from ..devices import get_device

            device = get_device(device)
        self.device = device
        self.device_count = max(device_count, rank.local_world_size if rank else 1)
        self.device_index = device_index
        self.iterations = iterations
        self.dynamic_size_policy = dynamic_sizes
        self.rank = rank
        self.layout = Layout(rank.world_size, rank.rank) if rank else None
        self.ledger = Ledger(device.round_size, allocator_for=self._allocator_for)
        self.stacks = StackTable()
        self.phases = PhaseTracker(self.ledger, iterations, stop=self.stop)
        self.modules = ModuleTracker(self.stacks, self._on_top_level_forward)
        self.classifier = Classifier(self.ledger, self.modules)
        self.accountant = Accountant(self)
        self.layer_replay = LayerReplay(self) if layer_replay else None
        self._compiled_call = 0
        self._heap = heap.FrozenHeap()
        self.workspaces = WorkspaceModel(device.type, device)
        # NCCL's streams and the tensors its works keep alive (simulated ranks on CUDA)
        self.collectives = NcclWorks(self.ledger, self.accountant.book_collective_buffer) \
            if device.type == "cuda" and rank is not None else None
        self.fake_mode: FakeTensorMode | None = None
        self._cuda = None  # the torch.cuda simulation of a CUDA target
        self.sdpa = SdpaLog((device.major, device.minor), sdpa_backend)  # CUDA targets
        self.sdpa_backends = self.sdpa.calls  # attention kernel -> calls
        self._patcher = Patcher()
        self._undo = contextlib.ExitStack()  # what __enter__ applied, undone by __exit__
        self._step_hooks: list = []
        self.end_seq = -1
        self.allocator_settings: dict | None = None  # set when a CUDA allocator starts
        self.started = self.finished = 0.0
        self.stopped = False  # the trace stopped the workload after its iterations
        self.interrupted = False  # Ctrl-C ended the trace (see interrupt.py)
        self.notes: list[str] = []  # what plugins changed about the run (snapshot meta.notes)
        # (device key, OutsideItem, short basis): device memory a library holds outside
        # PyTorch's allocator (TE's Userbuffers), a line of the snapshot's outside_allocator
        self.outside: list[tuple] = []
        self.plugins = PluginHost(self)
        # torch.compile regions; on a CUDA target Inductor's GPU code needs Triton installed
        self.compiled = CompiledPrograms(device.type, self.add_note,
                                         torch_inductor_cuda.triton_missing()
                                         if device.type == "cuda" else "")

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "Tracer":
        """Each step registers its undoing as it is applied, so a failure half-way undoes what
        was applied and `__exit__` undoes the rest in reverse order."""
        from torch.optim import optimizer as o

        self.started = time.time()
        with contextlib.ExitStack() as undo:
            undo.callback(self._patcher.undo)  # every patch below, last of all
            undo.enter_context(self._heap)
            undo.enter_context(versions_noted(self.add_note))  # before the first check
            torch_core.apply(self._patcher, self._external_tensor, self.accountant.storage_resized,
                             mark_finite_check,
                             lambda p: self.classifier.mark(p, C.PARAMETER),
                             self.accountant.copying_real, self.classifier.original_of_saved)
            torch_data.apply(self._patcher)
            torch_values.apply(self._patcher, self.accountant.values.note)
            checkpoint_files.apply(self._patcher, self.add_note)
            torch_loops.apply(self._patcher, self.phases.on_optimizer_created,
                              self.phases.on_backward_end)
            torch_compile.apply(
                self._patcher, self.compiled, self.add_note, self.accountant.made_fake,
                self._compiled_module_call, self._modes_entered, type(self.accountant),
                also_when_compiling=self._inductor_gpu_patches)
            torch_checkpoint.apply(self._patcher, self.classifier.mark_saved)
            if self.rank is not None:
                from ..patches import torch_distributed

                torch_distributed.apply(self._patcher, self.rank, self.layout,
                                        lambda t: self.classifier.mark(t, C.GRADIENT),
                                        type(self.accountant), self.collectives,
                                        state_init_step=self.phases.state_init_step,
                                        note_value=self.accountant.values.note)
                undo.callback(torch_distributed.destroy_if_initialized)
            self.modules.install()
            undo.callback(self.modules.uninstall)
            self.classifier.install()
            undo.callback(self.classifier.uninstall)
            if self.layer_replay is not None:
                from ..patches import autocast_cache

                self.classifier.on_pack = self.layer_replay.on_pack
                autocast_cache.apply(self._patcher, self.layer_replay.on_autocast_cleared)
                undo.callback(self.layer_replay.finish)
            self.plugins.install()
            undo.callback(self.plugins.uninstall)
            self._step_hooks = [
                o.register_optimizer_step_pre_hook(self.phases.step_pre_hook),
                o.register_optimizer_step_post_hook(self.phases.step_post_hook),
            ]
            undo.callback(lambda: [h.remove() for h in self._step_hooks])
            if self.device.type == "cuda":
                from ..cuda.ledger_memory import LedgerMemory
                from ..cuda.simulate import simulate_cuda
                from ..patches import cuda_nvtx, torch_cuda_device, torch_cuda_semantics

                from ..cuda import extension_builds, flash_attn_package, multi_gpu_comm

                torch_cuda_semantics.apply(self._patcher, self.device, self.sdpa)
                cuda_nvtx.apply(self._patcher)
                # DataParallel's copies between the simulated GPUs of one process.
                multi_gpu_comm.apply(self._patcher,
                                     lambda t: self.classifier.mark(t, C.PARAMETER))
                torch_cuda_device.apply(self._patcher)
                flash_attn_package.apply(self._patcher, self.add_note)
                # A library's JIT-built CUDA extension: refused by name (at its import, which
                # costs ~0.1 s that a trace not building one should not pay).
                self.plugins.watcher.watch("torch.utils.cpp_extension", lambda _m: (
                    extension_builds.apply(self._patcher, self.add_note)))
                # Before FakeTensorMode: entering it asks torch.cuda.is_available().
                self._cuda = simulate_cuda(self.device, LedgerMemory(self.ledger),
                                           device_count=self.device_count, device=self.device_index)
                undo.callback(setattr, self, "_cuda", None)
                undo.enter_context(self._cuda)
                # Each CUDA allocation is booked on the current stream of its device.
                self.ledger.stream_of = _current_stream_of
                undo.callback(setattr, self.ledger, "stream_of", None)
            self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
            undo.enter_context(self.fake_mode)
            undo.enter_context(self.accountant)
            self._undo = undo.pop_all()
        return self

    def _inductor_gpu_patches(self) -> None:
        """Inductor's GPU code generation without a GPU (CUDA targets), at the first compile."""
        if not self.compiled.gpu_inductor:
            return
        problem = torch_inductor_cuda.triton_import_problem()
        if problem:
            self.compiled.gpu_unavailable(problem)
            return
        torch_inductor_cuda.apply(self._patcher, self.accountant.made_fake,
                                  (self.device.major, self.device.minor),
                                  self.accountant.clear_cublas_workspaces)

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.mark_end()
        self._undo.close()
        self.finished = time.time()
        # Tracing stopped the workload after the requested iterations: a normal end.
        return exc_type is StopTracing

    # -- public API ------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Name the phase of everything inside the block: `with tracer.phase("eval"): ...`."""
        self.phases.begin(name)
        yield

    def add_note(self, text: str) -> None:
        """Something about the run the reader should know (report and snapshot meta.notes)."""
        if text not in self.notes:
            self.notes.append(text)

    def mark_end(self) -> None:
        """The trace ends here: what the workload frees while it is torn down (its globals,
        the frames an exception unwinds) is not part of the step. Safe to call twice."""
        if self.end_seq < 0:
            self._heap.at_end()
            self.phases.finish()
            self.end_seq = self.ledger.seq
            self.ledger.untrack_all()
            if self.collectives is not None:  # after: letting go of stashes is teardown
                self.collectives.close()

    def snapshot(self, **meta) -> dict:
        """The snapshot document of the finished trace (see docs/snapshot-format.md)."""
        from ..snapshot import build_snapshot

        meta.setdefault("target", {"kind": "script", "name": "api", "path": None, "args": [],
                                   "cwd": None})
        return build_snapshot(self, meta)

    def device_key(self, device: torch.device) -> str:
        if device.type == "cpu":
            return "cpu"
        return f"{device.type}:{device.index if device.index is not None else 0}"

    @property
    def target_key(self) -> str:
        """The device whose memory the trace reports. A simulated rank's device is its local
        GPU, `cuda:{LOCAL_RANK}` (what torchrun scripts select with `set_device`). A script
        that never selects a device puts every rank's tensors on cuda:0, as it would on a real
        node: then the CUDA device that held the most is reported instead."""
        if self.device.type == "cpu":
            return "cpu"
        if self.rank is None:
            return f"cuda:{self.device_index}"
        local = f"cuda:{self.rank.local_rank}"
        peaks = {d: p for d, p in self.ledger.peak.items() if d.startswith("cuda")}
        if local in peaks or not peaks:
            return local
        return max(peaks, key=lambda d: (peaks[d], d == "cuda:0"))

    def parallel_meta(self) -> dict:
        """The snapshot's `world_size`, `rank` and `parallel` fields."""
        if self.rank is None:
            return {"world_size": 1, "rank": 0, "parallel": {}}
        return {"world_size": self.rank.world_size, "rank": self.rank.rank,
                "parallel": {"local_rank": self.rank.local_rank,
                             "local_world_size": self.rank.local_world_size,
                             **self.layout.to_json()}}

    # -- callbacks -------------------------------------------------------------------------
    def stop(self) -> StopTracing:
        """End the trace now and return the exception that stops the workload."""
        self.stopped = True
        self.mark_end()
        return StopTracing()

    def _on_top_level_forward(self, module: torch.nn.Module) -> None:
        self._heap.at_first_forward()
        self.classifier.scan_model(module)
        self.phases.on_top_level_forward(module)
        if self.layer_replay is not None and not self._compiled_call:
            self.layer_replay.scan(module)

    def layer_replay_meta(self) -> dict:
        """The snapshot's `meta.layer_replay`: what was replayed, or why nothing was (a trace
        run again in full after a replay was abandoned says why, with a note)."""
        if self.layer_replay is not None:
            return self.layer_replay.meta()
        why = os.environ.get(LayerReplayAbandoned.ENV)
        if why:
            self.add_note(f"Layer replay was abandoned ({why}); the script was traced again "
                          f"with every block traced.")
        return {"enabled": False, **({"abandoned": why} if why else {})}

    def check_layer_replay(self) -> None:
        """After the trace: raise LayerReplayAbandoned if a replay was found wrong, so that
        the caller traces again in full."""
        replay = self.layer_replay
        if replay is None:
            return
        replay.finish()
        if replay.abandoned:
            raise LayerReplayAbandoned(replay.abandoned)

    @contextlib.contextmanager
    def _modes_entered(self) -> Iterator[None]:
        """The tracer's dispatch modes, entered again where compilation has taken them off."""
        with self.fake_mode, self.accountant:
            yield

    def _compiled_module_call(self, module: torch.nn.Module, args: tuple, call):
        """A compiled module's call: its hooks run inside the compiled code, where the trackers
        skip them (Dynamo would trace them), so the call is announced to them here."""
        self._compiled_call += 1
        try:
            self.modules.pre_forward(module, args)
        finally:
            self._compiled_call -= 1
        out = None
        try:
            out = call()
        finally:
            self.modules.post_forward(module, args, out)
        self.classifier.module_returned(module, args, out)
        return out

    def _allocator_for(self, device_key: str):
        """The CUDA caching allocator of a simulated GPU, configured as PyTorch would configure
        it from the traced script's environment when it first allocates on the device."""
        if self.device.type != "cuda" or not device_key.startswith("cuda"):
            return None
        from ..allocator import CachingAllocatorModel

        config, settings = self._allocator_config()
        return CachingAllocatorModel(config, device_total_bytes=settings["limit_bytes"],
                                     capacity_bytes=settings["capacity_bytes"],
                                     device_index=int(device_key.partition(":")[2] or 0))

    def _allocator_config(self):
        """(AllocatorConfig, settings for the snapshot), read from the environment once: the
        first CUDA allocation, as in PyTorch (a script may set the variable before it)."""
        from ..allocator import AllocatorConfigError, parse_alloc_conf
        from ..allocator.outside import cuda_context_items
        from ..errors import MemlensError

        name = "PYTORCH_ALLOC_CONF" if "PYTORCH_ALLOC_CONF" in os.environ \
            else "PYTORCH_CUDA_ALLOC_CONF"
        text = self.allocator_settings["config"] if self.allocator_settings \
            else os.environ.get(name, "")
        try:
            config = parse_alloc_conf(text)
        except AllocatorConfigError as e:
            raise MemlensError(f"{name}: {e}") from None
        if self.allocator_settings is None:
            total = self.device.total_memory_bytes
            context = sum(item.bytes for item in cuda_context_items(self.device.name))
            self.allocator_settings = {
                "config_variable": name, "config": text,
                "expandable_segments": config.expandable_segments,
                "capacity_bytes": total, "limit_bytes": total - context}
        return config, self.allocator_settings

    def _external_tensor(self, t: torch.Tensor, op: str) -> None:
        """A real tensor created without any op (e.g. an RNG state) that still takes memory."""
        st = t.untyped_storage()
        if self.ledger.storage_rid(st) is not None:
            return
        rid = self.ledger.alloc(st.nbytes(), self.device_key(t.device), str(t.dtype).replace(
            "torch.", ""), tuple(t.shape), C.OTHER, self.modules.current(), self.phases.index,
            self.ledger.op_id(op), self.stacks.capture())
        self.ledger.track_storage(st, rid)


def _current_stream_of(device_key: str) -> int:
    """The calling thread's current stream on a simulated GPU ('cuda:3' -> its stream id)."""
    from ..cuda.streams import STREAMS

    return STREAMS.current_id(int(device_key[5:] or 0))
