"""Snapshots: the workspace's list, and opening one's report.

Each handler is thin: it calls MemlensServer (traces: its TraceCommands; payloads:
payloads.py). `HANDLERS` is what handlers/__init__.py registers."""

from __future__ import annotations

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from .. import protocol as P
from ..server import MemlensServer
from .handler import COMMAND, FEATURE, Handler, command_params


def snapshots(ls: MemlensServer, params):
    return ls.snapshots_json()


async def open_report(ls: MemlensServer, *args):
    params = command_params(args)
    e = None
    if params.get("snapshot"):
        e = ls.index.by_path(str(params["snapshot"]))
    elif params.get("targetId"):
        t = ls.find_target(str(params["targetId"]))
        if t is None:
            raise JsonRpcInvalidParams(message=f"unknown trace target "
                                               f"{params['targetId']!r}")
        e = ls.entry_for(t)
    if e is None or e.digest is None:
        return {"snapshot": None}
    info = ls.snapshot_info(e)
    if params.get("show", True) and ls.client.can("window", "show_document", "support"):
        try:
            await ls.window_show_document_async(lsp.ShowDocumentParams(
                uri=info["uri"], external=False, take_focus=True))
        except Exception as exc:  # the client may refuse; the answer still stands
            ls.log(f"could not show {e.path}: {exc}", lsp.MessageType.Warning)
    return {"snapshot": info}


HANDLERS = [
    Handler(FEATURE, P.REQ_SNAPSHOTS, snapshots),
    Handler(COMMAND, P.CMD_OPEN_REPORT, open_report),
]
