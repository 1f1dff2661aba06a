"""Traces and searches: the workspace's targets, a trace, a fit search and its space, a cancel.

Each handler is thin: it calls MemlensServer (traces: its TraceCommands; payloads:
payloads.py). `HANDLERS` is what handlers/__init__.py registers."""

from __future__ import annotations

from lsprotocol import types as lsp
from pygls import uris
from pygls.exceptions import JsonRpcInvalidParams

from ...errors import MemlensError
from ...snapshot.digest import normalize_path
from .. import protocol as P
from ..server import MemlensServer
from .handler import COMMAND, FEATURE, Handler, params_dict


async def targets(ls: MemlensServer, params):
    params = params_dict(params)
    await ls.scan()
    found = ls.all_targets()
    if params.get("uri"):
        path = normalize_path(uris.to_fs_path(params["uri"]) or params["uri"])
        found = [t for t in found if t.path == path]
    return {"targets": [ls.target_json(t) for t in found]}


async def trace(ls: MemlensServer, *args):
    params = params_dict(args[0] if args else None)
    try:
        return await ls.commands.trace(params, ls.protocol.msg_id)
    except MemlensError as e:
        ls.log(str(e), lsp.MessageType.Warning)
        raise JsonRpcInvalidParams(message=e.message) from None


def cancel_trace(ls: MemlensServer, *args):
    tid = params_dict(args[0] if args else None).get("targetId")
    run = ls.runner.running.get(str(tid))
    if run is not None:
        run.stop("cancelled")
    return {"cancelled": run is not None}


async def fit(ls: MemlensServer, *args):
    params = params_dict(args[0] if args else None)
    try:
        return await ls.fits.fit(params, ls.protocol.msg_id)
    except MemlensError as e:
        ls.log(str(e), lsp.MessageType.Warning)
        raise JsonRpcInvalidParams(message=e.message) from None


async def fit_space(ls: MemlensServer, params):
    try:
        return await ls.fits.space(params_dict(params))
    except MemlensError as e:
        raise JsonRpcInvalidParams(message=e.message) from None


HANDLERS = [
    Handler(FEATURE, P.REQ_TARGETS, targets),
    Handler(COMMAND, P.CMD_TRACE, trace),
    Handler(COMMAND, P.CMD_CANCEL_TRACE, cancel_trace),
    Handler(COMMAND, P.CMD_FIT, fit),
    Handler(FEATURE, P.REQ_FIT_SPACE, fit_space),
]
