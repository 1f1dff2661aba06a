"""The diagnostics shown: kept per key (one budget warning and one trace error per target, built
in payloads.py) and published per document, whenever a key's diagnostic changes."""

from __future__ import annotations

from typing import Callable

from lsprotocol import types as lsp


class DiagnosticStore:
    """Diagnostics by key; `publish(uri, diagnostics)` is called for each URI that changed."""

    def __init__(self, publish: Callable[[str, list[lsp.Diagnostic]], None]):
        self.publish = publish
        self._by_key: dict[str, tuple[str, lsp.Diagnostic]] = {}

    def set(self, key: str, uri: str | None, diag: lsp.Diagnostic | None) -> None:
        old = self._by_key.pop(key, None)
        if diag is not None and uri:
            self._by_key[key] = (uri, diag)
        touched = {u for u in (old[0] if old else None, uri if diag is not None else None) if u}
        for u in touched:
            self.publish(u, self.for_uri(u))

    def clear(self, key: str) -> None:
        self.set(key, None, None)

    def for_uri(self, uri: str) -> list[lsp.Diagnostic]:
        return [d for u, d in self._by_key.values() if u == uri]

    def keys(self) -> list[str]:
        return list(self._by_key)
