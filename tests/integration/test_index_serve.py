"""`wheelwright serve` answers like the published bucket: directory URLs resolve to their index page with the
right content type and cache lifetime, and nothing hidden or unindexed is served."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import pytest

from tests.integration.conftest import PYTHON_TAG, ServedIndex


def _request(served_index: ServedIndex, path: str, method: str = "GET") -> http.client.HTTPResponse:
    address = urlsplit(served_index.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    connection.request(method, path)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


@pytest.mark.parametrize(
    ("path", "content_type", "cache_control"),
    [
        ("/", "text/html; charset=utf-8", "public, max-age=300"),
        ("/simple/causal-conv1d/", "text/html; charset=utf-8", "public, max-age=300"),
        ("/whl/pt214cu130/json/causal-conv1d/", "application/vnd.pypi.simple.v1+json", "public, max-age=300"),
        ("/json/", "application/vnd.pypi.simple.v1+json", "public, max-age=300"),
        ("/whl/pt213cu130.html", "text/html; charset=utf-8", "public, max-age=300"),
        (
            f"/whl/pt213cu130/causal_conv1d-1.7.0%2Bpt213cu130-{PYTHON_TAG}-{PYTHON_TAG}-linux_x86_64.whl",
            "application/octet-stream",
            "public, max-age=31536000, immutable",
        ),
        (
            f"/whl/pt213cu130/causal_conv1d-1.7.0%2Bpt213cu130-{PYTHON_TAG}-{PYTHON_TAG}-linux_x86_64.whl.metadata",
            "text/plain; charset=utf-8",
            "public, max-age=31536000, immutable",
        ),
    ],
)
def test_content_types_and_cache_lifetimes(
    served_index: ServedIndex, path: str, content_type: str, cache_control: str
) -> None:
    for method in ("GET", "HEAD"):
        response = _request(served_index, path, method)
        assert response.status == 200, (method, path)
        assert (response.getheader("Content-Type"), response.getheader("Cache-Control")) == (
            content_type,
            cache_control,
        )


def test_directory_without_slash_redirects(served_index: ServedIndex) -> None:
    response = _request(served_index, "/simple/causal-conv1d")
    assert (response.status, response.getheader("Location")) == (301, "/simple/causal-conv1d/")


@pytest.mark.parametrize(
    "path", ["/.wheelwright-site.json", "/whl/", "/whl/pt214cu130/", "/../ledger.sqlite", "/%2e%2e/ledger.sqlite"]
)
def test_hidden_unindexed_and_outside_paths_are_not_served(served_index: ServedIndex, path: str) -> None:
    assert _request(served_index, path).status == 404
