"""The ConsumerGroupPolicy status: what kubectl, Flux and Argo CD read (kstatus conditions).

These models are the status schema of the CRD (generated, never hand-written) and what the operator
writes. kopf's own bookkeeping lives in annotations, never here.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# How many planned actions a DryRun status shows (the full plan is in the CLI / events).
STATUS_PLAN_LIMIT = 20


class ConditionType(StrEnum):
    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    # Whether the first-observed clocks this policy's decisions rest on outlive the operator
    # process (its cluster's observation store). Only on policies whose last run used observed
    # times; never part of Ready, so health checks and PolicyNotReady stay as they are.
    CLOCKS_PERSISTED = "ClocksPersisted"


class ClocksReason(StrEnum):
    """The reasons of the ClocksPersisted condition."""

    STORED = "Stored"
    STORE_UNAVAILABLE = "ObservationStoreUnavailable"


class Reason(StrEnum):
    """Condition reasons, in one place: tests, docs and alerting match on these strings."""

    SUCCEEDED = "Succeeded"
    DRY_RUN = "DryRun"
    SUSPENDED = "Suspended"
    RECONCILING = "Reconciling"
    # A pass is waiting out retriable Kafka answers (a broker failing over): not a failure yet.
    WAITING_FOR_KAFKA = "WaitingForKafka"
    PARTIAL_FAILURE = "PartialFailure"
    KAFKA_UNAVAILABLE = "KafkaUnavailable"
    AUTHORIZATION_FAILED = "AuthorizationFailed"
    # Kafka refused who we are (SASL), or we refused the broker (TLS: certificate not trusted).
    AUTHENTICATION_FAILED = "AuthenticationFailed"
    TLS_HANDSHAKE_FAILED = "TLSHandshakeFailed"
    INVALID_SPEC = "InvalidSpec"
    SECRET_NOT_FOUND = "SecretNotFound"
    BLAST_RADIUS_EXCEEDED = "BlastRadiusExceeded"
    FORBIDDEN = "Forbidden"
    RETENTION_BELOW_MINIMUM = "RetentionBelowMinimum"
    AUDIT_UNAVAILABLE = "AuditUnavailable"
    INTERNAL_ERROR = "InternalError"


class _StatusModel(BaseModel):
    model_config = ConfigDict(
        extra="ignore",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class Condition(_StatusModel):
    type: str = Field(description="Ready, Reconciling or Stalled (kstatus).")
    status: str = Field(
        description="True, False or Unknown.", json_schema_extra={"enum": ["True", "False", "Unknown"]}
    )
    reason: str = Field(description="A CamelCase reason, e.g. Succeeded, DryRun, KafkaUnavailable.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: datetime = Field(description="When the status last changed.")
    observed_generation: int = Field(default=0, description="The spec generation this condition is about.")


class LastRun(_StatusModel):
    start_time: datetime = Field(description="When the last run started.")
    finish_time: datetime = Field(description="When the last run finished.")
    duration_seconds: float = Field(description="How long the last run took.")
    mode: str = Field(description="DryRun or Enforce.")
    timestamp_source: str = Field(
        description="offsetsLog when exact timestamps came from __consumer_offsets, observed when "
        "first-observed times were used (they can only delay deletions)."
    )


class RunSummary(_StatusModel):
    groups_matched: int = Field(default=0, description="Groups the selector matched.")
    groups_eligible: int = Field(default=0, description="Groups eligible for deletion.")
    groups_deleted: int = Field(default=0, description="Groups deleted by the last run.")
    offsets_eligible: int = Field(default=0, description="Partition offsets eligible for deletion.")
    offsets_deleted: int = Field(default=0, description="Partition offsets deleted by the last run.")
    skipped: int = Field(default=0, description="Items deliberately not acted on (limits, safety, races).")


class Totals(_StatusModel):
    groups_deleted: int = Field(default=0, description="Groups deleted since the policy was created.")
    offsets_deleted: int = Field(
        default=0, description="Partition offsets deleted since the policy was created."
    )


class PlannedPartition(_StatusModel):
    topic: str = Field(description="Topic name.")
    partition: int = Field(description="Partition number.")


class PlannedAction(_StatusModel):
    action: str = Field(description="DeleteGroup or DeleteOffsets.")
    group: str = Field(description="The consumer group id.")
    group_kind: str | None = Field(
        default=None, description="classic, consumer, simple or share (the group's type)."
    )
    partitions: list[PlannedPartition] = Field(default_factory=list, description="DeleteOffsets only.")
    internal_topics: list[str] | None = Field(
        default=None,
        description="DeleteGroup of a streams group: its repartition and changelog topics, which stay "
        "(groupwarden never deletes topics); for their owner to remove.",
    )
    reason: str = Field(description="Rule, age, base timestamp and its source.")
    eligible_since: datetime = Field(description="When the rule's clock started for this item.")
    timestamp_source: str = Field(description="offsetsLog or observed.")


class PolicyStatus(_StatusModel):
    observed_generation: int = Field(default=0, description="The spec generation the status describes.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "Ready, Reconciling, Stalled; ClocksPersisted on policies that decide with first-observed times."
        ),
    )
    last_run: LastRun | None = Field(default=None, description="The last completed run.")
    summary: RunSummary | None = Field(default=None, description="Counts of the last run.")
    totals: Totals | None = Field(default=None, description="Cumulative counts.")
    plan: list[PlannedAction] = Field(
        default_factory=list,
        description=f"DryRun: the first {STATUS_PLAN_LIMIT} planned actions with their reasons.",
    )
    overlapping_policies: list[str] = Field(
        default_factory=list, description="Other policies (namespace/name) selecting some of the same groups."
    )
    next_run_time: datetime | None = Field(default=None, description="When the next run is due.")
    eligible: str = Field(default="", description="groups/offsets eligible in the last run (for kubectl).")
    deleted: str = Field(default="", description="groups/offsets deleted by the last run (for kubectl).")
