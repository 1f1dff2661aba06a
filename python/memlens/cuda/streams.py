"""Streams and events of the simulated GPU: bookkeeping only, no CUDA calls, nothing to wait for.

``FakeStream`` is a real ``torch.Stream`` value (device type cuda) so that aten ops taking a
``Stream`` accept it. simulate.py installs these as ``torch.cuda.Stream`` / ``Event`` /
``stream`` and friends. The current stream is per thread and device (device_state.py); the
allocator books each allocation on it. What orders one stream's work after another's is told
to a listener (the ledger's allocator models, see allocator/stream_events.py), because it
decides when a block freed after `record_stream` can be reused:
- ``a.wait_stream(b)``: a waits for b's work so far;
- ``a.wait_event(e)`` / ``e.wait(a)``: a waits for the work of e's stream up to e's record;
- ``b.synchronize()``, ``e.synchronize()``, ``torch.cuda.synchronize()``: the host waits.
Nothing else reaches the device: queries answer done, elapsed times 0.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..allocator.stream_events import ALL_STREAMS, HOST

if TYPE_CHECKING:
    from .device_state import SimulatedDevices

_CUDA = 1  # c10::DeviceType::CUDA; stream id 0 is each device's default stream
_MEMLENS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# `self.all_gather_stream = ...`, `side: torch.cuda.Stream = ...`: the name assigned to
_ASSIGNED = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)")


def _assigned_name(frame: FrameType | None) -> tuple[str, str | None]:
    """What the stream being made is called where it is made: the variable or attribute its
    line assigns (FSDP2's `all_gather_copy_in_stream`, a script's `side_stream`), and that
    line's place; ("", None) when no frame outside memlens is found."""
    while frame is not None and frame.f_code.co_filename.startswith(_MEMLENS):
        frame = frame.f_back
    if frame is None:
        return "", None
    file, line = frame.f_code.co_filename, frame.f_lineno
    match = _ASSIGNED.match(linecache.getline(file, line))
    return (match.group(1) if match else ""), f"{file}:{line}"


class FakeStream(torch.Stream):
    """Stand-in for ``torch.cuda.Stream``."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "FakeStream":
        if "stream_id" in kwargs:  # torch rebuilds streams from (id, index, type)
            return super().__new__(
                cls,
                stream_id=kwargs["stream_id"],
                device_index=kwargs["device_index"],
                device_type=kwargs.get("device_type", _CUDA),
            )
        devices = STREAMS.devices()
        stream_id = devices.new_stream()
        STREAMS.named(stream_id, *_assigned_name(sys._getframe(1)))
        return super().__new__(cls, stream_id=stream_id,
                               device_index=devices.check(device), device_type=_CUDA)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._priority = int(kwargs.get("priority", args[1] if len(args) > 1 else 0))

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        STREAMS.waited(self.device_index, HOST, int(self.stream_id), None)

    def wait_event(self, event: Any) -> None:
        if getattr(event, "stream_id", None) is not None and \
                event.device_index == self.device_index:
            STREAMS.waited(self.device_index, int(self.stream_id), event.stream_id, event.marker)

    def wait_stream(self, stream: Any) -> None:
        if stream.device_index == self.device_index:
            STREAMS.waited(self.device_index, int(self.stream_id), int(stream.stream_id), None)

    def record_event(self, event: "FakeEvent | None" = None) -> "FakeEvent":
        event = event if event is not None else FakeEvent()
        event.record(self)
        return event

    def is_capturing(self) -> bool:
        return False

    @property
    def priority(self) -> int:
        return getattr(self, "_priority", 0)

    @staticmethod
    def priority_range() -> tuple[int, int]:
        return (0, -5)  # (least, greatest) as recent GPUs report

    @property
    def cuda_stream(self) -> int:
        return int(self.stream_id)  # an opaque handle; nothing may dereference it

    @property
    def native_handle(self) -> int:
        return int(self.stream_id)

    def __enter__(self) -> "FakeStream":
        self._ctx = StreamContext(self)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream (simulated) device=cuda:{self.device_index} id={self.stream_id}>"


class FakeEvent:
    """Stand-in for ``torch.cuda.Event``: always complete, zero elapsed time."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, external: bool = False) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        self.device: torch.device | None = None
        self.recorded = False
        self.device_index = -1
        self.stream_id: int | None = None  # the stream it was last recorded on
        self.marker = 0  # the allocator's clock at that record

    def record(self, stream: torch.Stream | None = None) -> None:
        stream = stream if stream is not None else STREAMS.current(None)
        self.device = stream.device
        self.recorded = True
        self.device_index = stream.device_index
        self.stream_id = int(stream.stream_id)
        self.marker = STREAMS.marker(stream.device_index)

    def wait(self, stream: torch.Stream | None = None) -> None:
        stream = stream if stream is not None else STREAMS.current(None)
        if self.stream_id is not None and stream.device_index == self.device_index:
            STREAMS.waited(self.device_index, int(stream.stream_id), self.stream_id, self.marker)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        if self.stream_id is not None:
            STREAMS.waited(self.device_index, HOST, self.stream_id, self.marker)

    def elapsed_time(self, end_event: "FakeEvent") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self.recorded and end_event.recorded):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return 0.0  # a memory simulation has no clock

    def ipc_handle(self) -> bytes:
        raise RuntimeError("memlens: a simulated GPU has no IPC event handles")

    @classmethod
    def from_ipc_handle(cls, device: Any, handle: bytes) -> "FakeEvent":
        raise RuntimeError("memlens: a simulated GPU has no IPC event handles")

    @property
    def cuda_event(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<torch.cuda.Event (simulated) recorded={self.recorded}>"


class StreamListener(Protocol):
    """Who is told of the waits between streams (the ledger, through cuda/ledger_memory.py)."""

    def stream_marker(self, device_index: int) -> int: ...
    def stream_named(self, stream: int, name: str, place: str | None) -> None: ...
    def stream_waited(self, device_index: int, waiter: int, stream: int,
                      marker: int | None) -> None: ...


class StreamTable:
    """torch.cuda's current/default stream functions over the bound simulated devices."""

    def __init__(self) -> None:
        self._devices: SimulatedDevices | None = None
        self._listener: StreamListener | None = None
        # Told of every wait between streams too: CUDA graph captures (graphs.py), which a
        # stream joins by waiting on a capturing one.
        self.on_wait: Any = None

    def bind(self, devices: SimulatedDevices | None,
             listener: StreamListener | None = None) -> None:
        self._devices = devices
        self._listener = listener

    def current_id(self, index: int) -> int:
        """The calling thread's current stream id on device `index` (0 when unbound)."""
        devices = self._devices
        return devices.current_stream(index) if devices is not None else 0

    def marker(self, device_index: int) -> int:
        listener = self._listener
        return listener.stream_marker(device_index) if listener is not None else 0

    def named(self, stream: int, name: str, place: str | None) -> None:
        """A new stream and what the snapshot calls it ("": `stream N`)."""
        if self._listener is not None:
            self._listener.stream_named(stream, name or f"stream {stream}", place)

    def waited(self, device_index: int, waiter: int, stream: int, marker: int | None) -> None:
        """`waiter` (a stream id or HOST) waits for `stream` (or ALL_STREAMS) up to `marker`
        (None: everything queued so far)."""
        if self._listener is not None:
            self._listener.stream_waited(device_index, waiter, stream, marker)
        if self.on_wait is not None:
            self.on_wait(device_index, waiter, stream)

    def synchronize(self, device_index: int) -> None:
        self.waited(device_index, HOST, ALL_STREAMS, None)

    def devices(self) -> SimulatedDevices:
        if self._devices is None:
            raise RuntimeError("memlens: simulated CUDA streams used outside simulate_cuda")
        return self._devices

    def default(self, device: Any = None) -> FakeStream:
        return FakeStream(stream_id=0, device_index=self.devices().check(device), device_type=_CUDA)

    def current(self, device: Any = None) -> FakeStream:
        devices = self.devices()
        i = devices.check(device)
        return FakeStream(stream_id=devices.current_stream(i), device_index=i, device_type=_CUDA)

    def set(self, stream: torch.Stream | None) -> None:
        if stream is None:
            return
        # Like torch.cuda.set_stream: the stream's device becomes current too.
        devices = self.devices()
        devices.set(stream.device_index)
        devices.set_stream(stream.device_index, stream.stream_id)


STREAMS = StreamTable()


class StreamContext:
    """``torch.cuda.stream(s)``: select ``s`` (and its device) until exit; None is a no-op."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self._saved: list[FakeStream] = []

    def __enter__(self) -> None:
        if self.stream is None:
            return
        self._saved = [STREAMS.current(None)]  # restoring it restores the device
        if self.stream.device_index != self._saved[0].device_index:
            self._saved.insert(0, STREAMS.current(self.stream.device_index))
        STREAMS.set(self.stream)

    def __exit__(self, *exc: Any) -> None:
        for stream in self._saved:
            STREAMS.set(stream)
        self._saved = []


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)
