"""Open documents: their text as it changes, and what is shown in them (hovers, inlay hints,
CodeLens, the annotations and which trace they come from).

Each handler is thin: it calls MemlensServer (traces: its TraceCommands; payloads:
payloads.py). `HANDLERS` is what handlers/__init__.py registers."""

from __future__ import annotations

from lsprotocol import types as lsp
from pygls import uris
from pygls.exceptions import JsonRpcInvalidParams

from ...snapshot.digest import normalize_path
from .. import payloads
from ..documents import now_utc
from .. import protocol as P
from ..server import MemlensServer
from .handler import (COMMAND, FEATURE, Handler, command_params, guard, params_dict,
                      refusals_as_invalid_params)


@guard
def did_open(ls: MemlensServer, params: lsp.DidOpenTextDocumentParams):
    doc = params.text_document
    ls.open_document(doc.uri, ls.workspace.get_text_document(doc.uri).source, doc.version)


@guard
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


@guard
async def did_save(ls: MemlensServer, params: lsp.DidSaveTextDocumentParams):
    state = ls.docs.get(params.text_document.uri)
    path = state.path if state else normalize_path(
        uris.to_fs_path(params.text_document.uri) or "")
    ls.commands.trace_on_save(path)
    if state is not None:
        ls.update_document_targets(state)
        ls.update_budget_diagnostics()


@guard
def did_close(ls: MemlensServer, params: lsp.DidCloseTextDocumentParams):
    state = ls.docs.pop(params.text_document.uri, None)
    if state is not None:
        ls.doc_targets.pop(state.path, None)


def hover(ls: MemlensServer, params: lsp.HoverParams):
    state = ls.docs.get(params.text_document.uri)
    if state is None or state.entry is None:
        return None
    return payloads.hover(state, params.position.line, ls.budget_for(None, state.entry),
                          now_utc(), ls.workspace.position_codec.client_num_units)


def inlay_hints(ls: MemlensServer, params: lsp.InlayHintParams):
    state = ls.docs.get(params.text_document.uri)
    if state is None or not state.placed or not ls.settings.inlayHints:
        return []
    return payloads.inlay_hints(state, params.range.start.line, params.range.end.line,
                                ls.workspace.position_codec.client_num_units)


def code_lens(ls: MemlensServer, params: lsp.CodeLensParams):
    state = ls.docs.get(params.text_document.uri)
    path = state.path if state else normalize_path(
        uris.to_fs_path(params.text_document.uri) or "")
    return payloads.code_lenses(ls.doc_targets.get(path, []), ls.runner.running,
                                ls.entry_for, ls.settings.device,
                                state.entry if state else ls.shown_entry(path))


def document_annotations(ls: MemlensServer, params):
    uri = params_dict(params).get("uri")
    state = ls.docs.get(uri) if uri else None
    if state is None:
        raise JsonRpcInvalidParams(message=f"{uri!r} is not an open document")
    return ls.annotations_json(state)


def document_traces(ls: MemlensServer, params):
    uri = params_dict(params).get("uri")
    path = normalize_path(uris.to_fs_path(uri) or uri) if uri else None
    return ls.document_traces(path)


def choose_trace(ls: MemlensServer, *args):
    snapshot = command_params(args).get("snapshot")
    with refusals_as_invalid_params():
        return ls.choose_trace(str(snapshot) if snapshot else None)


HANDLERS = [
    Handler(FEATURE, lsp.TEXT_DOCUMENT_DID_OPEN, did_open),
    Handler(FEATURE, lsp.TEXT_DOCUMENT_DID_CHANGE, did_change),
    Handler(FEATURE, lsp.TEXT_DOCUMENT_DID_SAVE, did_save),
    Handler(FEATURE, lsp.TEXT_DOCUMENT_DID_CLOSE, did_close),
    Handler(FEATURE, lsp.TEXT_DOCUMENT_HOVER, hover),
    Handler(FEATURE, lsp.TEXT_DOCUMENT_INLAY_HINT, inlay_hints,
            lsp.InlayHintOptions(resolve_provider=False)),
    Handler(FEATURE, lsp.TEXT_DOCUMENT_CODE_LENS, code_lens,
            lsp.CodeLensOptions(resolve_provider=False)),
    Handler(FEATURE, P.REQ_DOCUMENT_ANNOTATIONS, document_annotations),
    Handler(FEATURE, P.REQ_DOCUMENT_TRACES, document_traces),
    Handler(COMMAND, P.CMD_CHOOSE_TRACE, choose_trace),
]
