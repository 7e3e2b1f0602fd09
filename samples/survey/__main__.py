"""``python -m samples.survey serve|load|check|demo`` (see :mod:`samples.survey.cli`)."""

import sys

from samples.survey.cli import main

if __name__ == "__main__":
    sys.exit(main())
