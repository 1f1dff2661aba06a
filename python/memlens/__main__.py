import os
import sys

from .cli import main
from .worker.process_tree import end_children

code = main()
# Leave without interpreter teardown: everything is written, and torch's autograd device
# threads can race the teardown and abort a finished trace ("terminate called without an
# active exception", pytorch#38228).
sys.stdout.flush()
sys.stderr.flush()
end_children()  # in a worker: what the script left running ends with it
os._exit(code)
