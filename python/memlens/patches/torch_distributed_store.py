"""The key-value store of a simulated rank (part of patches/torch_distributed.py's set): the
store behind the default process group (`dist.distributed_c10d._get_default_store()`, the
store of every group) and what a script gets when it builds a `TCPStore`.

torch's own stand-in for a fake group, `FakeStore`, implements nothing: `store.add(...)` from a
library (OLMo-core, a store-based barrier) fails in C++ with `Tried to call pure virtual
function "::c10d::Store::add"`. This store answers the whole Store API as an in-process
`HashStore` does (`set`, `get`, `add`, `compare_set`, `check`, `num_keys`, `delete_key`,
`append`, `multi_get`, `multi_set`; the queues and `list_keys` called on this store itself:
torch's C++ does not pass them on to a store written in Python), with the one difference a job of
one simulated rank needs: the other ranks never write. `wait(keys)` for keys this rank has not
set returns at once, as it would once the other ranks had set them (a barrier of `add`s and a
`wait` for the last one passes); `get` of a key no rank here set is an error naming it (its
value is another rank's, which a simulated rank cannot know), raised as the store's own
`DistStoreError` (a real store raises it when the wait for the key times out).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .patcher import Patcher


def _store_class():
    """The class, made on first use: torch.distributed is imported only when a rank is
    simulated."""
    import torch.distributed as dist

    global _SIMULATED_STORE
    if _SIMULATED_STORE is not None:
        return _SIMULATED_STORE

    class SimulatedRankStore(dist.Store):
        """A store for one simulated rank of a job (see the module docstring)."""

        def __init__(self) -> None:
            super().__init__()
            self._kv = dist.HashStore()

        def set(self, key: str, value) -> None:
            self._kv.set(key, value)

        def get(self, key: str) -> bytes:
            if not self._kv.check([key]):
                raise dist.DistStoreError(
                    f"memlens: torch.distributed Store.get({key!r}) waits for a key that no "
                    "rank of the simulated job has set: its value would come from another "
                    "rank, and a simulated rank runs alone. Set it on every rank, or read it "
                    "only where this rank set it")
            return self._kv.get(key)

        def add(self, key: str, value: int) -> int:
            return self._kv.add(key, value)

        def compare_set(self, key: str, expected_value, desired_value) -> bytes:
            return self._kv.compare_set(key, expected_value, desired_value)

        def check(self, keys: list[str]) -> bool:
            return self._kv.check(keys)

        def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
            return None  # set here already, or by the other ranks, which never run late

        def num_keys(self) -> int:
            return self._kv.num_keys()

        def delete_key(self, key: str) -> bool:
            return self._kv.delete_key(key)

        # The names C++ calls through (a PrefixStore over this one: the default group's).
        deleteKey = delete_key  # noqa: N815
        getNumKeys = num_keys  # noqa: N815

        def append(self, key: str, value) -> None:
            self._kv.append(key, value)

        def multi_get(self, keys: list[str]) -> list[bytes]:
            return [self.get(key) for key in keys]

        def multi_set(self, keys: list[str], values: list[Any]) -> None:
            self._kv.multi_set(keys, values)

        def has_extended_api(self) -> bool:
            return True

        def queue_push(self, key: str, value) -> None:
            self._kv.queue_push(key, value)

        def queue_pop(self, key: str, block: bool = True) -> bytes:
            return self._kv.queue_pop(key, block)

        def queue_len(self, key: str) -> int:
            return self._kv.queue_len(key)

        def list_keys(self) -> list[str]:
            return self._kv.list_keys()

        def set_timeout(self, timeout: timedelta) -> None:
            self._kv.set_timeout(timeout)

        @property
        def timeout(self) -> timedelta:
            return self._kv.timeout

    _SIMULATED_STORE = SimulatedRankStore
    return SimulatedRankStore


_SIMULATED_STORE = None
# The Python stores the default groups use. C++ (the group's PrefixStore) holds only the C++
# half of a Python store: without its Python object every call is "pure virtual".
_KEPT: list = []


def simulated_store():
    """A new store for the simulated rank's default group, kept alive until the patches are
    undone (apply)."""
    store = _store_class()()
    _KEPT.append(store)
    return store


class _InProcessTCPStoreMixin:
    """What a TCPStore reports about itself, for a store that never connects."""

    def __init__(self, host_name: str = "127.0.0.1", port: int = 0, world_size=None,
                 is_master: bool = False, timeout=None, wait_for_workers: bool = True,
                 multi_tenant: bool = False, master_listen_fd=None, use_libuv: bool = True):
        super().__init__()
        self._memlens_host, self._memlens_port = host_name, int(port)
        if timeout is not None:
            self.set_timeout(timeout)

    @property
    def host(self) -> str:
        return self._memlens_host

    @property
    def port(self) -> int:
        return self._memlens_port

    @property
    def libuvBackend(self) -> bool:  # noqa: N802 (TCPStore's name)
        return True


def apply(patcher: Patcher, bound_in) -> None:
    """`TCPStore`, which connects (or listens) when it is built, becomes the simulated rank's
    store: a script that builds one (to pass as `store=`, or for a barrier of its own) gets a
    store that works for this process alone. `bound_in(name, original, first)`: the modules
    that bound the original. The default groups' stores are let go when the patches are undone."""
    import torch.distributed as dist

    original = dist.TCPStore
    in_process = type("TCPStore", (_InProcessTCPStoreMixin, _store_class()),
                      {"__module__": __name__, "__doc__": "An in-process stand-in for "
                       "TCPStore: a simulated rank has no other ranks to connect to."})
    patcher.set_everywhere(bound_in("TCPStore", original, [dist]), "TCPStore", in_process)
    patcher.defer(_KEPT.clear)
