"""``python -m benchmarks.pool``: this benchmark alone (see :mod:`benchmarks.pool`)."""

import sys

from benchmarks.pool import main

main(sys.argv[1:])
