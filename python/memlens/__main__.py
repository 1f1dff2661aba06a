import os
import sys

from .cli import main

code = main()
# Leave without interpreter teardown: everything is written, and torch's autograd device
# threads can race the teardown and abort a finished trace ("terminate called without an
# active exception", pytorch#38228).
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
