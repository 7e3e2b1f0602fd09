"""``python -m benchmarks.timers``: this benchmark alone (see :mod:`benchmarks.timers`)."""

import sys

from benchmarks.timers import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
