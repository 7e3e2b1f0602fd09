"""``python -m benchmarks.outbox``: this benchmark alone (see :mod:`benchmarks.outbox`)."""

import sys

from benchmarks.outbox import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
