"""The paper's survey application: workflows, an HTTP API, a load generator and a checker.

See ``README.md`` beside this file; ``python -m samples.survey --help`` lists the commands.
"""

from samples.survey.workflows import *  # noqa: F403 - the sample's API is its workflows module's
from samples.survey.workflows import __all__ as __all__
