"""``python -m benchmarks.schedules``: this benchmark alone (see :mod:`benchmarks.schedules`)."""

import sys

from benchmarks.schedules import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
