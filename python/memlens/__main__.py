import os
import sys

from .cli import main

code = main()
from .cuda import build  # noqa: E402

if build.loaded_shim() is not None:
    # Fake-CUDA backward starts autograd device threads that can abort interpreter teardown
    # (pytorch#38228, docs/fake-cuda-notes.md): everything is written; leave without teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
