"""The test servers live in :mod:`idemflow.testing.servers` (public, reached through the
backend registries); the suites' older imports keep working from here."""

from idemflow.testing.servers import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    ROOT,
    Azurite,
    DynamoDBLocal,
    Moto,
    azurite_executable,
    azurite_server,
    dynamodb_local_folder,
    dynamodb_local_server,
    free_port,
    moto_server,
    stop_process,
    wait_for_port,
)

__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "ROOT",
    "Azurite",
    "DynamoDBLocal",
    "Moto",
    "azurite_executable",
    "azurite_server",
    "dynamodb_local_folder",
    "dynamodb_local_server",
    "free_port",
    "moto_server",
    "stop_process",
    "wait_for_port",
]
