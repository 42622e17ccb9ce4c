"""Static files go over the wire compressed: the Plotly bundle (from its package, by a view) and,
after collectstatic, the console's own files (whitenoise's compressed variants)."""

from __future__ import annotations

import gzip

import pytest
from django.core.management import call_command
from django.urls import reverse

pytestmark = [pytest.mark.django_db]


def test_the_plotly_bundle_is_gzipped_for_clients_that_accept_it(client):
    url = reverse("console:plotly-js")
    plain = client.get(url)
    zipped = client.get(url, HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert plain.status_code == zipped.status_code == 200
    assert "Content-Encoding" not in plain
    assert zipped["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in zipped["Vary"] and "Accept-Encoding" in plain["Vary"]
    assert gzip.decompress(zipped.content) == plain.content
    assert len(plain.content) > 3_000_000
    assert len(zipped.content) < len(plain.content) / 2


def test_a_client_refusing_gzip_gets_it_plain(client):
    resp = client.get(reverse("console:plotly-js"), HTTP_ACCEPT_ENCODING="gzip;q=0, identity")
    assert "Content-Encoding" not in resp


def test_collectstatic_writes_compressed_variants(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", interactive=False, verbosity=0)
    css = tmp_path / "console" / "console.css"
    assert css.exists()
    assert gzip.decompress((tmp_path / "console" / "console.css.gz").read_bytes()) == (
        css.read_bytes()
    )
