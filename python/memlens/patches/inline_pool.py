"""A ThreadPoolExecutor whose jobs run at submit, in the submitting thread, under its modes.

torch's dispatch modes are per thread: in a library's worker thread the FakeTensorMode and the
accountant are not active, and a fake tensor that meets no mode re-enters the one it holds,
whose per-mode state (`in_kernel_invocation`, its enter stack) the traced thread changes at the
same time ("fake_mode.in_kernel_invocation must be False"). Libraries that hand tensor work to
a pool (transformers' checkpoint loading, torch.distributed.checkpoint's async save, OLMo-core's
checkpoint writer) get this executor in its place: the work is the same, done in the order it
is submitted, and each Future is finished when `submit` returns.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor


class InlineThreadPoolExecutor(ThreadPoolExecutor):
    """A ThreadPoolExecutor whose jobs run at submit, in the submitting thread."""

    def submit(self, fn, /, *args, **kwargs):
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # the worker would hand it to .result() too
            future.set_exception(e)
        return future
