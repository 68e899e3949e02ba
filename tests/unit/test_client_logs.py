"""The log filter of the client libraries (adapters/client_logs.py): a repeated failure passes
once per kind, then a summary at most every period, then one line when its cluster is reachable
again; other records pass as they are. And every librdkafka client gets the logger."""

from __future__ import annotations

import logging
import threading

import pytest

from groupwarden.adapters import client_logs
from groupwarden.adapters.client_config import confluent_config
from groupwarden.adapters.client_logs import LIBRDKAFKA_LOGGER, REPEATED, RepeatedFailures
from groupwarden.adapters.spark_kafka import spark_kafka_options
from groupwarden.connectivity.settings import settings_from_properties

pytestmark = pytest.mark.unit

BROKER = "127.0.0.1:16112"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(
    name: str, msg: str, *args: object, level: int = logging.ERROR, **extra: object
) -> logging.LogRecord:
    made = logging.LogRecord(name, level, __file__, 1, msg, args, None)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def refused(ms: int = 0, suppressed: int = 0, client: int = 1) -> logging.LogRecord:
    text = f"[thrd:{BROKER}/bootstrap]: {BROKER}/bootstrap: Connect to ipv4#{BROKER} failed: "
    text += f"Connection refused (after {ms}ms in state CONNECT"
    text += f", {suppressed} identical error(s) suppressed)" if suppressed else ")"
    return record(LIBRDKAFKA_LOGGER, "%s [%s] %s", "FAIL", f"rdkafka#producer-{client}", text)


@pytest.fixture
def throttle() -> tuple[RepeatedFailures, Clock]:
    clock = Clock()
    return RepeatedFailures(summary_every=60, recovered_after=12, clock=clock, wall=lambda: 0.0), clock


def test_a_repeated_librdkafka_failure_passes_once_then_a_summary_per_period(
    throttle: tuple[RepeatedFailures, Clock],
) -> None:
    filt, clock = throttle
    assert filt.filter(refused())
    # The same failure of other clients, other timings: the same kind.
    assert [filt.filter(refused(ms, s, c)) for ms, s, c in [(1, 0, 2), (0, 5, 3), (3, 0, 1)]] == [False] * 3
    clock.now += 61
    summary = refused(2)
    assert filt.filter(summary)
    assert summary.getMessage().endswith("(and 3 more like it in the last 1m 1s)")
    assert not filt.filter(refused())


def test_the_first_error_of_another_kind_or_broker_passes(throttle: tuple[RepeatedFailures, Clock]) -> None:
    filt, _ = throttle
    assert filt.filter(record("kafka.net.connection", "Connection failed: %s", "KafkaConnectionError: 111"))
    assert not filt.filter(
        record("kafka.net.connection", "Connection failed: %s", "KafkaConnectionError: 111")
    )
    assert filt.filter(record("kafka.net.manager", "Bootstrap failed: %s", "KafkaTimeoutError"))
    assert filt.filter(refused())
    other = refused()
    other.args = ("FAIL", "rdkafka#producer-1", other.args[2].replace(BROKER, "127.0.0.1:9999"))  # type: ignore[index]
    assert filt.filter(other)


def test_records_of_other_loggers_and_debug_records_are_never_held(
    throttle: tuple[RepeatedFailures, Clock],
) -> None:
    filt, _ = throttle
    for _ in range(3):
        assert filt.filter(record("groupwarden.controller.reconcile", "policy p: KafkaUnavailable"))
        assert filt.filter(record("kafka.net.connection", "Connection failed", level=logging.DEBUG))


def test_our_own_marked_retry_lines_are_held_like_the_libraries(
    throttle: tuple[RepeatedFailures, Clock],
) -> None:
    filt, _ = throttle
    line = "Kafka %s: %s failed (%s): retrying for up to %.0fs"
    first = record(
        "groupwarden.adapters.kafka_admin_session",
        line,
        BROKER,
        "ListGroups",
        "X",
        9.7,
        level=logging.INFO,
        **REPEATED,
    )
    assert filt.filter(first)
    again = record(
        "groupwarden.adapters.kafka_admin_session",
        line,
        BROKER,
        "ListGroups",
        "X",
        3.1,
        level=logging.INFO,
        **REPEATED,
    )
    assert not filt.filter(again)


def test_an_answer_ends_the_quiet_kinds_of_that_cluster_with_one_line(
    throttle: tuple[RepeatedFailures, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    filt, clock = throttle
    assert filt.filter(refused())
    assert not filt.filter(refused())
    assert filt.filter(record("kafka.x", "Connection lost to 10.0.0.9:9092"))  # another cluster
    filt.reachable(BROKER, [BROKER])  # still failing a moment ago: nothing ends yet
    assert not filt.filter(refused())
    clock.now += 13
    with caplog.at_level(logging.INFO, logger=client_logs.log.name):
        filt.reachable(BROKER, [BROKER])
    [line] = [r.getMessage() for r in caplog.records]
    assert f"Kafka {BROKER} reachable again (recovered): 1 kinds" in line and "2 repeats not logged" in line
    assert filt.failing  # the other cluster's kind is still counted
    assert filt.filter(refused())  # a new failure is logged again
    clock.now += 13
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=client_logs.log.name):
        filt.reachable(BROKER, [BROKER])  # a kind seen once ends without a line
    assert caplog.records == []


def test_a_broker_still_down_while_the_others_answer_stays_one_kind(
    throttle: tuple[RepeatedFailures, Clock],
) -> None:
    filt, clock = throttle
    down = "<KafkaTCPTransport [127.0.0.1:12344<-38562]>: socket disconnected"
    assert filt.filter(record("kafka.net.transport", down))
    for _ in range(20):  # one retry a second, the other brokers answering in between
        clock.now += 1
        filt.reachable("127.0.0.1:12296,127.0.0.1:12320,127.0.0.1:12344", ["127.0.0.1:12344"])
        assert not filt.filter(record("kafka.net.transport", down))


def test_kafka_python_records_are_attributed_to_the_cluster_of_their_io_thread(
    throttle: tuple[RepeatedFailures, Clock],
) -> None:
    filt, clock = throttle
    done = threading.Event()
    seen: list[bool] = []

    def io_thread() -> None:
        seen.append(filt.filter(record("kafka.net.connection", "Connection failed: 111 ECONNREFUSED")))
        seen.append(filt.filter(record("kafka.net.connection", "Connection failed: 111 ECONNREFUSED")))
        done.wait(5)

    thread = threading.Thread(target=io_thread)
    filt.attribute_thread(thread, "never-started")  # no ident yet: nothing recorded
    thread.start()
    filt.attribute_thread(thread, BROKER)
    thread.join(0.5)
    done.set()
    thread.join(5)
    assert seen[1] is False
    # Whether the first record came before the attribution or not, a success of that cluster
    # ends what the thread logged without a broker in the text.
    clock.now += 13
    filt.reachable(BROKER)
    assert not filt.failing or all(k.where not in ("", BROKER) for k in filt._state.kinds.values())


def test_install_puts_the_filter_on_the_root_handlers_and_the_libraries_at_warning() -> None:
    root = logging.Logger("test-root")
    handler = logging.StreamHandler()
    root.addHandler(handler)
    kafka, rd = logging.getLogger("kafka"), logging.getLogger(LIBRDKAFKA_LOGGER)
    levels = kafka.level, rd.level
    try:
        client_logs.install(verbose=False, root=root)
        client_logs.install(verbose=False, root=root)
        assert handler.filters == [client_logs.REPEATED_FAILURES]
        assert kafka.level == logging.WARNING and rd.level == logging.WARNING
    finally:
        kafka.setLevel(levels[0])
        rd.setLevel(levels[1])


def test_every_librdkafka_client_gets_the_logger_and_sparks_options_stay_strings() -> None:
    settings = settings_from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "pw",
        },
        bootstrap_servers="b:9092",
    )
    assert confluent_config(settings)["logger"] is logging.getLogger(LIBRDKAFKA_LOGGER)
    assert all(isinstance(v, str) for v in spark_kafka_options(settings).values())
