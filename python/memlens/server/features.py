"""The LSP surface of the server: standard features (hover, inlay hints, CodeLens, document
sync, configuration, progress cancel) and the custom methods of protocol.py. Each handler is
thin: it calls MemlensServer (traces: its TraceCommands; payloads: payloads.py), and a failure
is logged, never fatal."""

from __future__ import annotations

import functools
from typing import Any

from lsprotocol import types as lsp
from pygls import uris
from pygls.exceptions import JsonRpcInvalidParams

from ..errors import MemlensError
from . import payloads
from . import protocol as P
from ..snapshot.digest import normalize_path
from .documents import now_utc
from .server import MemlensServer
from .settings import parse_settings


def _guard(fn):
    """Notification handlers: log what goes wrong instead of raising into pygls."""
    @functools.wraps(fn)
    async def wrapper(ls: MemlensServer, *args):
        try:
            result = fn(ls, *args)
            if hasattr(result, "__await__"):
                await result
        except Exception as e:  # noqa: BLE001 - the server must outlive any bug
            ls.log(f"internal error in {fn.__name__}: {type(e).__name__}: {e}",
                   lsp.MessageType.Error)
    return wrapper


def _dict(params: Any) -> dict[str, Any]:
    if params is None:
        return {}
    if isinstance(params, dict):
        return params
    if hasattr(params, "_asdict"):
        return params._asdict()
    raise JsonRpcInvalidParams(message=f"expected an object, got {type(params).__name__}")


def register(ls: MemlensServer) -> MemlensServer:
    @ls.feature(lsp.INITIALIZE)
    def initialize(ls: MemlensServer, params: lsp.InitializeParams):
        opts = params.initialization_options
        if isinstance(opts, dict):
            raw = opts.get("settings", opts.get(P.SETTINGS_SECTION, opts))
            if isinstance(raw, dict) and P.SETTINGS_SECTION in raw and \
                    isinstance(raw[P.SETTINGS_SECTION], dict):
                raw = raw[P.SETTINGS_SECTION]
            ls.settings = parse_settings(raw, lambda m: ls.log(m, lsp.MessageType.Warning))

    @ls.feature(lsp.INITIALIZED)
    @_guard
    async def initialized(ls: MemlensServer, params: lsp.InitializedParams):
        ls.log(f"memlens language server {ls.version} ({ls.server_info()['python']}); "
               f"workspace: {', '.join(ls.folders) or 'none'}")
        await ls.pull_settings()
        ls.warm_up()
        await ls.refresh_index()
        ls.spawn(ls.poll())
        await ls.scan(force=True)
        ls.update_budget_diagnostics()
        ls.client.refresh_views()

    @ls.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @_guard
    async def did_change_configuration(ls: MemlensServer, params):
        settings = getattr(params, "settings", None)
        if isinstance(settings, dict) and isinstance(settings.get(P.SETTINGS_SECTION), dict):
            ls.apply_settings(settings[P.SETTINGS_SECTION])
        else:
            await ls.pull_settings()

    @ls.feature(lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    @_guard
    async def did_change_folders(ls: MemlensServer, params):
        await ls.refresh_index()
        await ls.scan(force=True)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    @_guard
    def did_open(ls: MemlensServer, params: lsp.DidOpenTextDocumentParams):
        doc = params.text_document
        ls.open_document(doc.uri, ls.workspace.get_text_document(doc.uri).source, doc.version)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    @_guard
    def did_change(ls: MemlensServer, params: lsp.DidChangeTextDocumentParams):
        uri = params.text_document.uri
        state = ls.docs.get(uri)
        text = ls.workspace.get_text_document(uri).source
        if state is None:
            ls.open_document(uri, text, params.text_document.version)
            return
        state.version = params.text_document.version
        state.update_text(text)
        ls.update_document_targets(state, delay=0.3)  # parsing on every keystroke is waste
        ls.publish_annotations(state, delay=0.05)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    @_guard
    async def did_save(ls: MemlensServer, params: lsp.DidSaveTextDocumentParams):
        state = ls.docs.get(params.text_document.uri)
        path = state.path if state else normalize_path(
            uris.to_fs_path(params.text_document.uri) or "")
        ls.commands.trace_on_save(path)
        if state is not None:
            ls.update_document_targets(state)
            ls.update_budget_diagnostics()

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    @_guard
    def did_close(ls: MemlensServer, params: lsp.DidCloseTextDocumentParams):
        state = ls.docs.pop(params.text_document.uri, None)
        if state is not None:
            ls.doc_targets.pop(state.path, None)

    @ls.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    @_guard
    def progress_cancel(ls: MemlensServer, params: lsp.WorkDoneProgressCancelParams):
        ls.commands.on_progress_cancel(params.token)
        ls.fits.on_progress_cancel(params.token)

    @ls.feature(lsp.SHUTDOWN)
    def shutdown(ls: MemlensServer, *args):
        ls.runner.running.stop_all("cancelled")
        ls.fits.running.stop_all("cancelled")

    # -- reading the annotations -----------------------------------------------------------
    @ls.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: MemlensServer, params: lsp.HoverParams):
        state = ls.docs.get(params.text_document.uri)
        if state is None or state.entry is None:
            return None
        return payloads.hover(state, params.position.line, ls.budget_for(None, state.entry),
                              now_utc(), ls.workspace.position_codec.client_num_units)

    @ls.feature(lsp.TEXT_DOCUMENT_INLAY_HINT, lsp.InlayHintOptions(resolve_provider=False))
    def inlay_hints(ls: MemlensServer, params: lsp.InlayHintParams):
        state = ls.docs.get(params.text_document.uri)
        if state is None or not state.placed or not ls.settings.inlayHints:
            return []
        return payloads.inlay_hints(state, params.range.start.line, params.range.end.line,
                                    ls.workspace.position_codec.client_num_units)

    @ls.feature(lsp.TEXT_DOCUMENT_CODE_LENS, lsp.CodeLensOptions(resolve_provider=False))
    def code_lens(ls: MemlensServer, params: lsp.CodeLensParams):
        state = ls.docs.get(params.text_document.uri)
        path = state.path if state else normalize_path(
            uris.to_fs_path(params.text_document.uri) or "")
        return payloads.code_lenses(ls.doc_targets.get(path, []), ls.runner.running,
                                    ls.entry_for, ls.settings.device,
                                    state.entry if state else ls.shown_entry(path))

    # -- custom requests -------------------------------------------------------------------
    @ls.feature(P.REQ_TARGETS)
    async def targets(ls: MemlensServer, params):
        params = _dict(params)
        await ls.scan()
        found = ls.all_targets()
        if params.get("uri"):
            path = normalize_path(uris.to_fs_path(params["uri"]) or params["uri"])
            found = [t for t in found if t.path == path]
        return {"targets": [ls.target_json(t) for t in found]}

    @ls.feature(P.REQ_DOCUMENT_ANNOTATIONS)
    def document_annotations(ls: MemlensServer, params):
        uri = _dict(params).get("uri")
        state = ls.docs.get(uri) if uri else None
        if state is None:
            raise JsonRpcInvalidParams(message=f"{uri!r} is not an open document")
        return ls.annotations_json(state)

    @ls.feature(P.REQ_SNAPSHOTS)
    def snapshots(ls: MemlensServer, params):
        return ls.snapshots_json()

    @ls.feature(P.REQ_DOCUMENT_TRACES)
    def document_traces(ls: MemlensServer, params):
        uri = _dict(params).get("uri")
        path = normalize_path(uris.to_fs_path(uri) or uri) if uri else None
        return ls.document_traces(path)

    @ls.command(P.CMD_CHOOSE_TRACE)
    def choose_trace(ls: MemlensServer, *args):
        snapshot = _dict(args[0] if args else None).get("snapshot")
        try:
            return ls.choose_trace(str(snapshot) if snapshot else None)
        except MemlensError as e:
            raise JsonRpcInvalidParams(message=e.message) from None

    @ls.feature(P.REQ_SERVER_INFO)
    def server_info(ls: MemlensServer, params):
        return ls.server_info()

    @ls.feature(P.REQ_FIT_SPACE)
    async def fit_space(ls: MemlensServer, params):
        try:
            return await ls.fits.space(_dict(params))
        except MemlensError as e:
            raise JsonRpcInvalidParams(message=e.message) from None

    # -- commands ----------------------------------------------------------------------------
    @ls.command(P.CMD_TRACE)
    async def trace(ls: MemlensServer, *args):
        params = _dict(args[0] if args else None)
        try:
            return await ls.commands.trace(params, ls.protocol.msg_id)
        except MemlensError as e:
            ls.log(str(e), lsp.MessageType.Warning)
            raise JsonRpcInvalidParams(message=e.message) from None

    @ls.command(P.CMD_FIT)
    async def fit(ls: MemlensServer, *args):
        params = _dict(args[0] if args else None)
        try:
            return await ls.fits.fit(params, ls.protocol.msg_id)
        except MemlensError as e:
            ls.log(str(e), lsp.MessageType.Warning)
            raise JsonRpcInvalidParams(message=e.message) from None

    @ls.command(P.CMD_CANCEL_TRACE)
    def cancel_trace(ls: MemlensServer, *args):
        tid = _dict(args[0] if args else None).get("targetId")
        run = ls.runner.running.get(str(tid))
        if run is not None:
            run.stop("cancelled")
        return {"cancelled": run is not None}

    @ls.command(P.CMD_OPEN_REPORT)
    async def open_report(ls: MemlensServer, *args):
        params = _dict(args[0] if args else None)
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

    return ls


def create_server() -> MemlensServer:
    return register(MemlensServer())
