"""``python -m benchmarks.events``: this benchmark alone (see :mod:`benchmarks.events`)."""

import sys

from benchmarks.events import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
