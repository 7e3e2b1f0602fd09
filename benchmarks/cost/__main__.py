"""``python -m benchmarks.cost``: this benchmark alone (see :mod:`benchmarks.cost`)."""

import sys

from benchmarks.cost import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
