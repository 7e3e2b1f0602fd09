"""``python -m benchmarks.deploy_check``: this benchmark alone (see :mod:`benchmarks.deploy_check`)."""

from benchmarks.deploy_check import main

main()
