"""``python -m benchmarks.runs_list``: this benchmark alone (see :mod:`benchmarks.runs_list`)."""

from benchmarks.runs_list import main

main()
