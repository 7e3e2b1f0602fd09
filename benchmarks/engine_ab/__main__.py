"""``python -m benchmarks.engine_ab``: this benchmark alone (see :mod:`benchmarks.engine_ab`)."""

from benchmarks.engine_ab import main

main()
