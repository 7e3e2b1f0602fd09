"""``python -m benchmarks.asyncio_api``: this benchmark alone (see :mod:`benchmarks.asyncio_api`)."""

import sys

from benchmarks.asyncio_api import main

main(sys.argv[1:])
