"""The object store the farm's shared device-step cache speaks to (sharedcache.py): the few calls it makes, what a
listing holds and the one error a failed call raises. S3Bucket (s3bucket.py) is the real one, a fake the unit tests'."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class BucketError(Exception):
    """A bucket call failed (the network, the credentials, the server): the build goes on without the cache."""


@dataclass(frozen=True, kw_only=True)
class StoredObject:
    key: str
    size: int
    modified: float  # seconds since the epoch; a touch moves it (least recently used goes first)


class Bucket(Protocol):
    """The few object-store calls the shared cache makes (S3Bucket; a fake in unit tests)."""

    def list(self, prefix: str) -> list[StoredObject]: ...

    def get(self, key: str) -> bytes | None: ...

    def put_new(self, key: str, data: bytes) -> bool:
        """Write ``key`` only if absent; False when it already was."""
        ...

    def touch(self, key: str) -> None: ...

    def delete(self, key: str) -> None: ...
