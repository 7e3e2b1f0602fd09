"""``python -m benchmarks.renewal``: this benchmark alone (see :mod:`benchmarks.renewal`)."""

import sys

from benchmarks.renewal import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
