"""The ConsumerGroupPolicy: one pydantic model for the CLI's policy files and the operator's CRD.

The models are the single source of the CRD schema (`model_json_schema(by_alias=True)`), so every
field has a description, camelCase aliases match the manifest, and optional fields avoid
`anyOf: [..., null]` (`SkipJsonSchema[None]`): in Kubernetes an absent field is the "off" value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

from groupwarden.core.durations import Duration, OptionalDuration, format_duration
from groupwarden.core.safe_yaml import MAX_DEPTH, load_documents
from groupwarden.core.validation_messages import show_value, validation_messages


class GroupType(StrEnum):
    """Group kinds a policy may select (values match `snapshot.GroupKind`)."""

    CLASSIC = "classic"
    CONSUMER = "consumer"
    SIMPLE = "simple"
    SHARE = "share"  # KIP-932; only when named: not in the default (ALL_GROUP_TYPES)
    STREAMS = "streams"  # KIP-1071; only when named, like share


class Mode(StrEnum):
    DRY_RUN = "DryRun"
    ENFORCE = "Enforce"


class RuleName(StrEnum):
    """The retention rules, named as in the manifest (they appear in plans and reasons)."""

    EMPTY_GROUP_RETENTION = "emptyGroupRetention"
    UNSUBSCRIBED_OFFSET_RETENTION = "unsubscribedOffsetRetention"
    SIMPLE_GROUP_OFFSET_RETENTION = "simpleGroupOffsetRetention"


@dataclass(frozen=True, order=True)
class PolicyRef:
    """Which policy a plan belongs to (`namespace/name`)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def _drop_null_default(schema: dict[str, Any]) -> None:
    # `default: null` is not allowed in a structural CRD schema; absent already means "off".
    if schema.get("default", 0) is None:
        del schema["default"]


def validate_glob(pattern: str) -> str:
    """Accept fnmatch patterns (`*`, `?`, `[seq]`, `[!seq]`); reject ones that are surely mistakes.

    fnmatch silently treats an unclosed `[` as a literal and an inverted range as "matches nothing";
    in a deletion policy both are typos, so they are errors here.
    """
    if pattern == "":
        raise ValueError("invalid glob '': empty pattern (use '*' to match every group)")
    if pattern != pattern.strip():
        raise ValueError(
            f"invalid glob {pattern!r}: leading or trailing whitespace (use '?' to match a space)"
        )
    index = 0
    while index < len(pattern):
        if pattern[index] != "[":
            index += 1
            continue
        start = index + 1
        if start < len(pattern) and pattern[start] == "!":
            start += 1
        end = start + 1 if start < len(pattern) and pattern[start] == "]" else start
        while end < len(pattern) and pattern[end] != "]":
            end += 1
        if end >= len(pattern):
            raise ValueError(
                f"invalid glob {pattern!r}: unclosed '[' at position {index} (write '[[]' for a literal '[')"
            )
        members = pattern[start:end]
        position = 0
        while position < len(members):
            if position + 2 < len(members) and members[position + 1] == "-":
                low, high = members[position], members[position + 2]
                if low > high:
                    raise ValueError(f"invalid glob {pattern!r}: empty range '{low}-{high}'")
                position += 3
            else:
                position += 1
        index = end + 1
    return pattern


GlobPattern = Annotated[str, AfterValidator(validate_glob)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


_BOOTSTRAP_PATTERN = r"^[^,\s]+(\s*,\s*[^,\s]+)*$"


class SecretReference(_Model):
    name: str = Field(
        min_length=1,
        description="Name of a Secret in the policy's namespace whose keys are Kafka client properties "
        "(security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.* ...).",
    )


class KafkaConnection(_Model):
    bootstrap_servers: str = Field(
        description="Comma-separated host:port list of Kafka brokers, e.g. 'broker-1:9092,broker-2:9092'.",
        json_schema_extra={"pattern": _BOOTSTRAP_PATTERN},
    )
    auth_secret_ref: SecretReference | SkipJsonSchema[None] = Field(
        default=None,
        description="Optional Secret with Kafka client properties for authentication and TLS (operator only; "
        "the CLI takes --command-config instead).",
        json_schema_extra=_drop_null_default,
    )

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_bootstrap_servers(cls, value: str) -> str:
        if not re.fullmatch(_BOOTSTRAP_PATTERN, value):
            raise ValueError(
                f"invalid bootstrap servers {value!r}: expected a comma-separated list of host:port"
            )
        return value

    @property
    def bootstrap_server_list(self) -> list[str]:
        return [server.strip() for server in self.bootstrap_servers.split(",")]


# The default selection. It stays these three: a policy written before share groups were supported
# must never start touching them; `share` and `streams` must be named.
ALL_GROUP_TYPES: tuple[GroupType, ...] = (GroupType.CLASSIC, GroupType.CONSUMER, GroupType.SIMPLE)


# A destructive policy must name what it touches: no default selects "every group" for a policy that
# forgot its selector (on the devstack such a policy matched all 5,039 groups of the broker).
SELECTOR_REQUIRED_REASON = (
    "a policy must name the groups it may delete, as group-id globs (e.g. include: ['ci-*']; "
    "include: ['*'] selects every group of the cluster, on purpose)"
)
SELECTOR_REQUIRED_MESSAGE = f"required field is missing: {SELECTOR_REQUIRED_REASON}"
SELECTOR_EMPTY_MESSAGE = (
    "empty list: it would select no group at all, so the policy would silently do nothing; name the "
    "groups it may delete (e.g. ['ci-*']), or ['*'] for every group"
)


def _required_by_cel(field: str, field_path: str) -> Callable[[dict[str, Any]], None]:
    """CRD schema: require `field` with a CEL rule instead of `required`, so the API server says why.

    The API server skips CEL rules while an object has schema errors, and for `required` it only
    says "Required value"; the rule names `spec.selector.include` with the reason, like the CLI.
    """

    def adjust(schema: dict[str, Any]) -> None:
        required = [name for name in schema.get("required", []) if name != field]
        if required:
            schema["required"] = required
        else:
            schema.pop("required", None)
        schema.setdefault("x-kubernetes-validations", []).append(
            {
                "rule": f"has(self.{field})",
                "message": SELECTOR_REQUIRED_REASON,
                "fieldPath": field_path,
                "reason": "FieldValueRequired",
            }
        )

    return adjust


class GroupSelector(_Model):
    model_config = ConfigDict(json_schema_extra=_required_by_cel("include", ".include"))

    include: list[GlobPattern] = Field(
        description="Required. Glob patterns (fnmatch: *, ?, [seq], [!seq]; case-sensitive) on group ids; a "
        "group is selected when it matches at least one. There is no default: a policy names the groups it "
        "may delete (['*'] selects every group, on purpose); an empty list is rejected.",
        json_schema_extra={
            "minItems": 1,
            "x-kubernetes-validations": [{"rule": "size(self) > 0", "message": SELECTOR_EMPTY_MESSAGE}],
        },
    )
    exclude: list[GlobPattern] = Field(
        default_factory=list,
        description="Glob patterns on group ids that are never selected; exclude always wins over include.",
        json_schema_extra={"default": []},
    )
    group_types: list[GroupType] = Field(
        default_factory=lambda: list(ALL_GROUP_TYPES),
        min_length=1,
        description="Group kinds to select: classic (classic protocol with a protocolType), consumer "
        "(KIP-848 groups), simple (standalone groups that only hold offsets), share (KIP-932 share "
        "groups) and streams (KIP-1071 streams groups); share and streams only when named, the default "
        "is classic, consumer and simple.",
        json_schema_extra={"x-kubernetes-list-type": "set", "default": [t.value for t in ALL_GROUP_TYPES]},
    )

    @field_validator("include")
    @classmethod
    def _include_not_empty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(SELECTOR_EMPTY_MESSAGE)
        return value

    @field_validator("group_types")
    @classmethod
    def _unique_group_types(cls, value: list[GroupType]) -> list[GroupType]:
        duplicates = sorted({t.value for t in value if value.count(t) > 1})
        if duplicates:
            raise ValueError(f"duplicate group types {duplicates}")
        return value


class RetentionRules(_Model):
    empty_group_retention: OptionalDuration = Field(
        default=None,
        description="Delete a classic (with a protocolType) or KIP-848 group once it has been Empty this "
        "long (clock: when it became Empty, or its last offset commit if later). Absent: off.",
        json_schema_extra=_drop_null_default,
    )
    unsubscribed_offset_retention: OptionalDuration = Field(
        default=None,
        description="Delete the committed offsets of topics a Stable group no longer subscribes to, once "
        "their last commit is this old (KIP-496 OffsetDelete). Subscribed topics are never touched. "
        "Absent: off.",
        json_schema_extra=_drop_null_default,
    )
    simple_group_offset_retention: OptionalDuration = Field(
        default=None,
        description="Standalone (simple) groups: delete each partition's offset once its last commit is this "
        "old; the group is deleted when all its offsets are. Absent: off.",
        json_schema_extra=_drop_null_default,
    )

    def enabled(self) -> dict[RuleName, timedelta]:
        """The rules that are on, with their retention."""
        rules = {
            RuleName.EMPTY_GROUP_RETENTION: self.empty_group_retention,
            RuleName.UNSUBSCRIBED_OFFSET_RETENTION: self.unsubscribed_offset_retention,
            RuleName.SIMPLE_GROUP_OFFSET_RETENTION: self.simple_group_offset_retention,
        }
        return {name: retention for name, retention in rules.items() if retention is not None}


class DeletionLimits(_Model):
    max_group_deletions_per_run: Annotated[int, Field(strict=True, ge=0)] = Field(
        default=100,
        description="At most this many groups are deleted per run (oldest first); the rest wait for the next "
        "run. 0 disables group deletion.",
    )
    max_offset_deletions_per_run: Annotated[int, Field(strict=True, ge=0)] = Field(
        default=10000,
        description="At most this many partition offsets are deleted per run (oldest first), counted in "
        "partitions. 0 disables offset deletion.",
    )
    max_deletion_ratio: Annotated[float, Field(strict=True, gt=0, le=1)] = Field(
        default=0.5,
        description="Blast-radius breaker: when more than this fraction of the selected groups is eligible "
        "for deletion, the run deletes nothing and reports BlastRadiusExceeded. 0 < ratio <= 1.",
    )


class PolicySpec(_Model):
    model_config = ConfigDict(json_schema_extra=_required_by_cel("selector", ".selector.include"))

    kafka: KafkaConnection = Field(description="How to reach the Kafka cluster.")
    selector: GroupSelector = Field(
        description="Required. Which consumer groups this policy governs (and may delete): selector.include "
        "names them; there is no 'every group' default.",
    )
    rules: RetentionRules = Field(
        default_factory=RetentionRules,
        description="Retention rules; each is optional and off when absent. With no rule the policy "
        "plans nothing.",
        json_schema_extra={"default": {}},
    )
    mode: Mode = Field(
        default=Mode.DRY_RUN,
        description="DryRun (default) only plans and reports; Enforce deletes.",
    )
    interval: Duration = Field(
        default=timedelta(minutes=10),
        description="How often the operator evaluates the policy, e.g. 10m.",
        json_schema_extra={"default": "10m"},
    )
    suspend: StrictBool = Field(
        default=False,
        description="When true the operator stops acting on this policy (it still blocks overlapping "
        "policies).",
    )
    limits: DeletionLimits = Field(
        default_factory=DeletionLimits,
        description="Per-run limits and the blast-radius breaker.",
        json_schema_extra={"default": {}},
    )


def _holds_bytes(value: object) -> bool:
    """Whether a metadata value holds bytes anywhere (nesting is bounded by `_plain`)."""
    if isinstance(value, bytes | bytearray):
        return True
    if isinstance(value, dict):
        return any(_holds_bytes(k) or _holds_bytes(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return any(_holds_bytes(item) for item in value)
    return False


class PolicyMetadata(BaseModel):
    """The Kubernetes object metadata; only name and namespace are used, other keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, description="Policy name.")
    namespace: str = Field(default="default", min_length=1, description="Policy namespace.")

    @model_validator(mode="after")
    def _extras_are_json(self) -> PolicyMetadata:
        # A YAML `!!binary` value here parsed, then model_dump(mode="json") (the CLI's
        # --bootstrap-servers) raised UnicodeDecodeError (found by bench/fuzz_policy.py).
        for key, value in (self.model_extra or {}).items():
            if _holds_bytes(key) or _holds_bytes(value):
                raise ValueError(f"metadata.{key}: binary data (!!binary) is not allowed in metadata")
        return self


class ConsumerGroupPolicy(_Model):
    api_version: Literal["groupwarden.io/v1beta1", "groupwarden.io/v1alpha1"] = Field(
        description="groupwarden.io/v1beta1 (groupwarden.io/v1alpha1, the same fields, is deprecated)."
    )
    kind: Literal["ConsumerGroupPolicy"] = Field(description="Always ConsumerGroupPolicy.")
    metadata: PolicyMetadata = Field(description="Kubernetes object metadata.")
    spec: PolicySpec = Field(description="What to clean up, how, and within which limits.")

    @property
    def ref(self) -> PolicyRef:
        return PolicyRef(self.metadata.namespace, self.metadata.name)

    def with_bootstrap_servers(self, bootstrap_servers: str) -> ConsumerGroupPolicy:
        """A copy connecting elsewhere (the CLI's `--bootstrap-servers`), validated like the file."""
        document = self.model_dump(mode="json", exclude_none=True)
        document["spec"]["kafka"]["bootstrapServers"] = bootstrap_servers
        return parse_policy(document)

    def warnings(self) -> list[str]:
        """Valid but probably unintended settings (a plan carries these)."""
        spec = self.spec
        enabled = spec.rules.enabled()
        types = set(spec.selector.group_types)
        found: list[str] = []
        if not enabled:
            found.append("no retention rule is set: this policy never plans anything")
        if RuleName.SIMPLE_GROUP_OFFSET_RETENTION in enabled and GroupType.SIMPLE not in types:
            found.append("simpleGroupOffsetRetention is set but selector.groupTypes excludes simple groups")
        member_rules = {
            RuleName.EMPTY_GROUP_RETENTION,
            RuleName.UNSUBSCRIBED_OFFSET_RETENTION,
        } & enabled.keys()
        if member_rules and not types & {
            GroupType.CLASSIC,
            GroupType.CONSUMER,
            GroupType.SHARE,
            GroupType.STREAMS,
        }:
            names = ", ".join(sorted(member_rules))
            found.append(
                f"{names} only applies to classic/consumer/share/streams groups, "
                "which selector.groupTypes excludes"
            )
        return found

    def describe_rules(self) -> str:
        enabled = self.spec.rules.enabled()
        return ", ".join(f"{name} {format_duration(value)}" for name, value in enabled.items()) or "no rules"


class PolicyError(ValueError):
    """An invalid policy; each entry of `problems` names the field path and the bad value."""

    def __init__(self, problems: Sequence[str], source: str = "") -> None:
        self.problems = tuple(problems)
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__(prefix + "; ".join(self.problems))


# A missing selector (or include) is reported as the one field the user must write.
_MISSING_MESSAGES: dict[str, tuple[str, str]] = {
    "spec.selector": ("spec.selector.include", SELECTOR_REQUIRED_MESSAGE),
    "spec.selector.include": ("spec.selector.include", SELECTOR_REQUIRED_MESSAGE),
}


def parse_policy(document: object) -> ConsumerGroupPolicy:
    """Validate one manifest (a mapping, e.g. a YAML document or a Kubernetes object body).

    A top-level `status` (present on objects read from the API server) is ignored: it is written by
    the operator, it is not part of the policy.
    """
    if not isinstance(document, Mapping):
        raise PolicyError(
            [f"(document): expected a mapping (a ConsumerGroupPolicy manifest), got {show_value(document)}"]
        )
    body = {key: _plain(value) for key, value in document.items() if key != "status"}
    try:
        return ConsumerGroupPolicy.model_validate(body)
    except ValidationError as error:
        raise PolicyError(validation_messages(error, ConsumerGroupPolicy, _MISSING_MESSAGES)) from None


def _plain(value: object, depth: int = 0) -> object:
    """Deep-copy mappings/sequences into dicts/lists (kopf bodies are read-only Mapping views)."""
    if isinstance(value, str | int | float | None):  # most values: no (slow) ABC checks
        return value
    if depth > MAX_DEPTH:
        raise PolicyError([f"(document): nested deeper than {MAX_DEPTH} levels"])
    if isinstance(value, Mapping):
        return {key: _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return [_plain(item, depth + 1) for item in value]
    return value


def parse_policy_yaml(text: str, source: str = "<string>") -> list[ConsumerGroupPolicy]:
    """Every policy in a YAML stream (empty documents are ignored; at least one policy is required)."""
    try:
        documents = load_documents(text)
    except yaml.YAMLError as error:
        raise PolicyError([f"invalid YAML: {error}".replace("\n", " ")], source) from None
    if not documents:
        raise PolicyError(["no policy found (the file is empty)"], source)
    policies: list[ConsumerGroupPolicy] = []
    problems: list[str] = []
    for number, document in enumerate(documents, start=1):
        label = f"document {number}: " if len(documents) > 1 else ""
        try:
            policies.append(parse_policy(document))
        except PolicyError as error:
            problems.extend(label + problem for problem in error.problems)
    seen: set[PolicyRef] = set()
    for policy in policies:
        if policy.ref in seen:
            problems.append(f"policy {policy.ref} is defined more than once")
        seen.add(policy.ref)
    if problems:
        raise PolicyError(problems, source)
    return policies


def load_policy_file(path: str | os.PathLike[str]) -> list[ConsumerGroupPolicy]:
    """Load a policy file: one or more `---`-separated ConsumerGroupPolicy manifests."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PolicyError([f"cannot read policy file: {error}"], str(path)) from None
    return parse_policy_yaml(text, str(path))
