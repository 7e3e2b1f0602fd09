"""``python -m samples.transfer serve|load|check|demo`` (see :mod:`samples.transfer.cli`)."""

import sys

from samples.transfer.cli import main

if __name__ == "__main__":
    sys.exit(main())
