"""The S3 object store behind publish (boto3): any S3 API endpoint, credentials from the usual AWS sources only.

Every upload asks the store for a SHA-256 checksum of what it received (it keeps it with the object), so publish
compares bytes by what the store computed, never by what an object's metadata says. Requests have connect and read
deadlines and a bounded number of attempts. Every failure becomes a PublishError naming the operation and key;
nothing here logs request headers, so credentials and signatures never reach a log."""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, NoCredentialsError, ReadTimeoutError

from builder.core.errors import PublishError
from builder.core.settings import deadline_scale
from index_site.publish import AlreadyExists, RemoteObject

log = logging.getLogger(__name__)

_PRECONDITION_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}

# Each request: docs/hostile-input.md ("Deadlines and caps") says why these numbers.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0  # the longest wait for the next byte of an answer (or for a send to progress)
ATTEMPTS = 4  # the first try and three retries, with the standard mode's backoff
_ENCRYPTED_ETAG = {"aws:kms", "aws:kms:dsse"}  # an object so encrypted has an ETag that is not its MD5


class S3Store:
    """One bucket of an S3 API endpoint (AWS, or any compatible server given by ``endpoint_url``)."""

    def __init__(
        self, bucket: str, *, endpoint_url: str | None = None, region: str | None = None, connections: int = 10
    ) -> None:
        if not bucket:
            raise PublishError("no bucket given", tip="pass --bucket or set WHEELWRIGHT_BUCKET")
        self.bucket = bucket
        _quiet_aws_logs()
        scale = deadline_scale()
        config = Config(
            connect_timeout=CONNECT_TIMEOUT_S * scale,
            read_timeout=READ_TIMEOUT_S * scale,
            retries={"total_max_attempts": ATTEMPTS, "mode": "standard"},
            max_pool_connections=connections,
        )
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
        """The object as the store describes it: its SHA-256 checksum and its ETag's MD5 where the store computed
        them (its user metadata is never read: anyone who could write the object wrote that too)."""
        try:
            with _errors("head", key):
                answer = self._client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except _Missing:
            return None
        etag = str(answer["ETag"])
        return RemoteObject(
            key=key, etag=etag, size=answer["ContentLength"], checksum_sha256=_checksum(answer), md5=_md5(etag, answer)
        )

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
            "Metadata": {"sha256": sha256},  # for people reading the bucket; publish compares by ChecksumSHA256
            "ChecksumAlgorithm": "SHA256",  # the SDK hashes what it sends, the store checks it and keeps it
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


def _checksum(answer: Mapping[str, object]) -> str | None:
    """The object's SHA-256 as hex, where the store holds one of the whole object (not a multipart composite)."""
    value = answer.get("ChecksumSHA256")
    if not isinstance(value, str) or answer.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT":
        return None
    try:
        digest = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return digest.hex() if len(digest) == 32 else None


def _md5(etag: str, answer: Mapping[str, object]) -> str | None:
    """The ETag as an MD5 of the bytes: only for a single-part upload not encrypted with KMS or a customer key."""
    value = etag.strip('"')
    if answer.get("ServerSideEncryption") in _ENCRYPTED_ETAG or answer.get("SSECustomerAlgorithm"):
        return None
    if len(value) != 32 or any(c not in "0123456789abcdef" for c in value.lower()):
        return None  # a multipart ETag ("...-N") or another store's own form
    return value.lower()


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
    except (ConnectTimeoutError, ReadTimeoutError) as error:
        which = "connect" if isinstance(error, ConnectTimeoutError) else "read"
        seconds = (CONNECT_TIMEOUT_S if which == "connect" else READ_TIMEOUT_S) * deadline_scale()
        raise PublishError(
            f"S3 {operation} {key}: {error} ({which} deadline {seconds:g} s, {ATTEMPTS} attempts)",
            tip="check --endpoint-url and the network; the store did not answer in time",
        ) from None
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
