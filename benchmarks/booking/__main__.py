"""``python -m benchmarks.booking``: this benchmark alone (see :mod:`benchmarks.booking`)."""

import sys

from benchmarks.booking import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
