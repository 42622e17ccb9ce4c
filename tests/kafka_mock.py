"""librdkafka's built-in mock Kafka cluster, run in a small process of its own for tests.

`start_mock(brokers=3)` starts `python -m tests.kafka_mock`, which loads the librdkafka that
confluent-kafka bundles (ctypes), creates a mock cluster of `brokers` brokers on loopback ports
(`rd_kafka_mock_cluster_new`) and prints its bootstrap list (`rd_kafka_mock_cluster_bootstraps`).
Every process (servers, the controller, Spark executors) connects to that list as to a real
cluster: the mock speaks the Kafka protocol (metadata, produce, fetch, list offsets, idempotent
and transactional producers, consumer groups).

What the mock cannot do, and how this fixture makes up for it:

- no Admin API (CreateTopics, CreatePartitions, DeleteTopics, DeleteRecords time out or are
  refused): topics are created, deleted and trimmed through the mock's C API over this process's
  stdin (`KafkaMock.create_topic`, `delete_topic`, `delete_records`), and `MockTopicAdmin` is a
  `KafkaTopicAdmin` that does so;
- no partition-count growth at all (neither the Admin API nor the C API can add partitions);
- no retention by time or size worth using in a test (it only drops whole message sets past
  ~100k sets or a few MB per partition); `delete_records` moves the low watermark instead;
- transactions are accepted and their markers take offsets, but read_committed is not honoured:
  messages of an open transaction are returned and the high watermark is not the last stable
  offset.

`KafkaMock.stop()` closes the process's stdin; it destroys the cluster and exits.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import confluent_kafka

from tables.streams.base import TopicExists
from tables.streams.kafka import KafkaTopicAdmin

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 30.0


class MockError(RuntimeError):
    """The mock refused a command (the message carries librdkafka's error name)."""


class KafkaMock:
    """A running mock cluster (the client side of the process)."""

    def __init__(self, process: subprocess.Popen[str], bootstrap: str, log: Path) -> None:
        self.process = process
        self.bootstrap = bootstrap
        self.log = log
        self._lock = threading.Lock()

    def _call(self, **command: Any) -> dict[str, Any]:
        with self._lock:
            if self.process.poll() is not None or self.process.stdin is None:
                raise MockError(f"the mock cluster has exited (log: {self.log})")
            assert self.process.stdout is not None
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        if not line:
            raise MockError(f"the mock cluster exited during {command} (log: {self.log})")
        reply = json.loads(line)
        if reply.get("error"):
            raise MockError(f"{command['op']} {command.get('topic', '')}: {reply['error']}")
        return reply

    def create_topic(self, topic: str, partitions: int) -> None:
        self._call(op="create", topic=topic, partitions=partitions)

    def delete_topic(self, topic: str) -> None:
        self._call(op="delete", topic=topic)

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Remove every message below offset `before` (moves the low watermark there)."""
        self._call(op="delete_records", topic=topic, partition=partition, offset=before)

    def admin(self, **extra: str) -> MockTopicAdmin:
        return MockTopicAdmin(self, extra)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)
        if self.process.returncode == 0:
            self.log.unlink(missing_ok=True)  # kept when the mock failed: it says why


class MockTopicAdmin(KafkaTopicAdmin):
    """`KafkaTopicAdmin` whose topic management goes through the mock's C API."""

    def __init__(self, mock: KafkaMock, extra: dict[str, str] | None = None) -> None:
        super().__init__(mock.bootstrap, extra)
        self.mock = mock

    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise ValueError(f"a topic needs at least one partition, not {partitions}")
        if self.topic_exists(topic):
            raise TopicExists(f"topic {topic!r} already exists")
        self.mock.create_topic(topic, partitions)

    def add_partitions(self, topic: str, new_count: int) -> None:
        raise NotImplementedError("librdkafka's mock cluster cannot add partitions to a topic")

    def trim_before(self, topic: str, partition: int, offset: int) -> int:
        before = self.provider_watermarks(topic, partition)[0]
        if offset <= before:
            return 0
        self.mock.delete_records(topic, partition, offset)
        return offset - before

    def delete_topic(self, topic: str) -> bool:
        if not self.topic_exists(topic):
            return False
        self.mock.delete_topic(topic)
        return True


def start_mock(brokers: int = 3) -> KafkaMock:
    """Start the mock cluster process and wait for its bootstrap list."""
    log = Path(tempfile.mkstemp(prefix="kafka-mock-", suffix=".log")[1])
    with log.open("w") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.kafka_mock", str(brokers)],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            bufsize=1,
        )
    assert process.stdout is not None
    ready: list[str] = []
    reader = threading.Thread(target=lambda: ready.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    if not ready or not ready[0]:
        process.kill()
        process.wait()
        raise MockError(f"the mock cluster did not start: {log.read_text()[-2000:]}")
    return KafkaMock(process, json.loads(ready[0])["bootstrap"], log)


# --- the mock process ------------------------------------------------------------------------


def _library() -> ctypes.CDLL:
    libs = Path(confluent_kafka.__file__).parent.with_name("confluent_kafka.libs")
    lib = ctypes.CDLL(str(sorted(libs.glob("librdkafka*.so*"))[0]))
    ptr, text = ctypes.c_void_p, ctypes.c_char_p
    lib.rd_kafka_conf_new.restype = ptr
    lib.rd_kafka_conf_set.argtypes = [ptr, text, text, text, ctypes.c_size_t]
    lib.rd_kafka_new.restype = ptr
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ptr, text, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [ptr]
    lib.rd_kafka_mock_cluster_new.restype = ptr
    lib.rd_kafka_mock_cluster_new.argtypes = [ptr, ctypes.c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ptr]
    lib.rd_kafka_mock_cluster_bootstraps.restype = text
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ptr]
    lib.rd_kafka_mock_topic_create.argtypes = [ptr, text, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_topic_delete.argtypes = [ptr, text]
    lib.rd_kafka_mock_partition_delete_records.argtypes = [
        ptr,
        text,
        ctypes.c_int32,
        ctypes.c_int64,
    ]
    lib.rd_kafka_err2name.restype = text
    return lib


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _serve(brokers: int) -> None:
    lib = _library()
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, 512)
    handle = lib.rd_kafka_new(0, conf, errstr, 512)  # a producer handle: the cluster's owner
    if not handle:
        raise SystemExit(f"rd_kafka_new failed: {errstr.value.decode()}")
    cluster = lib.rd_kafka_mock_cluster_new(handle, brokers)
    replication = min(3, brokers)
    _reply({"bootstrap": lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()})
    for line in sys.stdin:  # until the test process closes our stdin (or dies)
        command = json.loads(line)
        topic = command.get("topic", "").encode()
        if command["op"] == "create":
            err = lib.rd_kafka_mock_topic_create(cluster, topic, command["partitions"], replication)
        elif command["op"] == "delete":
            err = lib.rd_kafka_mock_topic_delete(cluster, topic)
        elif command["op"] == "delete_records":
            err = lib.rd_kafka_mock_partition_delete_records(
                cluster, topic, command["partition"], command["offset"]
            )
        else:
            _reply({"error": f"unknown op {command['op']!r}"})
            continue
        reply = {"error": lib.rd_kafka_err2name(err).decode()} if err else {"ok": True}
        _reply(reply)
    lib.rd_kafka_mock_cluster_destroy(cluster)
    lib.rd_kafka_destroy(handle)


if __name__ == "__main__":
    _serve(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
