"""What CPU kernels allocate for themselves, op by op (see `workspaces_cpu.CPU_RULES`)."""
