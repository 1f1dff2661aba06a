"""A script whose worker dies (`--mode killed`: SIGKILL, as the kernel's OOM killer would) or
that raises (`--mode raise`); each run appends its mode to $RUN_LOG."""
import argparse
import os
import signal

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["killed", "raise"], required=True)
args = p.parse_args()
with open(os.environ["RUN_LOG"], "a") as log:
    log.write(args.mode + "\n")
if args.mode == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
raise ValueError("the batch does not divide the number of GPUs")
