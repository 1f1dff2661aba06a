"""What a handler is, and what every handler module shares: the guard that keeps a
notification handler's failure out of pygls, reading a request's or command's parameters, and
a refusal (MemlensError) answered as invalid parameters."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from ...errors import MemlensError

FEATURE, COMMAND = "feature", "command"


@dataclass(frozen=True)
class Handler:
    kind: str  # FEATURE (an LSP method or notification) or COMMAND (workspace/executeCommand)
    name: str
    fn: Callable
    options: Any = None  # the feature's registration options


def guard(fn):
    """Notification handlers: log what goes wrong instead of raising into pygls."""
    @functools.wraps(fn)
    async def wrapper(ls, *args):
        try:
            result = fn(ls, *args)
            if hasattr(result, "__await__"):
                await result
        except Exception as e:  # noqa: BLE001 - the server must outlive any bug
            ls.log(f"internal error in {fn.__name__}: {type(e).__name__}: {e}",
                   lsp.MessageType.Error)
    return wrapper


def params_dict(params: Any) -> dict[str, Any]:
    if params is None:
        return {}
    if isinstance(params, dict):
        return params
    if hasattr(params, "_asdict"):
        return params._asdict()
    raise JsonRpcInvalidParams(message=f"expected an object, got {type(params).__name__}")


def command_params(args: tuple) -> dict[str, Any]:
    """A workspace/executeCommand's one argument object."""
    return params_dict(args[0] if args else None)


@contextlib.contextmanager
def refusals_as_invalid_params(ls=None):
    """A MemlensError (bad input, named) answers the request as invalid parameters, logged
    where `ls` is given."""
    try:
        yield
    except MemlensError as e:
        if ls is not None:
            ls.log(str(e), lsp.MessageType.Warning)
        raise JsonRpcInvalidParams(message=e.message) from None
