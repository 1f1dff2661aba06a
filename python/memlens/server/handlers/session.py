"""The session: initialization, settings, workspace folders, progress cancels, shutdown, and what
the server says of itself.

Each handler is thin: it calls MemlensServer (traces: its TraceCommands; payloads:
payloads.py). `HANDLERS` is what handlers/__init__.py registers."""

from __future__ import annotations

from lsprotocol import types as lsp

from .. import protocol as P
from ..server import MemlensServer
from ..settings import parse_settings
from .handler import FEATURE, Handler, guard


def initialize(ls: MemlensServer, params: lsp.InitializeParams):
    opts = params.initialization_options
    if isinstance(opts, dict):
        raw = opts.get("settings", opts.get(P.SETTINGS_SECTION, opts))
        if isinstance(raw, dict) and P.SETTINGS_SECTION in raw and \
                isinstance(raw[P.SETTINGS_SECTION], dict):
            raw = raw[P.SETTINGS_SECTION]
        ls.settings = parse_settings(raw, lambda m: ls.log(m, lsp.MessageType.Warning))


@guard
async def initialized(ls: MemlensServer, params: lsp.InitializedParams):
    ls.log(f"memlens language server {ls.version} ({ls.server_info()['python']}); "
           f"workspace: {', '.join(ls.folders) or 'none'}")
    await ls.pull_settings()
    ls.warm_up()
    await ls.refresh_index()
    await ls.watch_snapshots()
    await ls.scan(force=True)
    ls.update_budget_diagnostics()
    ls.client.refresh_views()


@guard
async def did_change_configuration(ls: MemlensServer, params):
    settings = getattr(params, "settings", None)
    if isinstance(settings, dict) and isinstance(settings.get(P.SETTINGS_SECTION), dict):
        ls.apply_settings(settings[P.SETTINGS_SECTION])
    else:
        await ls.pull_settings()


@guard
async def did_change_folders(ls: MemlensServer, params):
    await ls.refresh_index()
    await ls.scan(force=True)


@guard
async def did_change_watched_files(ls: MemlensServer, params: lsp.DidChangeWatchedFilesParams):
    await ls.refresh_index_logged()


@guard
def progress_cancel(ls: MemlensServer, params: lsp.WorkDoneProgressCancelParams):
    ls.commands.on_progress_cancel(params.token)
    ls.fits.on_progress_cancel(params.token)


def shutdown(ls: MemlensServer, *args):
    ls.runner.running.stop_all("cancelled")
    ls.fits.running.stop_all("cancelled")


def server_info(ls: MemlensServer, params):
    return ls.server_info()


HANDLERS = [
    Handler(FEATURE, lsp.INITIALIZE, initialize),
    Handler(FEATURE, lsp.INITIALIZED, initialized),
    Handler(FEATURE, lsp.WORKSPACE_DID_CHANGE_CONFIGURATION, did_change_configuration),
    Handler(FEATURE, lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, did_change_folders),
    Handler(FEATURE, lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES, did_change_watched_files),
    Handler(FEATURE, lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL, progress_cancel),
    Handler(FEATURE, lsp.SHUTDOWN, shutdown),
    Handler(FEATURE, P.REQ_SERVER_INFO, server_info),
]
