"""Traces and searches: the workspace's targets, a trace, a fit search and its space, a cancel.

Each handler is thin: it calls MemlensServer (traces: its TraceCommands; payloads:
payloads.py). `HANDLERS` is what handlers/__init__.py registers."""

from __future__ import annotations

from pygls import uris

from ...snapshot.digest import normalize_path
from .. import protocol as P
from ..server import MemlensServer
from .handler import (COMMAND, FEATURE, Handler, command_params, params_dict,
                      refusals_as_invalid_params)


async def targets(ls: MemlensServer, params):
    params = params_dict(params)
    await ls.scan()
    found = ls.all_targets()
    if params.get("uri"):
        path = normalize_path(uris.to_fs_path(params["uri"]) or params["uri"])
        found = [t for t in found if t.path == path]
    return {"targets": [ls.target_json(t) for t in found]}


async def trace(ls: MemlensServer, *args):
    with refusals_as_invalid_params(ls):
        return await ls.commands.trace(command_params(args), ls.protocol.msg_id)


def cancel_trace(ls: MemlensServer, *args):
    tid = command_params(args).get("targetId")
    run = ls.runner.running.get(str(tid))
    if run is not None:
        run.stop("cancelled")
    return {"cancelled": run is not None}


async def fit(ls: MemlensServer, *args):
    with refusals_as_invalid_params(ls):
        return await ls.fits.fit(command_params(args), ls.protocol.msg_id)


async def fit_space(ls: MemlensServer, params):
    with refusals_as_invalid_params():
        return await ls.fits.space(params_dict(params))


HANDLERS = [
    Handler(FEATURE, P.REQ_TARGETS, targets),
    Handler(COMMAND, P.CMD_TRACE, trace),
    Handler(COMMAND, P.CMD_CANCEL_TRACE, cancel_trace),
    Handler(COMMAND, P.CMD_FIT, fit),
    Handler(FEATURE, P.REQ_FIT_SPACE, fit_space),
]
