"""Connection pooling, credentials from a Secret, backoff and resume times, status transitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from controller_harness import make_harness, observe_quietly, policy_body, run_async

from groupwarden.controller.credentials import CredentialsError, resolve_settings
from groupwarden.controller.registry import entry_from_body
from groupwarden.controller.status_builder import conditions_for
from groupwarden.controller.worker import _resume_time, retry_delay
from groupwarden.core.policy import PolicyRef, parse_policy
from groupwarden.core.status import Condition, Reason
from groupwarden.testing.fake_kafka import FakeKafka

pytestmark = pytest.mark.unit

PASSWORD = "s3cr3t-value-never-shown"
CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def sasl_policy(secret: str = "kafka-auth") -> dict[str, object]:
    body = policy_body("p", rules={"emptyGroupRetention": "1d"})
    body["spec"]["kafka"]["authSecretRef"] = {"name": secret}  # type: ignore[index]
    return body


def test_credentials_from_a_secret_become_settings_with_pem_content_written_privately(tmp_path: Path) -> None:
    data = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": PASSWORD,
        "ssl.ca.pem": CA,
    }
    settings = resolve_settings(parse_policy(sasl_policy()), lambda ns, name: data, tmp_path)
    assert settings.sasl_username == "svc" and settings.sasl_password is not None
    assert settings.bootstrap_servers == ("kafka:9092",)
    assert settings.ssl_ca_file is not None and Path(settings.ssl_ca_file).read_text() == CA
    assert Path(settings.ssl_ca_file).stat().st_mode & 0o077 == 0
    assert PASSWORD not in repr(settings)
    # Same content, same file: equal settings, so the pooled client is reused.
    assert resolve_settings(parse_policy(sasl_policy()), lambda ns, name: data, tmp_path) == settings


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "Secret team/kafka-auth not found"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.password"),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "u",
                "sasl.password": PASSWORD,
                "ssl.ca.pem": PASSWORD,
            },
            "does not hold PEM data",
        ),
    ],
)
def test_missing_secret_or_key_is_a_credentials_error_without_values(
    tmp_path: Path, data: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(CredentialsError) as raised:
        resolve_settings(parse_policy(sasl_policy()), lambda ns, name: data, tmp_path)
    assert message in str(raised.value) and PASSWORD not in str(raised.value)


def test_secret_problems_are_reported_and_the_password_never_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_harness(tmp_path)
    h.secrets.secrets[("team", "kafka-auth")] = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
    }

    async def scenario() -> None:
        await observe_quietly(h, sasl_policy())
        await h.reconcile("p")
        h.secrets.secrets[("team", "kafka-auth")]["sasl.username"] = "svc"
        h.secrets.secrets[("team", "kafka-auth")]["sasl.password"] = PASSWORD
        h.fake.unavailable = True  # the password now works its way into a connection attempt
        await h.reconcile("p")

    run_async(scenario)
    assert h.events.reasons() == ["SecretNotFound", "KafkaUnavailable"]
    everything = repr(h.status.statuses) + repr(h.events.events) + caplog.text
    assert "sasl.username" in everything and PASSWORD not in everything


def test_policies_with_equal_settings_share_one_client_closed_when_the_last_one_goes(tmp_path: Path) -> None:
    h = make_harness(tmp_path)

    async def scenario() -> None:
        await observe_quietly(h, policy_body("a", rules={"emptyGroupRetention": "1d"}))
        await observe_quietly(h, policy_body("b", rules={"emptyGroupRetention": "1d"}))
        await h.reconcile("a")
        await h.reconcile("b")
        assert len(h.factory.made) == 1 and h.controller.pool.open_count() == 1
        for connection in h.controller.pool.release(PolicyRef("team", "a")):
            connection.reset()
        assert not h.fake.closed
        for connection in h.controller.pool.release(PolicyRef("team", "b")):
            connection.reset()

    run_async(scenario)
    assert h.fake.closed and h.controller.pool.open_count() == 0


def test_policies_on_one_cluster_via_different_listeners_are_peers(tmp_path: Path) -> None:
    fake = FakeKafka(topics={"t"}, cluster_id="one-cluster")
    h = make_harness(tmp_path, fake, kafka_9093=fake)  # two bootstrap addresses, one cluster id
    selector = {"include": ["*"]}

    async def scenario() -> None:
        await observe_quietly(h, policy_body("a", rules={"emptyGroupRetention": "1d"}, selector=selector))
        await observe_quietly(
            h,
            policy_body("b", bootstrap="kafka:9093", rules={"emptyGroupRetention": "1d"}, selector=selector),
        )
        fake.add_group("g", offsets={("t", 0): 1}, empty_since_ms=fake.now_ms - 86_400_000 * 3)
        await h.reconcile("b")  # learns that kafka:9093 is cluster "one-cluster"
        await h.reconcile("a")

    run_async(scenario)
    assert h.status_of("a")["overlappingPolicies"] == ["team/b"]


def test_retry_backoff_doubles_and_is_capped_by_the_interval() -> None:
    delays = [retry_delay(n, timedelta(minutes=1)) for n in range(1, 6)]
    assert delays == [timedelta(seconds=s) for s in (5, 10, 20, 40, 60)]
    assert retry_delay(30, timedelta(hours=1)) == timedelta(minutes=5)
    assert retry_delay(1, timedelta(milliseconds=10)) == timedelta(seconds=1)


def test_a_restarted_operator_resumes_the_cadence_from_the_status() -> None:
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    later = now + timedelta(minutes=4)
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "DryRun",
        "lastTransitionTime": "2026-11-22T11:00:00Z",
    }
    status = {"observedGeneration": 3, "conditions": [ready], "nextRunTime": later.isoformat()}
    assert _resume_time(entry_from_body(policy_body("p", generation=3, status=status)), now) == later
    # A new generation, or a failed last run, runs at once.
    assert _resume_time(entry_from_body(policy_body("p", generation=4, status=status)), now) == now
    failed = {**status, "conditions": [{**ready, "status": "False", "reason": "KafkaUnavailable"}]}
    assert _resume_time(entry_from_body(policy_body("p", generation=3, status=failed)), now) == now


def test_condition_transition_time_moves_only_when_the_status_changes() -> None:
    t1 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    t2 = t1 + timedelta(minutes=10)
    first = conditions_for(Reason.SUCCEEDED, "ok", 1, t1, [])
    second = conditions_for(Reason.DRY_RUN, "still ok", 2, t2, first)
    third = conditions_for(Reason.KAFKA_UNAVAILABLE, "down", 2, t2 + timedelta(minutes=1), second)

    def by_type(items: list[Condition]) -> dict[str, Condition]:
        return {c.type: c for c in items}

    assert by_type(second)["Ready"].last_transition_time == t1  # True -> True
    assert by_type(second)["Ready"].reason == "DryRun" and by_type(second)["Ready"].observed_generation == 2
    assert by_type(third)["Ready"].last_transition_time == t2 + timedelta(minutes=1)
    assert by_type(third)["Reconciling"].status == "True" and by_type(third)["Stalled"].status == "False"


def test_first_observed_times_survive_runs_of_other_policies_on_the_same_cluster(tmp_path: Path) -> None:
    fake = FakeKafka(topics={"t"})
    fake.offsets_log_unavailable = True  # first-observed times only
    fake.add_group("a-1", offsets={("t", 0): 1})
    fake.add_group("b-1", offsets={("t", 0): 1})
    h = make_harness(tmp_path, fake)
    rules = {"emptyGroupRetention": "1h"}

    async def scenario() -> None:
        await observe_quietly(
            h, policy_body("a", rules=rules, selector={"include": ["a-*"]}, limits={"maxDeletionRatio": 1})
        )
        await observe_quietly(h, policy_body("b", rules=rules, selector={"include": ["b-*"]}))
        await h.reconcile("a")  # a-1 first seen Empty now
        fake.advance(2 * 3_600_000)
        await h.reconcile("b")  # must not forget what "a" observed
        await h.reconcile("a")

    run_async(scenario)
    status = h.status_of("a")
    assert [p["group"] for p in status["plan"]] == ["a-1"]
    assert status["lastRun"]["timestampSource"] == "observed"


def test_first_observed_times_do_not_outlive_a_lost_lease(tmp_path: Path) -> None:
    """Another replica led meantime and may have seen the group active: without an observation
    store, a replica that leads again starts its clocks afresh instead of resuming stale ones."""
    fake = FakeKafka(topics={"t"})
    fake.offsets_log_unavailable = True
    fake.add_group("a-1", offsets={("t", 0): 1})
    h = make_harness(tmp_path, fake)

    async def scenario() -> None:
        body = policy_body("a", rules={"emptyGroupRetention": "1h"}, selector={"include": ["a-*"]})
        await observe_quietly(h, {**body, "spec": {**body["spec"], "limits": {"maxDeletionRatio": 1}}})
        await h.reconcile("a")  # a-1 first seen Empty now
        h.controller.leadership_changed(False)
        fake.advance(2 * 3_600_000)
        h.controller.leadership_changed(True)
        await h.reconcile("a")

    run_async(scenario)
    assert h.status_of("a")["plan"] == []  # seen Empty again just now: 1h to go
