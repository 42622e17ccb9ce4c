"""Fixtures of the stream plugin tests.

- `kafka_mock`: librdkafka's mock Kafka cluster in a process of its own, for the whole session
  (`tests.kafka_mock`); `kafka_admin`: a `MockTopicAdmin` on it (topics via the mock's C API).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka_mock import KafkaMock, MockTopicAdmin, start_mock


@pytest.fixture(scope="session")
def kafka_mock() -> Iterator[KafkaMock]:
    mock = start_mock(brokers=3)
    try:
        yield mock
    finally:
        mock.stop()


@pytest.fixture
def kafka_admin(kafka_mock: KafkaMock) -> Iterator[MockTopicAdmin]:
    admin = kafka_mock.admin()
    try:
        yield admin
    finally:
        admin.close()
