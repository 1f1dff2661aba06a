"""The memlens language server (`python -m memlens.server`): finds trace targets, runs traces
in worker processes, and shows the newest snapshot of each target as inlay hints, hovers,
CodeLens, diagnostics and `memlens/annotations` notifications. Never imports torch.

One concept per module: protocol (custom methods), settings, outline (Python syntax),
targets (discovery), worker (the trace process), tracing (running traces), commands (what a
trace means on the LSP side), digest (reading snapshots, in a helper process), index (the
newest snapshot per target), annotations (snapshot -> per-line text and hovers), edits (line
mapping), documents (open documents), payloads (what the editor receives), client (sending it),
diagnostics (kept per key), server (state), handlers/ (the LSP handlers, by concern).
"""
