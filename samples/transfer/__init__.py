"""The bank transfer of the paper: workflows, a multi-process crash demo and its checker.

See ``README.md`` beside this file; ``python -m samples.transfer.demo`` runs the demo.
"""

from samples.transfer.workflows import *  # noqa: F403 - the sample's API is its workflows module's
from samples.transfer.workflows import __all__ as __all__
