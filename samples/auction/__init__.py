"""The paper's auction application: workflows, an HTTP API, a load generator and a checker.

See ``README.md`` beside this file; ``python -m samples.auction --help`` lists the commands.
"""

from samples.auction.workflows import *  # noqa: F403 - the sample's API is its workflows module's
from samples.auction.workflows import __all__ as __all__
