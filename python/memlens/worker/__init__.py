"""A memlens worker process (`python -m memlens run|trace ... --json --progress json`) as its
parents (the language server, `--ranks all`, `memlens fit`, the recorded launch scripts) start
it, talk to it and end it: `protocol.py` (its environment, command line, snapshot folder, the
lines it writes), `process_tree.py` (it and every process it starts, ended together)."""
