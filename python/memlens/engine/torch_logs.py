"""torch's own log records while a script is traced go to the trace log, not to the user.

A shape error inside an op makes fake_tensor log "failed while attempting to run meta for …"
with a traceback (~20 lines) before the exception reaches memlens, which then prints the same
error once, at the user's line. torch writes its records through handlers on its loggers
("torch" and the ones TORCH_LOGS configured, which do not propagate): for the trace those
handlers are replaced by the trace log's, and put back after."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator


def _torch_loggers() -> list[logging.Logger]:
    """torch's loggers that write somewhere: "torch" and each of its children with handlers."""
    loggers = [logging.getLogger("torch")]
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("torch.") and isinstance(logger, logging.Logger) and logger.handlers:
            loggers.append(logger)
    return loggers


@contextlib.contextmanager
def torch_logs_to(handler: logging.Handler) -> Iterator[None]:
    """While inside, every record torch's loggers would print goes to `handler` instead; the
    handler takes the formatter torch's own handler had (its "E1202 12:00:00 …" prefix)."""
    import torch  # noqa: F401  torch sets its loggers' handlers up as it is imported
    saved = [(logger, list(logger.handlers)) for logger in _torch_loggers()]
    if handler.formatter is None:
        handler.setFormatter(next((h.formatter for _, hs in saved for h in hs if h.formatter),
                                  None))
    for logger, _ in saved:
        logger.handlers = [handler]
    try:
        yield
    finally:
        for logger, handlers in saved:
            logger.handlers = handlers


class TraceLogFile(logging.Handler):
    """The trace log of a CLI run: a file created on the first record (most traces log none),
    so `path` exists exactly when `records` > 0."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self.records = 0
        self._file = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self._file is None:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")
            self._file.write(self.format(record) + "\n")
            self._file.flush()
            self.records += 1
        except OSError:  # a log that cannot be written must not end the trace
            pass

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()
