"""The shared object cache's bucket on an S3 API (boto3): list, get, create-only put, touch, delete. Credentials come
from the usual AWS sources only; botocore's request log (which carries signatures) stays quiet."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from builder.steps.bucket import BucketError, StoredObject

Stored = list[StoredObject]  # `list` is a method name below

_EXISTS = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_MISSING = {"NoSuchKey", "NotFound", "404"}


class S3Bucket:
    def __init__(self, bucket: str, *, endpoint_url: str | None = None) -> None:
        self.bucket = bucket
        for name in ("botocore", "boto3", "s3transfer", "urllib3"):
            logging.getLogger(name).setLevel(logging.WARNING)
        config = Config(retries={"max_attempts": 5, "mode": "standard"})
        self._client = boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)

    def list(self, prefix: str) -> Stored:
        with _failures("list", prefix):
            return self._list(prefix)

    def _list(self, prefix: str) -> Stored:
        found = []
        for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", ()):
                found.append(StoredObject(key=item["Key"], size=item["Size"],
                                          modified=item["LastModified"].timestamp()))
        return found

    def get(self, key: str) -> bytes | None:
        try:
            with _failures("get", key, passing=_MISSING):
                body: bytes = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except _Passed:
            return None
        return body

    def put_new(self, key: str, data: bytes) -> bool:
        try:
            with _failures("put", key, passing=_EXISTS):
                self._client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except _Passed:
            return False
        return True

    def touch(self, key: str) -> None:
        """Copy the object onto itself: its LastModified becomes now (recently used: evicted last)."""
        with _failures("touch", key):
            self._client.copy_object(Bucket=self.bucket, Key=key, CopySource={"Bucket": self.bucket, "Key": key},
                                     MetadataDirective="REPLACE", Metadata={"touched": "1"})

    def delete(self, key: str) -> None:
        with _failures("delete", key):
            self._client.delete_object(Bucket=self.bucket, Key=key)


class _Passed(Exception):
    """An expected answer (absent, already there), not a failure."""


@contextmanager
def _failures(operation: str, key: str, passing: frozenset[str] | set[str] = frozenset()) -> Iterator[None]:
    try:
        yield
    except ClientError as error:
        if _code(error) in passing:
            raise _Passed(key) from None
        raise BucketError(f"S3 {operation} {key}: {_code(error)}") from None
    except BotoCoreError as error:
        raise BucketError(f"S3 {operation} {key}: {error}") from None


def _code(error: ClientError) -> str:
    answer = error.response
    code = str(answer.get("Error", {}).get("Code", ""))
    status = str(answer.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return code if code in _EXISTS | _MISSING else status
