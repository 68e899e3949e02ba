"""The broker's tenant principal (docs/devstack-kafka.md, "Authorizer and tenant"): a SASL user of
the SASL_SSL listener whose prefixed ACLs cover its own groups and topics but not
`__consumer_offsets`, as on a managed Kafka service. ListGroups shows it only the groups it may
Describe; the groups under its read-only prefix it may see but not delete (a DENY Delete ACL).
Topics under its observations prefix it may also create, write and read, with the transactional id
of the operator's observation store on each (`tenant_observations_topic`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from gwtest.env import devstack_env

_NAMES = (
    "GROUPWARDEN_KAFKA_SASL_BOOTSTRAP",
    "GROUPWARDEN_KAFKA_CA_FILE",
    "GROUPWARDEN_KAFKA_TENANT_USERNAME",
    "GROUPWARDEN_KAFKA_TENANT_PASSWORD_FILE",
    "GROUPWARDEN_KAFKA_TENANT_PREFIX",
    "GROUPWARDEN_KAFKA_TENANT_READONLY_PREFIX",
)


@dataclass(frozen=True)
class Tenant:
    bootstrap: str  # the SASL_SSL listener
    username: str
    password: str
    ca_file: Path
    prefix: str  # its groups (Describe, Read, Delete) and topics (Describe, Read)
    readonly_prefix: str  # groups it may Describe but not Delete (inside `prefix`)

    def client_properties(self, mechanism: str) -> str:
        """A client.properties file's text, as a user of a managed service writes it."""
        return (
            f"security.protocol=SASL_SSL\nsasl.mechanism={mechanism}\n"
            f"sasl.username={self.username}\nsasl.password={self.password}\n"
            f"ssl.ca.location={self.ca_file}\n"
        )

    def secret_data(self, mechanism: str) -> dict[str, str]:
        """What a user puts in the policy's Secret (the CA as PEM content, not a path)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
            "ssl.ca.pem": self.ca_file.read_text(),
        }


def tenant_principal() -> Tenant:
    """The tenant of the broker the tests use: the caller's environment first, else the devstack's
    kafka.env. A broker without one (KAFKA_AUTHORIZER=off, an outside broker) skips the test."""
    values = {name: os.environ.get(name, "") for name in _NAMES}
    if not all(values.values()):
        exported = devstack_env("kafka")
        values = {name: values[name] or exported.get(name, "") for name in _NAMES}
    missing = [name for name, value in values.items() if not value]
    if missing:
        pytest.skip(reason=f"{', '.join(missing)} not set: the broker has no tenant principal to test with")
    return Tenant(
        bootstrap=values["GROUPWARDEN_KAFKA_SASL_BOOTSTRAP"],
        username=values["GROUPWARDEN_KAFKA_TENANT_USERNAME"],
        password=Path(values["GROUPWARDEN_KAFKA_TENANT_PASSWORD_FILE"]).read_text().strip(),
        ca_file=Path(values["GROUPWARDEN_KAFKA_CA_FILE"]),
        prefix=values["GROUPWARDEN_KAFKA_TENANT_PREFIX"],
        readonly_prefix=values["GROUPWARDEN_KAFKA_TENANT_READONLY_PREFIX"],
    )


def tenant_observations_topic() -> str:
    """The prefix of the topics the tenant may use as the operator's observation store (Create,
    Write, Read; Write on `groupwarden-observations:<topic>`). A broker whose tenant lacks those
    ACLs (started before they were added to devstack/kafka.sh) skips the test."""
    name = "GROUPWARDEN_KAFKA_TENANT_OBSERVATIONS_TOPIC"
    value = os.environ.get(name) or devstack_env("kafka").get(name, "")
    if not value:
        pytest.skip(reason=f"{name} not set: the tenant has no ACLs for an observation store")
    return value


def tenant_audit_topic() -> str:
    """The prefix of the topics on which the tenant has the audit topic's documented grant (Write,
    which implies Describe; Read from its topic prefix). A broker without it skips the test."""
    name = "GROUPWARDEN_KAFKA_TENANT_AUDIT_TOPIC"
    value = os.environ.get(name) or devstack_env("kafka").get(name, "")
    if not value:
        pytest.skip(reason=f"{name} not set: the tenant has no Write ACL on an audit topic")
    return value
