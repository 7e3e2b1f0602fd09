# ruff: noqa: E501  (recorded bytes, one line of the wire each)
"""Entity group transaction bodies recorded from Azurite 3.35 (``tests/stores/test_azure_egt.py``).

REQUEST is what idemflow's encoder sent for COMMITTED's batch (boundary ids fixed); each
answer is ``(Content-Type, body)`` of Azurite's ``202`` to the batch described above it.
"""

from __future__ import annotations

ETAG = "W/\"datetime'2026-11-27T12%3A21%3A23.1344992Z'\""

REQUEST = b"".join(
    (
        b"--batch_b1\r\n",
        b"Content-Type: multipart/mixed; boundary=changeset_c1\r\n",
        b"\r\n",
        b"--changeset_c1\r\n",
        b"Content-Type: application/http\r\n",
        b"Content-Transfer-Encoding: binary\r\n",
        b"Content-ID: 0\r\n",
        b"\r\n",
        b"POST http://127.0.0.1:10002/devstoreaccount1/rec HTTP/1.1\r\n",
        b"Content-Type: application/json\r\n",
        b"Content-Length: 158\r\n",
        b"x-ms-version: 2019-02-02\r\n",
        b"DataServiceVersion: 3.0\r\n",
        b"Accept: application/json;odata=minimalmetadata\r\n",
        b"Prefer: return-no-content\r\n",
        b"\r\n",
        b'{"PartitionKey": "p", "RowKey": "a\'b \\u00e9", "v0": "AGhp", "v0@odata.type": "Edm.Binary", "vn": 1, "expires_at": 12.5, "expires_at@odata.type": "Edm.Double"}\r\n',
        b"--changeset_c1\r\n",
        b"Content-Type: application/http\r\n",
        b"Content-Transfer-Encoding: binary\r\n",
        b"Content-ID: 1\r\n",
        b"\r\n",
        b"PUT http://127.0.0.1:10002/devstoreaccount1/rec(PartitionKey='p',RowKey='u') HTTP/1.1\r\n",
        b"Content-Type: application/json\r\n",
        b"Content-Length: 50\r\n",
        b"x-ms-version: 2019-02-02\r\n",
        b"DataServiceVersion: 3.0\r\n",
        b"Accept: application/json\r\n",
        b"\r\n",
        b'{"PartitionKey": "p", "RowKey": "u", "tomb": true}\r\n',
        b"--changeset_c1\r\n",
        b"Content-Type: application/http\r\n",
        b"Content-Transfer-Encoding: binary\r\n",
        b"Content-ID: 2\r\n",
        b"\r\n",
        b"DELETE http://127.0.0.1:10002/devstoreaccount1/rec(PartitionKey='p',RowKey='c') HTTP/1.1\r\n",
        b"x-ms-version: 2019-02-02\r\n",
        b"DataServiceVersion: 3.0\r\n",
        b"Accept: application/json;odata=minimalmetadata\r\n",
        b"If-Match: W/\"datetime'2026-11-27T12%3A21%3A23.1344992Z'\"\r\n",
        b"\r\n",
        b"\r\n",
        b"--changeset_c1--\r\n",
        b"\r\n",
        b"--batch_b1--\r\n",
    )
)

# create (a'b é, binary, double) + upsert REPLACE + delete If-Match: three 204s, the delete's without an ETag
COMMITTED = (
    "multipart/mixed; boundary=batchresponse_e7579d8c-264a-4ff3-9f7c-7ba42f1c7c2a",
    b"".join(
        (
            b"--batchresponse_e7579d8c-264a-4ff3-9f7c-7ba42f1c7c2a\r\n",
            b"Content-Type: multipart/mixed; boundary=changesetresponse_89a07a3b-fccb-4d8a-bdd5-6a9711fe6eda\r\n",
            b"\r\n",
            b"--changesetresponse_89a07a3b-fccb-4d8a-bdd5-6a9711fe6eda\r\n",
            b"Content-Type: application/http\r\n",
            b"Content-Transfer-Encoding: binary\r\n",
            b"\r\n",
            b"HTTP/1.1 204 No Content\r\n",
            b"X-Content-Type-Options: nosniff\r\n",
            b"Cache-Control: no-cache\r\n",
            b"DataServiceVersion: 3.0;\r\n",
            b"Location: http://127.0.0.1:52779/devstoreaccount1/rec(PartitionKey='p',RowKey='a'b%20%C3%A9')\r\n",
            b"DataServiceId: http://127.0.0.1:52779/devstoreaccount1/rec(PartitionKey='p',RowKey='a'b%20%C3%A9')\r\n",
            b"ETag: W/\"datetime'2026-11-27T12%3A21%3A23.1575149Z'\"\r\n",
            b"\r\n",
            b"\r\n",
            b"--changesetresponse_89a07a3b-fccb-4d8a-bdd5-6a9711fe6eda\r\n",
            b"Content-Type: application/http\r\n",
            b"Content-Transfer-Encoding: binary\r\n",
            b"\r\n",
            b"HTTP/1.1 204 No Content\r\n",
            b"X-Content-Type-Options: nosniff\r\n",
            b"Cache-Control: no-cache\r\n",
            b"DataServiceVersion: 3.0;\r\n",
            b"ETag: W/\"datetime'2026-11-27T12%3A21%3A23.1575159Z'\"\r\n",
            b"\r\n",
            b"\r\n",
            b"--changesetresponse_89a07a3b-fccb-4d8a-bdd5-6a9711fe6eda\r\n",
            b"Content-Type: application/http\r\n",
            b"Content-Transfer-Encoding: binary\r\n",
            b"\r\n",
            b"HTTP/1.1 204 No Content\r\n",
            b"X-Content-Type-Options: nosniff\r\n",
            b"Cache-Control: no-cache\r\n",
            b"DataServiceVersion: 1.0;\r\n",
            b"\r\n",
            b"\r\n",
            b"--changesetresponse_89a07a3b-fccb-4d8a-bdd5-6a9711fe6eda--\r\n",
            b"--batchresponse_e7579d8c-264a-4ff3-9f7c-7ba42f1c7c2a--\r\n",
        )
    ),
)

# upsert + create of an existing row: 409 EntityAlreadyExists, message index 1
ENTITY_EXISTS_AT_1 = (
    "multipart/mixed; boundary=batchresponse_f84cdd07-2079-4c34-b65b-1defa2dd164a",
    b"".join(
        (
            b"--batchresponse_f84cdd07-2079-4c34-b65b-1defa2dd164a\r\n",
            b"Content-Type: multipart/mixed; boundary=changesetresponse_62b76761-422a-4665-a264-e79ff7ab8783\r\n",
            b"\r\n",
            b"--changesetresponse_62b76761-422a-4665-a264-e79ff7ab8783\r\n",
            b"Content-Type: application/http\r\n",
            b"Content-Transfer-Encoding: binary\r\n",
            b"\r\n",
            b"HTTP/1.1 409 Conflict\r\n",
            b"Content-ID: 2\r\n",
            b"DataServiceVersion: 3.0;\r\n",
            b"Content-Type: application/json;odata=minimalmetadata;charset=utf-8\r\n",
            b"\r\n",
            b'{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"1:The specified entity already exists.\\nRequestId:20ba7347-af05-4f32-8e7c-44fd74e3719c\\nTime:2026-11-27T12:21:23.170Z"}}}\r\n',
            b"--changesetresponse_62b76761-422a-4665-a264-e79ff7ab8783--\r\n",
            b"--batchresponse_f84cdd07-2079-4c34-b65b-1defa2dd164a--\r\n",
        )
    ),
)

# upsert + upsert + MERGE If-Match a stale ETag: 412 UpdateConditionNotSatisfied, message index 2
CONDITION_FAILED_AT_2 = (
    "multipart/mixed; boundary=batchresponse_3dce2529-ed71-46ff-8906-aad8c26d016b",
    b"".join(
        (
            b"--batchresponse_3dce2529-ed71-46ff-8906-aad8c26d016b\r\n",
            b"Content-Type: multipart/mixed; boundary=changesetresponse_0a560870-9c25-4f29-a4e8-7b346caa1379\r\n",
            b"\r\n",
            b"--changesetresponse_0a560870-9c25-4f29-a4e8-7b346caa1379\r\n",
            b"Content-Type: application/http\r\n",
            b"Content-Transfer-Encoding: binary\r\n",
            b"\r\n",
            b"HTTP/1.1 412 Precondition Failed\r\n",
            b"Content-ID: 3\r\n",
            b"DataServiceVersion: 3.0;\r\n",
            b"Content-Type: application/json;odata=minimalmetadata;charset=utf-8\r\n",
            b"\r\n",
            b'{"odata.error":{"code":"UpdateConditionNotSatisfied","message":{"lang":"en-US","value":"2:The update condition specified in the request was not satisfied.\\nRequestId:5582ccfe-28c1-423e-a27e-f26d86e6ce01\\nTime:2026-11-27T12:21:23.178Z"}}}\r\n',
            b"--changesetresponse_0a560870-9c25-4f29-a4e8-7b346caa1379--\r\n",
            b"--batchresponse_3dce2529-ed71-46ff-8906-aad8c26d016b--\r\n",
        )
    ),
)

# delete of a row that does not exist: 404 ResourceNotFound, index 0
NOT_FOUND_AT_0 = (
    "multipart/mixed; boundary=batchresponse_8791ab0e-aafc-4bf9-a0cd-e7003d5be031",
    b"".join(
        (
            b"--batchresponse_8791ab0e-aafc-4bf9-a0cd-e7003d5be031\r\n",
            b"Content-Type: multipart/mixed; boundary=changesetresponse_3893083e-9335-4e34-95ed-29632957c019\r\n",
            b"\r\n",
            b"--changesetresponse_3893083e-9335-4e34-95ed-29632957c019\r\n",
            b"Content-Type: application/http\r\n",
            b"Content-Transfer-Encoding: binary\r\n",
            b"\r\n",
            b"HTTP/1.1 404 Not Found\r\n",
            b"Content-ID: 1\r\n",
            b"DataServiceVersion: 3.0;\r\n",
            b"Content-Type: application/json;odata=minimalmetadata;charset=utf-8\r\n",
            b"\r\n",
            b'{"odata.error":{"code":"ResourceNotFound","message":{"lang":"en-US","value":"0:The specified resource does not exist.\\nRequestId:1161de92-d562-4c17-964c-28196f6b4ead\\nTime:2026-11-27T12:21:23.184Z"}}}\r\n',
            b"--changesetresponse_3893083e-9335-4e34-95ed-29632957c019--\r\n",
            b"--batchresponse_8791ab0e-aafc-4bf9-a0cd-e7003d5be031--\r\n",
        )
    ),
)

# create in a table that does not exist: 404 TableNotFound
TABLE_NOT_FOUND = (
    "multipart/mixed; boundary=batchresponse_2f4ef4ae-f832-4b28-ad5b-3b80813f3a7f",
    b"".join(
        (
            b"--batchresponse_2f4ef4ae-f832-4b28-ad5b-3b80813f3a7f\r\n",
            b"Content-Type: multipart/mixed; boundary=changesetresponse_daaf7c16-8339-4554-91f8-211c9de29f72\r\n",
            b"\r\n",
            b"--changesetresponse_daaf7c16-8339-4554-91f8-211c9de29f72\r\n",
            b"Content-Type: application/http\r\n",
            b"Content-Transfer-Encoding: binary\r\n",
            b"\r\n",
            b"HTTP/1.1 404 Not Found\r\n",
            b"Content-ID: 1\r\n",
            b"DataServiceVersion: 3.0;\r\n",
            b"Content-Type: application/json;odata=minimalmetadata;charset=utf-8\r\n",
            b"\r\n",
            b'{"odata.error":{"code":"TableNotFound","message":{"lang":"en-US","value":"0:The table specified does not exist.\\nRequestId:4e65762f-fff2-49a3-9aff-d7de61c5bc61\\nTime:2026-11-27T12:21:23.187Z"}}}\r\n',
            b"--changesetresponse_daaf7c16-8339-4554-91f8-211c9de29f72--\r\n",
            b"--batchresponse_2f4ef4ae-f832-4b28-ad5b-3b80813f3a7f--\r\n",
        )
    ),
)
