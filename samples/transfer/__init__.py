"""The bank transfer of the paper: workflows, an HTTP API and command line, two crash demos.

See ``README.md`` beside this file: ``python -m samples.transfer serve|load|check|demo``;
``python -m samples.transfer.demo`` kills worker processes calling ``run`` directly.
"""

from samples.transfer.workflows import *  # noqa: F403 - the sample's API is its workflows module's
from samples.transfer.workflows import __all__ as __all__
