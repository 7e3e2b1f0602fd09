"""``python -m benchmarks.drain``: this benchmark alone (see :mod:`benchmarks.drain`)."""

from benchmarks.drain import main

main()
