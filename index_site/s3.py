"""The S3 object store behind publish (boto3): any S3 API endpoint, credentials from the usual AWS sources only.

Every failure becomes a PublishError naming the operation and key; nothing here logs request headers, so
credentials and signatures never reach a log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from builder.core.errors import PublishError
from index_site.publish import AlreadyExists, RemoteObject

log = logging.getLogger(__name__)

_PRECONDITION_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}


class S3Store:
    """One bucket of an S3 API endpoint (AWS, or any compatible server given by ``endpoint_url``)."""

    def __init__(
        self, bucket: str, *, endpoint_url: str | None = None, region: str | None = None, connections: int = 10
    ) -> None:
        if not bucket:
            raise PublishError("no bucket given", tip="pass --bucket or set WHEELWRIGHT_BUCKET")
        self.bucket = bucket
        _quiet_aws_logs()
        config = Config(retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=connections)
        self._client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url, region_name=region, config=config
        )

    def list(self, prefix: str) -> dict[str, RemoteObject]:
        objects = {}
        with _errors("list", prefix or "/"):
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", ()):
                    objects[item["Key"]] = RemoteObject(key=item["Key"], etag=item["ETag"], size=item["Size"])
        return objects

    def head(self, key: str) -> RemoteObject | None:
        try:
            with _errors("head", key):
                answer = self._client.head_object(Bucket=self.bucket, Key=key)
        except _Missing:
            return None
        sha256 = answer.get("Metadata", {}).get("sha256")
        return RemoteObject(key=key, etag=answer["ETag"], size=answer["ContentLength"], sha256=sha256)

    def get(self, key: str) -> bytes | None:
        try:
            with _errors("get", key):
                body: bytes = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
                return body
        except _Missing:
            return None

    def put(
        self,
        key: str,
        body: bytes | Path,
        *,
        content_type: str,
        cache_control: str,
        sha256: str,
        create_only: bool = False,
    ) -> str:
        arguments = {
            "Bucket": self.bucket,
            "Key": key,
            "ContentType": content_type,
            "CacheControl": cache_control,
            "Metadata": {"sha256": sha256},
        }
        if create_only:
            arguments["IfNoneMatch"] = "*"
        with _errors("put", key):
            if isinstance(body, Path):
                with body.open("rb") as stream:
                    answer = self._client.put_object(Body=stream, **arguments)
            else:
                answer = self._client.put_object(Body=body, **arguments)
        log.debug("put %s (%s)", key, content_type)
        return str(answer["ETag"])

    def delete(self, key: str) -> None:
        with _errors("delete", key):
            self._client.delete_object(Bucket=self.bucket, Key=key)


def _quiet_aws_logs() -> None:
    """botocore's debug log prints request headers (signature, access key id): keep it quiet even under --debug."""
    for name in ("botocore", "boto3", "s3transfer", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)


class _Missing(Exception):
    pass


@contextmanager
def _errors(operation: str, key: str) -> Iterator[None]:
    try:
        yield
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = str(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        if operation == "put" and (code in _PRECONDITION_CODES or status in ("409", "412")):
            raise AlreadyExists(key) from None
        if operation in ("head", "get") and (code in _MISSING_CODES or status == "404"):
            raise _Missing(key) from None
        message = error.response.get("Error", {}).get("Message", "")
        raise PublishError(f"S3 {operation} {key}: {code} {message}".rstrip(), tip=_tip(code)) from None
    except NoCredentialsError:
        raise PublishError(
            "no AWS credentials found", tip="set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ) from None
    except BotoCoreError as error:
        raise PublishError(f"S3 {operation} {key}: {error}", tip="check --endpoint-url and the network") from None


def _tip(code: str) -> str | None:
    if code == "NoSuchBucket":
        return "check --bucket (the bucket must exist; publish does not create it)"
    if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return "check the AWS credentials and that they may write to this bucket"
    return None
