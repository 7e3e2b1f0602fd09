"""``python -m samples.auction serve|load|check|demo`` (see :mod:`samples.auction.cli`)."""

import sys

from samples.auction.cli import main

if __name__ == "__main__":
    sys.exit(main())
