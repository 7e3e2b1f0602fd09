"""``python -m benchmarks.peers``: this benchmark alone (see :mod:`benchmarks.peers`)."""

import sys

from benchmarks.peers import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
