"""The SDK's table clients, with idemflow's entity group transaction in place of the SDK's.

``submit_transaction`` keeps its contract (the same operation tuples in, the same list of
``{"etag": …}`` out, :class:`~azure.data.tables.TableTransactionError` with ``error_code``
and ``index`` when the service refuses the batch), so the stores' logic and anything wrapping
the method see the SDK's behaviour; only the request is encoded and its answer parsed by
:mod:`idemflow.stores._azure_egt`, about 2 ms of CPU less per batch (see
``docs/decisions.md``). The request still goes through the client's own pipeline: the SDK's
signing (shared key, SAS, Microsoft Entra ID), its retry policy, hooks and transport.
Everything else the clients do is the SDK's own, and so is the batch on a Cosmos DB endpoint
(whose ``PATCH`` parts the SDK rewrites).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping
from typing import Any
from uuid import uuid4

from azure.core.pipeline import AsyncPipeline, Pipeline
from azure.core.pipeline.transport import HttpRequest
from azure.data.tables import TableClient, TableServiceClient, TableTransactionError, _base_client, _error
from azure.data.tables import aio as tables_aio
from azure.data.tables._table_batch import TransactionOperationType
from azure.data.tables.aio import _base_client_async

from idemflow.stores import _azure_egt as egt

# The SDK's own helpers (untyped): its transport sharing and its reading of a failed request.
_transport_wrapper: Any = _base_client.TransportWrapper
_async_transport_wrapper: Any = _base_client_async.AsyncTransportWrapper
_decode_error: Any = _error._decode_error
_too_large: Any = _error.RequestTooLargeError

Triple = tuple[str, Mapping[str, Any], Mapping[str, Any]]


class BatchTableClient(TableClient):
    """A blocking ``TableClient`` whose ``submit_transaction`` is idemflow's (see the module docstring)."""

    def submit_transaction(
        self, operations: Iterable[TransactionOperationType], **kwargs: Any
    ) -> list[Mapping[str, Any]]:
        if self._cosmos_endpoint:  # Cosmos DB's Table API wants PATCH rewritten: the SDK's own batch
            return super().submit_transaction(operations, **kwargs)
        triples = [_triple(operation) for operation in operations]
        if not triples:
            return []
        pipeline = self._client._client._pipeline
        response = pipeline.run(_batch(self, triples), stream=True, **kwargs).http_response
        return _answers(response, response.body(), len(triples))

    def write_entity(self, operation: TransactionOperationType) -> Mapping[str, Any]:
        """One ``submit_transaction`` operation sent alone: ``{"etag": …}``, or the exception
        ``create_entity`` / ``upsert_entity`` / ``update_entity`` raise (``ResourceExistsError``,
        ``ResourceNotFoundError``, ``ResourceModifiedError`` …)."""
        pipeline = self._client._client._pipeline
        response = pipeline.run(_single(self, _triple(operation)), stream=True).http_response
        response.body()  # read to the end: the connection goes back to the pool
        return _written(response)


class AsyncBatchTableClient(tables_aio.TableClient):
    """An asyncio ``TableClient`` whose ``submit_transaction`` is idemflow's (see the module docstring)."""

    async def submit_transaction(
        self,
        operations: Iterable[TransactionOperationType] | AsyncIterable[TransactionOperationType],
        **kwargs: Any,
    ) -> list[Mapping[str, Any]]:
        if self._cosmos_endpoint:  # as the blocking client
            return await super().submit_transaction(operations, **kwargs)
        if isinstance(operations, AsyncIterable):
            triples = [_triple(operation) async for operation in operations]
        else:
            triples = [_triple(operation) for operation in operations]
        if not triples:
            return []
        pipeline = self._client._client._pipeline
        response = (await pipeline.run(_batch(self, triples), stream=True, **kwargs)).http_response
        await response.load_body()
        return _answers(response, response.body(), len(triples))

    async def write_entity(self, operation: TransactionOperationType) -> Mapping[str, Any]:
        """The asyncio twin of :meth:`BatchTableClient.write_entity`."""
        pipeline = self._client._client._pipeline
        response = (await pipeline.run(_single(self, _triple(operation)), stream=True)).http_response
        await response.load_body()  # read to the end: the connection goes back to the pool
        return _written(response)


def table_client(service: TableServiceClient, table_name: str) -> BatchTableClient:
    """``service.get_table_client(table_name)``, as a :class:`BatchTableClient`: built as the SDK
    builds it (12.7), sharing the service client's transport and policies."""
    pipeline = Pipeline(
        transport=_transport_wrapper(service._client._client._pipeline._transport),
        policies=service._policies,
    )
    return BatchTableClient(service.url, **_shared(service, table_name, pipeline))


def async_table_client(service: tables_aio.TableServiceClient, table_name: str) -> AsyncBatchTableClient:
    """The asyncio twin of :func:`table_client`."""
    pipeline = AsyncPipeline(
        transport=_async_transport_wrapper(service._client._client._pipeline._transport),
        policies=service._policies,
    )
    return AsyncBatchTableClient(service.url, **_shared(service, table_name, pipeline))


def _shared(service: Any, table_name: str, pipeline: Any) -> dict[str, Any]:
    """What a table client takes from its service client, blocking or asyncio alike."""
    return {
        "table_name": table_name,
        "credential": service.credential,
        "api_version": service.api_version,
        "pipeline": pipeline,
        "location_mode": service._location_mode,
        "_hosts": service._hosts,
    }


def _triple(operation: TransactionOperationType) -> Triple:
    """``(kind, entity, options)``, options ``{}`` when the tuple has none."""
    kind, entity = str(operation[0]), operation[1]
    options: Mapping[str, Any] = operation[2] if len(operation) == 3 else {}
    return kind, entity, options


def _batch(client: TableClient | tables_aio.TableClient, triples: list[Triple]) -> HttpRequest:
    """The ``POST $batch`` of ``triples`` to the client's table, at the URL the SDK uses."""
    encoded = egt.encode(
        f"{client.scheme}://{client._primary_hostname}",
        client.table_name,
        triples,
        version=client.api_version,
        batch_id=str(uuid4()),
        changeset_id=str(uuid4()),
    )
    return _http(encoded)


def _single(client: TableClient | tables_aio.TableClient, triple: Triple) -> HttpRequest:
    """The request of one operation sent alone, at the URL the SDK uses for it."""
    endpoint = f"{client.scheme}://{client._primary_hostname}"
    return _http(egt.single(endpoint, client.table_name, triple, version=client.api_version))


def _http(encoded: egt.Request) -> HttpRequest:
    """The pipeline's request for ``encoded``: azure-core's transport-level ``HttpRequest``, which
    its pipeline and transports take as they take the ``azure.core.rest`` one (about 60 µs of
    CPU less per call: no attribute shims between the two APIs)."""
    request = HttpRequest(encoded.method, encoded.url, headers=encoded.headers)
    if encoded.body is not None:
        request.set_bytes_body(encoded.body)
    return request


def _written(response: Any) -> Mapping[str, Any]:
    """A single write's metadata, or the SDK's exception for its error answer."""
    if not 200 <= response.status_code < 300:
        raise _decode_error(response)
    etag = response.headers.get("ETag")
    return {} if etag is None else {"etag": etag}


def _answers(response: Any, body: bytes, count: int) -> list[Mapping[str, Any]]:
    """Each operation's metadata, or the SDK's exception for the answer (the rare whole-request
    failures are decoded by the SDK's own ``_decode_error``)."""
    if response.status_code == 413:
        raise _decode_error(response, "The transaction request was too large", _too_large)
    if response.status_code != 202:
        raise _decode_error(response)
    found = egt.outcome(egt.parse(response.headers.get("Content-Type", ""), body), count)
    if isinstance(found, egt.Failure):
        if found.status == 413:
            raise _decode_error(response, "The transaction request was too large", _too_large)
        raise transaction_error(found)
    return [{} if etag is None else {"etag": etag} for etag in found]


def transaction_error(failure: egt.Failure) -> TableTransactionError:
    """The SDK's exception for a refused batch: ``index`` (read from the message, as the SDK
    reads it), ``error_code`` and ``status_code`` of the failing operation."""
    error: Any = TableTransactionError(
        message=f"{failure.message}\nErrorCode:{failure.code}", index=failure.index
    )
    error.status_code = failure.status
    try:
        error.error_code = _error.TableErrorCode(failure.code)
    except ValueError:
        error.error_code = failure.code
    error.additional_info = {}
    made: TableTransactionError = error
    return made
