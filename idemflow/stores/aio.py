"""Deprecated path (removed in 1.1) of the module named below: import from there."""

from idemflow.stores._moved import moved

__getattr__ = moved(__name__, "idemflow.stores.async_adapters")
