"""``python -m benchmarks.users``: this benchmark alone (see :mod:`benchmarks.users`)."""

import sys

from benchmarks.users import main

main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
