"""``python -m benchmarks.contention``: this benchmark alone (see :mod:`benchmarks.contention`)."""

from benchmarks.contention import main

main()
