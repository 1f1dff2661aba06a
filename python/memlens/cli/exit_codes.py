"""The exit statuses of `memlens`: 0 done, 1 an error (one `error:` line), 2 a usage error
(argparse's), 130 interrupted (the report of what was traced still printed)."""

EXIT_USAGE, EXIT_ERROR, EXIT_INTERRUPTED = 2, 1, 130
