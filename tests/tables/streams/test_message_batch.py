"""`MessageBatch`: its message view and its column view are the same rows."""

from __future__ import annotations

import pytest

from tables.streams.base import MessageBatch, StreamMessage


def test_a_batch_of_messages_derives_its_columns():
    messages = [StreamMessage(4, b"a", 10), StreamMessage(6, b"b", 11)]
    batch = MessageBatch(messages, 7, 4, False)
    assert (list(batch.offsets), list(batch.values), list(batch.timestamps)) == (
        [4, 6],
        [b"a", b"b"],
        [10, 11],
    )
    assert batch.messages is messages
    assert len(batch) == 2


def test_a_batch_of_columns_derives_its_messages_and_equals_the_same_messages():
    batch = MessageBatch.of_columns(range(3, 5), [b"x", b"y"], [1, 2], 5, 2, True)
    assert batch.messages == [StreamMessage(3, b"x", 1), StreamMessage(4, b"y", 2)]
    assert batch == MessageBatch(batch.messages, 5, 2, True)
    assert batch != MessageBatch(batch.messages, 5, 2, False)
    assert (len(batch), batch.next_offset, batch.first_available_offset, batch.data_loss) == (
        2,
        5,
        2,
        True,
    )
    empty = MessageBatch.of_columns([], [], [], 9, 9, False)
    assert (len(empty), empty.messages) == (0, [])


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="2 offsets, 1 values, 2 timestamps"):
        MessageBatch.of_columns([1, 2], [b"x"], [0, 0], 3, 1, False)
