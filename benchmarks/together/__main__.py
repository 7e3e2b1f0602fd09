"""``python -m benchmarks.together``: this benchmark alone (see :mod:`benchmarks.together`)."""

import sys

from benchmarks.together import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
