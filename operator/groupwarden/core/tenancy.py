"""What the operator lets a policy do, beyond its own spec: tenant isolation and retention floors.

Three independent, operator-level guards (all pure; the operator checks them on every run):

- Default credentials: a policy without `spec.kafka.authSecretRef` would act with the operator's own
  Kafka identity. Only namespaces the operator names (`--default-credentials-namespaces`) may do
  that; elsewhere a policy must bring its own Secret (its own principal, its own ACLs).
- Allowlist (optional file, e.g. a mounted ConfigMap): per namespace, the bootstrap servers and the
  group-id globs its policies may touch. A namespace not listed may touch nothing. The group check
  runs against the cluster's real group ids on every run: a selector glob that reaches one group the
  namespace does not own makes the whole policy Forbidden, before anything is planned. (Deciding
  whether one glob is contained in another is not needed: what matters is which groups exist.)
- Minimum retention (`--min-retention`): an Enforce policy with a rule shorter than the floor is
  refused (protects production from a `1s` typo); DryRun is allowed, it deletes nothing.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from groupwarden.core.durations import format_duration
from groupwarden.core.policy import ConsumerGroupPolicy, GlobPattern, Mode, PolicyError
from groupwarden.core.selection import GroupMatcher
from groupwarden.core.status import Reason
from groupwarden.core.validation_messages import validation_messages
from groupwarden.core.wording import counted

ALL_NAMESPACES = "*"
# How many offending group ids a Forbidden message names (the rest are counted).
SHOWN_GROUPS = 5


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, validate_by_name=True, validate_by_alias=True
    )


class NamespaceGrant(_Model):
    bootstrap_servers: Annotated[list[str], Field(min_length=1)] = Field(
        description="host:port addresses policies of this namespace may name in spec.kafka.bootstrapServers "
        "(every address of a policy must be listed)."
    )
    groups: Annotated[list[GlobPattern], Field(min_length=1)] = Field(
        description="Globs (fnmatch, case-sensitive) of the group ids this namespace owns."
    )


class TenantAllowlist(_Model):
    """The allowlist file: `namespaces: {team-a: {bootstrapServers: [...], groups: [...]}}`."""

    namespaces: dict[str, NamespaceGrant] = Field(description="Grants by namespace.")


def parse_allowlist(text: str, source: str = "allowlist") -> TenantAllowlist:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PolicyError([f"not valid YAML: {error}"], source) from None
    if document is None:
        document = {"namespaces": {}}
    try:
        return TenantAllowlist.model_validate(document)
    except ValidationError as error:
        raise PolicyError(validation_messages(error, TenantAllowlist), source) from None


def normalize_address(address: str) -> str:
    return address.strip().lower()


def _addresses(servers: str | Iterable[str]) -> set[str]:
    items = servers.split(",") if isinstance(servers, str) else servers
    return {normalize_address(a) for a in items if a.strip()}


@dataclass(frozen=True)
class Refusal:
    """Why the operator will not run a policy: the condition reason and a message for a person."""

    reason: Reason
    message: str


@dataclass(frozen=True)
class TenancyRules:
    """The operator's guards. The defaults guard nothing except the default credentials, which no
    namespace may use unless named."""

    default_credentials_namespaces: frozenset[str] = frozenset()
    allowlist: TenantAllowlist | None = None
    min_retention: timedelta | None = None
    _group_patterns: dict[str, tuple[re.Pattern[str], ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.allowlist is not None:
            for namespace, grant in self.allowlist.namespaces.items():
                self._group_patterns[namespace] = tuple(
                    re.compile(fnmatch.translate(g)) for g in grant.groups
                )

    def may_use_default_credentials(self, namespace: str) -> bool:
        names = self.default_credentials_namespaces
        return ALL_NAMESPACES in names or namespace in names

    def refusal(self, policy: ConsumerGroupPolicy) -> Refusal | None:
        """The spec-level checks (no Kafka needed). None: the policy may run."""
        namespace = policy.metadata.namespace
        kafka = policy.spec.kafka
        if kafka.auth_secret_ref is None and not self.may_use_default_credentials(namespace):
            return Refusal(
                Reason.FORBIDDEN,
                f"namespace {namespace} may not use the operator's default Kafka credentials "
                "(it is not in --default-credentials-namespaces): set spec.kafka.authSecretRef",
            )
        if self.allowlist is not None:
            grant = self.allowlist.namespaces.get(namespace)
            if grant is None:
                return Refusal(
                    Reason.FORBIDDEN, f"namespace {namespace} is not in the operator's tenant allowlist"
                )
            outside = sorted(_addresses(kafka.bootstrap_servers) - _addresses(grant.bootstrap_servers))
            if outside:
                return Refusal(
                    Reason.FORBIDDEN,
                    f"spec.kafka.bootstrapServers: {', '.join(outside)} not allowed for namespace "
                    f"{namespace} (allowed: {', '.join(grant.bootstrap_servers)})",
                )
        return self.retention_refusal(policy)

    def retention_refusal(self, policy: ConsumerGroupPolicy) -> Refusal | None:
        if self.min_retention is None or policy.spec.mode is not Mode.ENFORCE:
            return None
        too_short = [
            f"spec.rules.{name.value} {format_duration(value)}"
            for name, value in policy.spec.rules.enabled().items()
            if value < self.min_retention
        ]
        if not too_short:
            return None
        return Refusal(
            Reason.RETENTION_BELOW_MINIMUM,
            f"{', '.join(too_short)} is shorter than the operator's minimum retention "
            f"{format_duration(self.min_retention)} (--min-retention): Enforce refused, nothing deleted; "
            "use a longer retention or mode DryRun",
        )

    def groups_outside(self, policy: ConsumerGroupPolicy, group_ids: Iterable[str]) -> list[str]:
        """Group ids the policy's selector matches but its namespace does not own (sorted).
        Empty when no allowlist is configured."""
        if self.allowlist is None:
            return []
        owned = self._group_patterns.get(policy.metadata.namespace, ())
        matcher = GroupMatcher.from_selector(policy.spec.selector)
        return sorted(g for g in group_ids if matcher.matches_id(g) and not any(p.match(g) for p in owned))

    def group_refusal(self, policy: ConsumerGroupPolicy, group_ids: Sequence[str]) -> Refusal | None:
        outside = self.groups_outside(policy, group_ids)
        if not outside:
            return None
        shown = ", ".join(outside[:SHOWN_GROUPS])
        more = f" and {len(outside) - SHOWN_GROUPS} more" if len(outside) > SHOWN_GROUPS else ""
        return Refusal(
            Reason.FORBIDDEN,
            f"spec.selector matches {counted(len(outside), 'group')} namespace "
            f"{policy.metadata.namespace} does not own per the tenant allowlist ({shown}{more}): "
            "nothing planned or deleted",
        )


def parse_namespace_list(values: Sequence[str]) -> frozenset[str]:
    """`--default-credentials-namespaces a,b --default-credentials-namespaces c` -> {a, b, c}."""
    return frozenset(n.strip() for value in values for n in value.split(",") if n.strip())
