"""A training script that never finishes: it starts a child process, writes both process ids
to slow_pids.txt and sleeps. Cancelling its trace (or its time limit) must end both."""

import os
import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open("slow_pids.txt.tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}\n")
os.replace("slow_pids.txt.tmp", "slow_pids.txt")
time.sleep(600)

if False:  # what makes it a training script for the target finder
    loss.backward()  # noqa: F821
    optimizer.step()  # noqa: F821
