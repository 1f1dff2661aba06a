"""Addresses of functions that a loaded shared library defines but does not export.

torch's libtorch_cpu.so links oneDNN statically and hides its C API from the dynamic symbol
table, yet keeps the full ELF symbol table (.symtab). A hidden function's address is the
library's load address plus the symbol's value; the load address follows from any exported
symbol (dlsym) minus its own .symtab value.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import struct
import tempfile

_SHT_SYMTAB = 2


def symbol_values(path: str, names: set[str]) -> dict[str, int]:
    """The .symtab values (offsets from the load address) of `names` in an ELF64 file. Reading
    libtorch_cpu's symbol table takes over a second, so the answer is cached on disk, keyed by
    the file's identity (path, size, modification time) and the names asked for."""
    cache = _cache_file(path, names)
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    found = _scan(path, names)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(found, f)
        os.replace(tmp, cache)  # atomic: parallel workers never read half a file
    except OSError:
        pass  # a read-only cache only costs time
    return found


def _cache_file(path: str, names: set[str]):
    from ...cuda.build import cache_dir

    st = os.stat(path)
    key = json.dumps([os.path.abspath(path), st.st_size, st.st_mtime_ns, sorted(names)])
    return cache_dir() / "symbols" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _scan(path: str, names: set[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return found  # not a little-endian ELF64 file
        shoff, = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        for _, kind, _, _, offset, size, link, _, _, entsize in sections:
            if kind != _SHT_SYMTAB:
                continue
            f.seek(offset)
            symbols = f.read(size)
            strings_section = sections[link]
            f.seek(strings_section[4])
            strings = f.read(strings_section[5])
            wanted = {n.encode(): n for n in names}
            for i in range(0, len(symbols), entsize or 24):
                name_at, _, _, _, value, _ = struct.unpack_from("<IBBHQQ", symbols, i)
                if value == 0:
                    continue
                name = strings[name_at:strings.index(b"\0", name_at)]
                if name in wanted:
                    found[wanted[name]] = value
    return found


def resolve(path: str, names: set[str], anchor: str) -> dict[str, int] | None:
    """Runtime addresses of `names` in the already loaded library at `path`, using the exported
    symbol `anchor` to find the load address. None if any name is missing."""
    values = symbol_values(path, set(names) | {anchor})
    if anchor not in values or not set(names) <= values.keys():
        return None
    lib = ctypes.CDLL(path)
    base = ctypes.cast(getattr(lib, anchor), ctypes.c_void_p).value - values[anchor]
    return {n: base + values[n] for n in names}
