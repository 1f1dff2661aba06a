"""The LSP surface of the server, by concern: the session (session.py), open documents
(documents.py), traces and searches (jobs.py), snapshots (snapshots.py). Each module's handlers
are top-level functions listed in its `HANDLERS`; `register` hands them all to pygls."""

from __future__ import annotations

from ..server import MemlensServer
from . import documents, jobs, session, snapshots
from .handler import FEATURE

HANDLERS = [*session.HANDLERS, *documents.HANDLERS, *jobs.HANDLERS, *snapshots.HANDLERS]


def register(ls: MemlensServer) -> MemlensServer:
    for h in HANDLERS:
        if h.kind == FEATURE:
            ls.feature(h.name, h.options)(h.fn)
        else:
            ls.command(h.name)(h.fn)
    return ls


def create_server() -> MemlensServer:
    return register(MemlensServer())
