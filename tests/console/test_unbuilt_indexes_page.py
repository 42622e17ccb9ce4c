"""The table page says which declared indexes the build does not produce, and why (mirror rows
only, as every page test)."""

from __future__ import annotations

import pytest

from tests.console import mirror_factory as mf

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client, django_user_model):
    user = django_user_model.objects.create_user("ivy", password="a-long-test-password")
    client.force_login(user)
    return client


def test_the_table_page_lists_the_indexes_not_built(viewer):
    mf.mirror_state()
    config = {
        "tableName": "events_REALTIME",
        "tableType": "REALTIME",
        "tableIndexConfig": {"invertedIndexColumns": ["country"]},
        "fieldConfigList": [{"name": "body", "indexes": {"text": {}}}],
    }
    mf.table("events", config=config)
    html = viewer.get("/ui/tables/events_REALTIME/").content.decode()
    assert "Indexes not built" in html
    assert '<li data-index="inverted"><strong>inverted</strong> on <code>country</code>' in html
    assert '<li data-index="text"><strong>text</strong> on <code>body</code>' in html
    assert html.count("not built by this build: no query engine here") == 2


def test_a_table_without_indexes_has_no_such_section(viewer):
    mf.mirror_state()
    mf.table("plain")
    html = viewer.get("/ui/tables/plain_REALTIME/").content.decode()
    assert "Indexes not built" not in html
