"""A bucket that lies about itself, against the real `wheelwright publish` and a real S3 API (moto's server on
loopback): an object replaced by other bytes of the same size while its `sha256` metadata (or a manifest object)
still names the published file's hash. publish must compare by what the store computed itself, so a replaced page
is uploaded again, a replaced wheel stops the publish with one ERROR line before any page goes out, and no page is
ever left stating a hash its object does not have."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from scripts.bench.wheels import WheelSpec, make_wheel
from tests.index_checks import crawl
from tests.integration.conftest import S3Endpoint
from tests.integration.test_hostile import Run, assert_one_error, wheelwright

pytestmark = pytest.mark.timeout(180)
PREFIX = "idx"
PAGE = "simple/causal-conv1d/index.html"
FIRST = [WheelSpec(label=label) for label in ("pt214cu130", "pt213cu130")]
LATER = WheelSpec(label="pt212cu126")


@dataclass(frozen=True)
class Published:
    """A wheelhouse indexed for a fresh bucket and published to it once."""

    tmp: Path
    out: Path
    bucket: str
    endpoint: str

    @property
    def url(self) -> str:
        return f"{self.endpoint}/{self.bucket}/{PREFIX}"

    @property
    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def publish(self) -> Run:
        return wheelwright("publish", "--output", self.out, "--bucket", self.bucket, "--prefix", PREFIX,
                           "--endpoint-url", self.endpoint, "--region", "us-east-1", cwd=self.tmp, timeout=120)

    def index(self) -> None:
        assert wheelwright("index", "--output", self.out, "--base-url", self.url, cwd=self.tmp).code == 0

    def body(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=f"{PREFIX}/{key}")["Body"].read()

    def keys(self) -> set[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=f"{PREFIX}/")
        return {item["Key"].removeprefix(f"{PREFIX}/") for page in pages for item in page.get("Contents", ())}


@pytest.fixture
def published(tmp_path: Path, s3_endpoint: S3Endpoint) -> Published:
    out = tmp_path / "out"
    for spec in FIRST:
        make_wheel(out / "dist", spec)
    done = Published(tmp=tmp_path, out=out, bucket=s3_endpoint.new_bucket(), endpoint=s3_endpoint.url)
    done.index()
    assert done.publish().code == 0
    return done


def wheel_key(published: Published) -> str:
    (wheel,) = (published.out / "site").glob("whl/pt214cu130/*.whl")
    return wheel.relative_to(published.out / "site").as_posix()


# -- how the bucket is made to lie: each replaces the object's bytes with others of the same size ----------------------


def lying_metadata(published: Published, key: str) -> None:
    """Other bytes, and metadata naming the published file's sha256 (a plain upload: no SHA-256 checksum)."""
    real = (published.out / "site" / key).read_bytes()
    published.client.put_object(Bucket=published.bucket, Key=f"{PREFIX}/{key}", Body=real[::-1],
                                Metadata={"sha256": hashlib.sha256(real).hexdigest()})


def lying_metadata_with_a_checksum(published: Published, key: str) -> None:
    """As above, uploaded with a SHA-256 checksum: the store's checksum is of the bytes it holds."""
    real = (published.out / "site" / key).read_bytes()
    published.client.put_object(Bucket=published.bucket, Key=f"{PREFIX}/{key}", Body=real[::-1],
                                Metadata={"sha256": hashlib.sha256(real).hexdigest()}, ChecksumAlgorithm="SHA256")


def lying_metadata_in_parts(published: Published, key: str) -> None:
    """As above, uploaded in parts: its ETag is no MD5 and the store keeps no checksum, so only its bytes tell."""
    real = (published.out / "site" / key).read_bytes()
    client, name = published.client, f"{PREFIX}/{key}"
    upload = client.create_multipart_upload(Bucket=published.bucket, Key=name,
                                            Metadata={"sha256": hashlib.sha256(real).hexdigest()})
    part = client.upload_part(Bucket=published.bucket, Key=name, UploadId=upload["UploadId"], PartNumber=1,
                              Body=real[::-1])
    client.complete_multipart_upload(Bucket=published.bucket, Key=name, UploadId=upload["UploadId"],
                                     MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})


def lying_manifest(published: Published, key: str) -> None:
    """Other bytes, and a manifest object (as publish once kept) naming the published hash for their new ETag."""
    real = (published.out / "site" / key).read_bytes()
    client, name = published.client, f"{PREFIX}/{key}"
    etag = client.put_object(Bucket=published.bucket, Key=name, Body=real[::-1])["ETag"]
    manifest = {"objects": {name: [hashlib.sha256(real).hexdigest(), etag]}}
    client.put_object(Bucket=published.bucket, Key=f"{PREFIX}/.wheelwright/manifest.json",
                      Body=json.dumps(manifest).encode())


Liar = Callable[[Published, str], None]

PAGE_LIES: list[tuple[str, Liar]] = [
    ("metadata", lying_metadata),
    ("metadata-and-a-checksum-of-its-own-bytes", lying_metadata_with_a_checksum),
    ("metadata-uploaded-in-parts", lying_metadata_in_parts),
    ("manifest-object", lying_manifest),
]


@pytest.mark.parametrize("lie", [c[1] for c in PAGE_LIES], ids=[c[0] for c in PAGE_LIES])
def test_a_replaced_page_whose_bucket_lies_is_uploaded_again(published: Published, lie: Liar) -> None:
    lie(published, PAGE)
    assert published.body(PAGE) != (published.out / "site" / PAGE).read_bytes()
    run = published.publish()
    assert run.code == 0 and "Traceback" not in run.output, run.output
    assert published.body(PAGE) == (published.out / "site" / PAGE).read_bytes()
    assert crawl(published.url + "/").problems == []


WHEEL_LIES: list[tuple[str, Liar]] = [
    ("metadata", lying_metadata),
    ("metadata-and-a-checksum-of-its-own-bytes", lying_metadata_with_a_checksum),
    ("metadata-uploaded-in-parts", lying_metadata_in_parts),
    ("manifest-object", lying_manifest),
]


@pytest.mark.parametrize("lie", [c[1] for c in WHEEL_LIES], ids=[c[0] for c in WHEEL_LIES])
def test_a_replaced_wheel_whose_bucket_lies_stops_the_publish_before_any_page(published: Published, lie: Liar) -> None:
    key = wheel_key(published)
    lie(published, key)
    make_wheel(published.out / "dist", LATER)  # new pages to publish, which would state the wheel's hash again
    published.index()
    before = published.keys()
    run = published.publish()
    assert_one_error(run, 7, r"^ERROR refusing to overwrite 1 published file\(s\) with different bytes")
    assert key in run.output
    assert published.keys() == before  # not the new wheel, nor any page that would list it
    assert published.body(key) != (published.out / "site" / key).read_bytes()  # the store's bytes are left as found

