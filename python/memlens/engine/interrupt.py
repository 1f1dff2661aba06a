"""Ctrl-C (SIGINT) during a trace ends it with the report of what was traced so far.

The first SIGINT raises `Interrupted` (a StopTracing, so the trace ends as after its
iterations, and not a KeyboardInterrupt, which training scripts often catch to "stop training
early" and carry on) into the script wherever it is, also when it is blocked in Python code.
If memlens' own bookkeeping is running at that moment (the accountant booking an op, a hook),
raising there could leave the ledger half-updated: the interrupt is then handed to the
accountant, which stops the script at its next op, and is retried every 50 ms until it lands
in the script's code. A second SIGINT is Python's own KeyboardInterrupt (the CLI then exits
130 with no report).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from ..errors import StopTracing

_HERE = os.path.dirname(os.path.abspath(__file__))
_RUNNERS = os.path.join(_HERE, "targets") + os.sep  # what calls the script: its frames and out
# memlens code that only passes control to the script (raising inside it is safe).
_PASS_THROUGH = tuple(os.path.join(_HERE, d) + os.sep for d in ("patches", "plugins"))
_RETRY_S = 0.05


class Interrupted(StopTracing):
    """SIGINT arrived during the trace."""


def _in_bookkeeping(frame) -> bool:
    """Whether memlens code between the script's runner and `frame` is running."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_RUNNERS):
            return False
        if name.startswith(_HERE + os.sep) and not name.startswith(_PASS_THROUGH):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def stop_on_interrupt(tracer):
    """While tracing: SIGINT ends the trace (`tracer.interrupted` is then True)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are delivered to the main thread only
        return
    can_retry = hasattr(signal, "setitimer")
    previous_alarm = []  # the script's SIGALRM handler, while a retry is armed

    def interrupt(signum, frame):
        if signum == signal.SIGINT:
            tracer.interrupted = True
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a second one: exit now
        if tracer.end_seq >= 0:
            return  # the trace has ended already (the script is being stopped): report it
        if not _in_bookkeeping(frame):
            tracer.mark_end()
            raise Interrupted()
        tracer.phases.request_interrupt()  # the accountant stops the script at its next op
        if can_retry:
            if not previous_alarm:
                previous_alarm.append(signal.signal(signal.SIGALRM, interrupt))
            signal.setitimer(signal.ITIMER_REAL, _RETRY_S)

    previous_int = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        if previous_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_alarm[0])
        if signal.getsignal(signal.SIGINT) is interrupt:
            signal.signal(signal.SIGINT, previous_int)
