"""``python -m idemflow.cli``: the ``idemflow`` command, as ``python -m idemflow`` runs it."""

from __future__ import annotations

import sys

from idemflow.cli import main

if __name__ == "__main__":
    sys.exit(main())
