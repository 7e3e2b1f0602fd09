"""One botocore data loader for every AWS session this process opens.

Why: each store and queue opens a session of its own (its credentials, region and event hooks
stay its own), and a new session parses botocore's service models and endpoint rules again:
about 0.3 s of CPU per store opened, most of what opening a DynamoDB store costs. Those files do
not change while the process runs, so every session shares one loader and the files it parsed.
The loader's search path is read once, from ``AWS_DATA_PATH`` as the process started.
"""

from __future__ import annotations

import threading
from typing import TypeVar

import botocore.loaders
import botocore.session

S = TypeVar("S", bound=botocore.session.Session)

LOADER = botocore.loaders.create_loader(botocore.session.get_session().get_config_variable("data_path"))
LOCK = threading.Lock()


def sharing_loader(session: S) -> S:
    """``session`` (botocore's, or aiobotocore's) reading service models through the shared loader."""
    session.register_component("data_loader", LOADER)
    return session


__all__ = ["LOADER", "LOCK", "sharing_loader"]
