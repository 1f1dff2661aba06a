"""`memlens fit`: search a job's configuration space for what fits the card (docs/fit.md).

space.py (axes, points, the order of memory) · axes_from_options.py (the space from the command
line and TOML) · script_flags.py (a point into the job's flags) · search.py (what to trace,
what is pruned) · trace_point.py (one trace in a worker process) · local_runner.py /
ray_runner.py · run_dir.py (results kept, resumed) · driver.py · report.py / html_page.py ·
command.py (the subcommand).
"""
