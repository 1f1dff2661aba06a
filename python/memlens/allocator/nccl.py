"""NCCL's own device buffers, per communicator (one per process group that ran an operation),
cudaMalloc'ed by NCCL outside PyTorch's caching allocator.

Derived from NCCL's source (github.com/NVIDIA/nccl, master of June 2026):
- src/init.cc computeBuffSizes: one buffer per protocol, NCCL_LL_BUFFSIZE / NCCL_LL128_BUFFSIZE /
  NCCL_BUFFSIZE or the defaults DEFAULT_LL_BUFFSIZE = NCCL_LL_LINES_PER_THREAD (8) x
  NCCL_LL_MAX_NTHREADS (512) x NCCL_STEPS (8) x sizeof(ncclLLFifoLine) (16) = 524,288 B,
  DEFAULT_LL128_BUFFSIZE = NCCL_LL128_ELEMS_PER_THREAD (120) x NCCL_LL128_MAX_NTHREADS (640) x
  NCCL_STEPS (8) x 8 = 4,915,200 B, DEFAULT_BUFFSIZE (Simple) = 4 MiB (src/include/device.h).
- src/transport/p2p.cc p2pRecvSetup / p2pSendSetup: a receiving connection holds
  sizeof(ncclRecvMem) (one MEM_ALIGN page, 4,096 B) + the LL and LL128 buffers + the Simple
  buffer; a sending connection sizeof(ncclSendMem) (4,096 B). With P2P read (NVLink between
  two compute capability 8.0 GPUs, src/graph/paths.cc; NCCL_P2P_READ_ENABLE overrides) the
  Simple buffer moves to the sender. Each is rounded up to CUDA_IPC_MIN (2 MiB,
  src/include/comm.h). Defaults: 10 MiB + 2 MiB per channel either way.
- Rings (all-reduce, all-gather, reduce-scatter, broadcast ...): every channel connects the
  rank's ring neighbours, one receiving and one sending connection. The channel count is
  NCCL's choice for the topology (src/graph/search.cc); NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS
  (src/graph/connect.cc, after the older NCCL_MIN_NRINGS / NCCL_MAX_NRINGS) bound it. Without
  them this model assumes 16 channels on NVLink cards and 2 on PCIe cards.
- Point-to-point (send/recv, pipeline parallelism): per peer, p2pnChannelsPerPeer channels of
  one connection each way used (ncclTopoGetNchannels: 2 per NVLink between the pair, 2 over
  PCIe), bounded by NCCL_MIN_P2P_NCHANNELS / NCCL_MAX_P2P_NCHANNELS; assumed 16 on NVLink
  (NVSwitch) cards and 2 on PCIe cards.
Not modelled: tree and NVLS/CollNet connections (NVLS multicast buffers can be large on
NVSwitch systems; NCCL_NVLS_ENABLE=0 turns them off), the network transport's own buffers
across nodes (sized here as if intra-node), and the proxy's host memory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

MiB = 1 << 20
LL_BUFFSIZE = 8 * 512 * 8 * 16  # 524,288
LL128_BUFFSIZE = 120 * 640 * 8 * 8  # 4,915,200
SIMPLE_BUFFSIZE = 4 * MiB
CONN_HEADER = 4096  # sizeof(ncclSendMem) == sizeof(ncclRecvMem) == MEM_ALIGN
CUDA_IPC_MIN = 2 * MiB  # every connection's allocation is rounded up to this
MAXCHANNELS = 64
# Cards without NVLink between GPUs of a node (their channels and peers go over PCIe).
PCIE_CARDS = ("l40s", "rtx-4090", "rtx_4090", "4090")


@dataclass(frozen=True)
class Communicator:
    """What one process group did on one device, as far as NCCL's buffers care."""

    name: str
    ranks: int
    ring: bool = False  # ran a collective (ring connections)
    send_peers: frozenset = frozenset()  # group ranks it sent to (p2p)
    recv_peers: frozenset = frozenset()  # group ranks it received from (p2p)


def _param(env: Mapping[str, str], name: str) -> int | None:
    """An NCCL_PARAM: an integer, or None (unset, or -2, NCCL's 'not set')."""
    text = env.get(f"NCCL_{name}")
    if text is None:
        return None
    m = re.match(r"\s*[+-]?\d+", text)
    if not m or int(m.group()) == -2:
        return None
    return int(m.group())


def _pow2_up(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def buffer_sizes(env: Mapping[str, str]) -> tuple[int, int, int]:
    """(LL, LL128, Simple) bytes, computeBuffSizes."""
    return (_param(env, "LL_BUFFSIZE") or LL_BUFFSIZE,
            _param(env, "LL128_BUFFSIZE") or LL128_BUFFSIZE,
            _param(env, "BUFFSIZE") or SIMPLE_BUFFSIZE)


def connection_bytes(env: Mapping[str, str], p2p_read: bool) -> tuple[int, int]:
    """(receiving, sending) bytes of one connection, each rounded up to CUDA_IPC_MIN."""
    ll, ll128, simple = buffer_sizes(env)
    recv = CONN_HEADER + ll + ll128 + (0 if p2p_read else simple)
    send = CONN_HEADER + (simple if p2p_read else 0)
    up = lambda n: -(-n // CUDA_IPC_MIN) * CUDA_IPC_MIN  # noqa: E731
    return up(recv), up(send)


def ring_channels(device: str, env: Mapping[str, str]) -> int:
    channels = 2 if device.lower() in PCIE_CARDS else 16
    low = _param(env, "MIN_NCHANNELS")
    low = _param(env, "MIN_NRINGS") if low is None else low
    high = _param(env, "MAX_NCHANNELS")
    high = _param(env, "MAX_NRINGS") if high is None else high
    if high is not None:
        channels = min(channels, max(1, min(high, MAXCHANNELS)))
    if low is not None:
        channels = max(channels, min(low, MAXCHANNELS))
    return channels


def p2p_channels(device: str, env: Mapping[str, str]) -> int:
    channels = 2 if device.lower() in PCIE_CARDS else 16
    high = _param(env, "MAX_P2P_NCHANNELS")
    low = _param(env, "MIN_P2P_NCHANNELS")
    if high is not None:
        channels = min(channels, max(1, high))
    if low is not None:
        channels = max(channels, low)
    return _pow2_up(channels)


def communicator_bytes(comm: Communicator, device: str, capability: tuple[int, int],
                       env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(bytes, basis) of one communicator's buffers on one rank."""
    env = os.environ if env is None else env
    if comm.ranks < 2:
        return 0, "a communicator of one rank connects to nobody: no buffers"
    read = capability == (8, 0) and device.lower() not in PCIE_CARDS
    if _param(env, "P2P_READ_ENABLE") is not None:
        read = _param(env, "P2P_READ_ENABLE") != 0
    recv, send = connection_bytes(env, read)
    ll, ll128, simple = buffer_sizes(env)
    parts, total = [], 0
    if comm.ring:
        c = ring_channels(device, env)
        total += c * (recv + send)
        parts.append(f"ring: {c} channels x (recv {recv:,} + send {send:,} B)")
    peers = len(comm.send_peers) + len(comm.recv_peers)
    if peers:
        p = p2p_channels(device, env)
        total += p * (len(comm.recv_peers) * recv + len(comm.send_peers) * send)
        parts.append(f"p2p: {p} channels per peer x ({len(comm.recv_peers)} recv x {recv:,} + "
                     f"{len(comm.send_peers)} send x {send:,} B)")
    basis = (f"NCCL buffers of communicator {comm.name} ({comm.ranks} ranks): "
             + "; ".join(parts) + f". A connection holds a 4,096 B header plus LL {ll:,}, LL128 "
             f"{ll128:,} and Simple {simple:,} B buffers ({'Simple on the sender: P2P read' if read else 'all on the receiver'}), "
             "rounded up to 2 MiB (NCCL src/init.cc computeBuffSizes, src/transport/p2p.cc). "
             "Channel counts are NCCL's topology choice, assumed here unless "
             "NCCL_MIN_NCHANNELS/NCCL_MAX_NCHANNELS pin them; tree and NVLS buffers are not "
             "included. Approximate")
    return total, basis
