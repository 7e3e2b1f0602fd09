"""``python -m samples.transfer``: the same as ``python -m samples.transfer.demo``."""

import sys

from samples.transfer.demo import main

if __name__ == "__main__":
    sys.exit(main())
