"""``python -m benchmarks.soak``: this benchmark alone (see :mod:`benchmarks.soak`)."""

import sys

from benchmarks.soak import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
