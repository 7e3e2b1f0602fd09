"""Every AWS session the process opens parses botocore's models once, and keeps its own
credentials: the shared loader holds files, never who is calling."""

from __future__ import annotations

import pytest
from aiobotocore.session import get_session  # type: ignore[import-untyped]

from idemflow.stores._aws_sessions import sharing_loader
from idemflow.stores.dynamodb import boto3_session


def test_sessions_share_one_loader_whose_search_path_stays_as_long() -> None:
    first, second = boto3_session(), boto3_session()
    loader = first._session.get_component("data_loader")
    assert second._session.get_component("data_loader") is loader
    paths = list(loader.search_paths)
    for _ in range(5):
        boto3_session()
    assert loader.search_paths == paths
    assert len(set(paths)) == len(paths)
    assert sharing_loader(get_session()).get_component("data_loader") is loader  # the asyncio SDK's too


def test_each_session_reads_its_own_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")
    first = boto3_session()
    assert first.get_credentials().access_key == "first-key"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second-key")
    second = boto3_session()
    assert second.get_credentials().access_key == "second-key"
    assert first.get_credentials().access_key == "first-key"


def test_a_client_of_a_shared_session_knows_its_service() -> None:
    client = boto3_session().client("dynamodb", region_name="eu-west-1")
    assert client.meta.region_name == "eu-west-1"
    assert "TransactWriteItems" in client.meta.service_model.operation_names
