"""The Helm chart on a real API server: lint, schema, server-side validation of every rendered
manifest, install/upgrade, and the operator process running with exactly the chart's RBAC (a token
of the chart's ServiceAccount). tests/e2e/test_operator_rbac.py proves the documented rules are
enough; this file proves the chart grants them, and that a permission the chart leaves out surfaces
as a condition on the policy while the process keeps running."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from groupwarden.cli import build_parser
from groupwarden.commands.run import guards_from_args
from groupwarden.core.tenancy import parse_allowlist
from gwtest.env import REPO, tool_path
from gwtest.kafka import consumer_in_group, create_topics, produce
from gwtest.operator import (
    condition,
    create_policy,
    events_of,
    existing_groups,
    get_policy,
    policy_manifest,
    reasons,
    running_operator,
    wait_for_status,
)
from gwtest.prometheus import ensure_monitoring_crds
from gwtest.wait import wait_for

CHART = REPO / "deploy" / "helm" / "groupwarden"


def helm(kubeconfig: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [tool_path("helm"), "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def render(kubeconfig: str, namespace: str, *sets: str, release: str = "gw") -> str:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for item in sets:
        args += ["--set", item]
    return helm(kubeconfig, *args).stdout


def server_dry_run(kubeconfig: str, manifests: str) -> str:
    result = subprocess.run(
        [tool_path("kubectl"), "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-"],
        input=manifests,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


pytestmark = pytest.mark.usefixtures("policy_crd")


@pytest.fixture(scope="module")
def monitoring_crds(kubeconfig: str) -> None:
    """PrometheusRule and ServiceMonitor CRDs (the pinned Prometheus Operator release), so the
    chart's monitoring templates are validated by the API server too."""
    ensure_monitoring_crds(kubeconfig)


def test_helm_lint_passes_strict_and_a_typo_in_values_fails(kubeconfig: str) -> None:
    helm(kubeconfig, "lint", str(CHART))
    helm(kubeconfig, "lint", "--strict", str(CHART))
    typo = helm(kubeconfig, "lint", str(CHART), "--set", "replicaCont=2", check=False)
    assert typo.returncode != 0 and "replicaCont" in typo.stdout + typo.stderr
    wrong_type = helm(kubeconfig, "lint", str(CHART), "--set", "logFormat=xml", check=False)
    assert wrong_type.returncode != 0


@pytest.mark.parametrize(
    "mode",
    ["all-namespaces", "watch-namespaces"],
)
def test_every_rendered_manifest_is_accepted_by_the_api_server(
    kubeconfig: str,
    k8s: ApiClient,
    namespace: str,
    mode: str,
    unique_name: Callable[[str], str],
    monitoring_crds: None,
) -> None:
    sets = [
        "podDisruptionBudget.enabled=true",
        "networkPolicy.enabled=true",
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
        "networkPolicy.egress[0].ports[0].port=9092",
        "extraEnv[0].name=SSL_CERT_FILE",
        "extraEnv[0].value=/etc/kafka-ca/ca.crt",
        "extraVolumes[0].name=kafka-ca",
        "extraVolumes[0].configMap.name=kafka-ca",
        "extraVolumeMounts[0].name=kafka-ca",
        "extraVolumeMounts[0].mountPath=/etc/kafka-ca",
        "extraArgs[0]=--no-offsets-log",
        "replicaCount=2",
        "defaultCredentials.namespaces[0]=platform",
        "defaultCredentials.secretName=gw-default-kafka",
        "tenantAllowlist.enabled=true",
        "tenantAllowlist.namespaces.team-a.bootstrapServers[0]=kafka:9092",
        "tenantAllowlist.namespaces.team-a.groups[0]=team-a.*",
        "audit.topic=_groupwarden-audit",
        "serviceMonitor.enabled=true",
        "serviceMonitor.labels.release=prometheus",
        "prometheusRule.enabled=true",
        "prometheusRule.labels.release=prometheus",
        "prometheusRule.extraRules[0].alert=TeamSpecific",
        "prometheusRule.extraRules[0].expr=vector(1) == 0",
        "grafanaDashboard.enabled=true",
    ]
    if mode == "watch-namespaces":
        sets += [f"watchNamespaces[0]={namespace}", "rbac.secrets.resourceNames[0]=kafka"]
    # The release name is unique: cluster-scoped objects of parallel runs never collide.
    manifests = render(kubeconfig, namespace, *sets, release=unique_name("gw"))
    kinds = {doc["kind"] for doc in yaml.safe_load_all(manifests) if doc}
    expected_rbac = {"ClusterRole", "ClusterRoleBinding"} if mode == "all-namespaces" else set()
    assert kinds == {
        "Deployment",
        "ServiceAccount",
        "Service",
        "Role",
        "RoleBinding",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ConfigMap",
        "ServiceMonitor",
        "PrometheusRule",
        *expected_rbac,
    }
    out = server_dry_run(kubeconfig, manifests)
    assert "(server dry run)" in out


def _docs(manifests: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(manifests) if doc]


def test_the_charts_prometheus_rule_is_the_plain_rules_file_and_the_dashboard_a_sidecar_configmap(
    kubeconfig: str,
) -> None:
    """One source, shipped twice: the chart's rules with the plain file's job and runbook base
    are the plain file's rules (groupwarden/alerts.py writes both; this proves the rendering)."""
    plain = yaml.safe_load((REPO / "deploy" / "prometheus" / "groupwarden-alerts.yaml").read_text())
    [rule] = [
        d
        for d in _docs(
            render(kubeconfig, "gw", "prometheusRule.enabled=true", "prometheusRule.job=groupwarden")
        )
        if d["kind"] == "PrometheusRule"
    ]
    assert rule["spec"]["groups"] == plain["groups"]
    defaults = _docs(render(kubeconfig, "gw"))  # every monitoring object is off by default
    assert {"PrometheusRule", "ServiceMonitor", "ConfigMap"}.isdisjoint(d["kind"] for d in defaults)
    docs = _docs(
        render(
            kubeconfig,
            "gw",
            "prometheusRule.enabled=true",
            "prometheusRule.labels.release=prometheus",
            "prometheusRule.runbookBaseUrl=https://wiki.example.com/groupwarden",
            "prometheusRule.extraRules[0].alert=TeamSpecific",
            "prometheusRule.extraRules[0].expr=vector(1) == 0",
            "grafanaDashboard.enabled=true",
            "grafanaDashboard.annotations.grafana_folder=Kafka",
            "serviceMonitor.enabled=true",
        )
    )
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    rules = rule["spec"]["groups"][0]["rules"]
    assert rules[-1] == {"alert": "TeamSpecific", "expr": "vector(1) == 0"}
    no_leader = next(r for r in rules if r.get("alert") == "GroupwardenNoLeader")
    assert 'job="gw-metrics"' in no_leader["expr"]  # the Service the ServiceMonitor scrapes
    assert (
        no_leader["annotations"]["runbook_url"] == "https://wiki.example.com/groupwarden#groupwardennoleader"
    )
    assert "{{ $labels.job }}" in no_leader["annotations"]["description"]  # Prometheus's, untouched by Helm
    [monitor] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["metadata"]["name"] == "gw-metrics"
    [dashboard] = [d for d in docs if d["kind"] == "ConfigMap" and "groupwarden.json" in d.get("data", {})]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "Kafka"}
    shipped = json.loads((REPO / "deploy" / "grafana" / "groupwarden.json").read_text())
    assert json.loads(dashboard["data"]["groupwarden.json"]) == shipped


def test_the_audit_signing_values_mount_the_key_the_operator_signs_with_and_publish_the_public_one(
    kubeconfig: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupwarden.commands.run import OperatorOptions
    from groupwarden.deletion_trail import (
        Ed25519Signer,
        NoSigningKey,
        SigningKey,
        UnsignedRecords,
        load_public_keys,
    )

    key = SigningKey.generate()
    public = key.public_key.public_pem().decode()
    docs = _docs(
        render(
            kubeconfig,
            "gw",
            "audit.signing.existingSecret=gw-audit-signing",
            "audit.signing.secretKey=ed25519.pem",
            f"audit.signing.publicKeys[0]={public}",
        )
    )
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--audit-signing-key=/etc/groupwarden/audit-signing/signing-key.pem" in args
    assert "--allow-unsigned-audit" not in args
    [volume] = [v for v in pod["volumes"] if v["name"] == "audit-signing"]
    assert volume["secret"] == {
        "secretName": "gw-audit-signing",
        "items": [{"key": "ed25519.pem", "path": "signing-key.pem"}],
    }
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "audit-signing")
    assert mount == {"name": "audit-signing", "mountPath": "/etc/groupwarden/audit-signing", "readOnly": True}
    # The operator's own parser takes the flag and signs with the mounted key (a local copy here).
    (tmp_path / "signing-key.pem").write_bytes(key.private_pem())
    local = [a.replace("/etc/groupwarden/audit-signing", str(tmp_path)) for a in args]
    signer = OperatorOptions.from_args(build_parser().parse_args(local)).audit_signer
    assert isinstance(signer, Ed25519Signer) and signer.key.key_id == key.key_id
    # On-call's copy of the public key, from the ConfigMap, trusts exactly that key.
    keys = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gw-audit-public-keys"
    )
    (tmp_path / "public").mkdir()
    for name, text in keys["data"].items():
        (tmp_path / "public" / name).write_text(text)
    assert set(load_public_keys([tmp_path / "public"]).by_id) == {key.key_id}

    def signer_of(*sets: str) -> object:
        rendered = _docs(render(kubeconfig, "gw", *sets))
        flags = next(d for d in rendered if d["kind"] == "Deployment")["spec"]["template"]["spec"][
            "containers"
        ][0]["args"]
        assert not any(f.startswith("--audit-signing-key") for f in flags)
        return OperatorOptions.from_args(build_parser().parse_args(flags)).audit_signer

    # Without a key: deletions refused, unless unsigned records are allowed explicitly.
    monkeypatch.delenv("GROUPWARDEN_AUDIT_SIGNING_KEY")  # the suite's key (tests/conftest.py)
    assert isinstance(signer_of(), NoSigningKey)
    assert isinstance(signer_of("audit.signing.allowUnsigned=true"), UnsignedRecords)
    bad = helm(kubeconfig, "lint", str(CHART), "--set", "audit.signing.publicKeys[0]=not-a-key", check=False)
    assert bad.returncode != 0


def test_the_charts_guard_values_become_operator_flags_the_operator_accepts(
    kubeconfig: str, tmp_path: Path
) -> None:
    docs = _docs(
        render(
            kubeconfig,
            "gw",
            "defaultCredentials.namespaces[0]=platform",
            "defaultCredentials.namespaces[1]=ops",
            "defaultCredentials.secretName=gw-default-kafka",
            "tenantAllowlist.enabled=true",
            "tenantAllowlist.namespaces.team-a.bootstrapServers[0]=kafka:9092",
            "tenantAllowlist.namespaces.team-a.groups[0]=team-a.*",
            "audit.topic=_groupwarden-audit",
            "audit.createTopic=false",
        )
    )
    allowlist_text = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["allowlist.yaml"]
    allowlist = parse_allowlist(allowlist_text)
    assert allowlist.namespaces["team-a"].groups == ["team-a.*"]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    assert "checksum/tenant-allowlist" in pod["metadata"]["annotations"]
    args = pod["spec"]["containers"][0]["args"]
    for flag in (
        "--default-credentials-namespaces=platform,ops",
        "--default-command-config=/etc/groupwarden/default-credentials/client.properties",
        "--tenant-allowlist=/etc/groupwarden/tenant-allowlist/allowlist.yaml",
        "--min-retention=10m",  # on by default in the chart
        "--audit-topic=_groupwarden-audit",
        "--no-create-audit-topic",
    ):
        assert flag in args
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert {"/etc/groupwarden/default-credentials", "/etc/groupwarden/tenant-allowlist"} <= mounts
    # The operator's own parser takes these flags (the mounted files replaced by local copies).
    (tmp_path / "allowlist.yaml").write_text(allowlist_text)
    (tmp_path / "client.properties").write_text("client.id=gw\n")
    local = [
        a.replace("/etc/groupwarden/tenant-allowlist", str(tmp_path)).replace(
            "/etc/groupwarden/default-credentials", str(tmp_path)
        )
        for a in args
    ]
    parsed = build_parser().parse_args(local)
    tenancy, properties = guards_from_args(parsed)
    assert tenancy.default_credentials_namespaces == {"platform", "ops"}
    assert tenancy.min_retention is not None and tenancy.min_retention.total_seconds() == 600
    assert tenancy.allowlist == allowlist and properties == {"client.id": "gw"}


def test_the_chart_grants_only_the_documented_verbs_and_a_hardened_pod(kubeconfig: str) -> None:
    for sets in ([], ["watchNamespaces[0]=a", "watchNamespaces[1]=b"]):
        docs = _docs(render(kubeconfig, "gw", *sets))
        rules = [rule for doc in docs if doc["kind"] in ("Role", "ClusterRole") for rule in doc["rules"]]
        assert rules and all("*" not in rule["verbs"] + rule["resources"] for rule in rules)
        granted = {
            (g, r, v)
            for rule in rules
            for g in rule["apiGroups"]
            for r in rule["resources"]
            for v in rule["verbs"]
        }
        assert granted == {
            ("groupwarden.io", "consumergrouppolicies", "get"),
            ("groupwarden.io", "consumergrouppolicies", "list"),
            ("groupwarden.io", "consumergrouppolicies", "watch"),
            ("groupwarden.io", "consumergrouppolicies/status", "patch"),
            ("", "events", "create"),
            ("", "secrets", "get"),
            ("coordination.k8s.io", "leases", "get"),
            ("coordination.k8s.io", "leases", "create"),
            ("coordination.k8s.io", "leases", "update"),
        }
        lease_roles = [
            d for d in docs if d["kind"] == "Role" and any("leases" in r["resources"] for r in d["rules"])
        ]
        assert [d["metadata"]["namespace"] for d in lease_roles] == ["gw"]
    deployment = next(d for d in _docs(render(kubeconfig, "gw")) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["args"][:2] == ["run", "--all-namespaces"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/metrics"
    assert {"mountPath": "/tmp", "name": "tmp"} in container["volumeMounts"]


def _sa_kubeconfig(admin_kubeconfig: str, token: str, namespace: str, path: Path) -> str:
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "chart-sa",
        "clusters": [cluster],
        "users": [{"name": "chart-sa", "user": {"token": token}}],
        "contexts": [
            {
                "name": "chart-sa",
                "context": {"cluster": cluster["name"], "user": "chart-sa", "namespace": namespace},
            }
        ],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def release(kubeconfig: str, namespace: str) -> Iterator[Callable[..., None]]:
    """install/upgrade `gw` into `namespace`, watching `namespace`; uninstalled afterwards."""
    installed: list[bool] = []

    def apply(*sets: str) -> None:
        verb = "upgrade" if installed else "install"
        args = [verb, "gw", str(CHART), "--namespace", namespace, "--set", f"watchNamespaces[0]={namespace}"]
        for item in sets:
            args += ["--set", item]
        helm(kubeconfig, *args)
        installed.append(True)

    yield apply
    if installed:
        helm(kubeconfig, "uninstall", "gw", "--namespace", namespace, check=False)


def test_operator_as_the_charts_service_account_reconciles_and_a_missing_grant_is_a_condition(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    release: Callable[..., None],
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    # Installed without Secret access: the policy below needs its authSecretRef.
    release("rbac.secrets.enabled=false")
    assert helm(kubeconfig, "status", "gw", "--namespace", namespace).returncode == 0
    core = client.CoreV1Api(k8s)
    token = core.create_namespaced_service_account_token(
        "gw", namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    sa_config = _sa_kubeconfig(kubeconfig, token, namespace, tmp_path / "sa.kubeconfig")

    prefix = unique_name("helm")
    topic, group = f"{prefix}-t", f"{prefix}-g"
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 10)
    with consumer_in_group(kafka_bootstrap, group, [topic], expected_messages=10):
        pass
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "kafka"}, "stringData": {"client.id": "gw-helm"}}
    )

    # The same flags the chart's Deployment passes (Lease in the release namespace).
    deployment = client.AppsV1Api(k8s).read_namespaced_deployment("gw", namespace)
    chart_args: Sequence[str] = [
        a
        for a in deployment.spec.template.spec.containers[0].args
        if a.startswith(("--leader-election", "--lease-name"))
    ]
    with running_operator(
        sa_config, [namespace], tmp_path / "operator.log", extra_args=chart_args
    ) as operator:
        create_policy(
            k8s,
            policy_manifest(
                "helm",
                namespace,
                kafka_bootstrap,
                mode="Enforce",
                interval="2s",
                limits={"maxDeletionRatio": 1},
                rules={"emptyGroupRetention": "2s"},
                selector={"include": [f"{prefix}-*"]},
                kafka={"bootstrapServers": kafka_bootstrap, "authSecretRef": {"name": "kafka"}},
            ),
        )
        # 1. The missing grant is a clear condition (and a Warning), the process keeps running.
        denied = wait_for_status(k8s, namespace, "helm", reason="SecretNotFound", timeout=60)
        ready = condition(denied)
        assert ready is not None and ready["status"] == "False"
        assert "kafka" in ready["message"] and "403" in ready["message"]
        assert condition(denied, "Stalled")["status"] == "True"  # type: ignore[index]
        assert "SecretNotFound" in reasons(events_of(k8s, namespace, "helm"))
        assert existing_groups(kafka_bootstrap, [group]) == {group}
        assert operator.running

        # 2. helm upgrade grants get on exactly that Secret; the operator's backoff picks it up.
        release("rbac.secrets.enabled=true", "rbac.secrets.resourceNames[0]=kafka", "replicaCount=2")
        wait_for_status(
            k8s,
            namespace,
            "helm",
            reason="Succeeded",
            timeout=120,
            extra=lambda p: (p.get("status") or {}).get("totals", {}).get("groupsDeleted") == 1,
        )
        assert operator.running
        logs = operator.logs()
    assert existing_groups(kafka_bootstrap, [group]) == set()
    assert "GroupDeleted" in reasons(events_of(k8s, namespace, "helm"))
    lease = client.CoordinationV1Api(k8s).read_namespaced_lease("groupwarden-leader", namespace)
    assert lease.spec.acquire_time is not None  # created and held by the chart's SA (released on stop)
    # Status, Event and Lease writes all went through with the chart's grants.
    assert "could not post event" not in logs and "status write failed" not in logs
    assert "Lease access failed" not in logs
    assert client.AppsV1Api(k8s).read_namespaced_deployment("gw", namespace).spec.replicas == 2


def _chart_sa_kubeconfig(k8s: ApiClient, kubeconfig: str, namespace: str, tmp_path: Path) -> str:
    token = (
        client.CoreV1Api(k8s)
        .create_namespaced_service_account_token("gw", namespace, {"spec": {"expirationSeconds": 3600}})
        .status.token
    )
    return _sa_kubeconfig(kubeconfig, token, namespace, tmp_path / "sa.kubeconfig")


def _drop_rule(k8s: ApiClient, namespace: str, role: str, resource: str) -> None:
    """Removes the chart's rule for `resource` from the Role (as if the chart had not granted it)."""
    rbac = client.RbacAuthorizationV1Api(k8s)
    current = rbac.read_namespaced_role(role, namespace)
    kept = [r for r in current.rules if resource not in r.resources]
    assert len(kept) == len(current.rules) - 1
    current.rules = kept
    rbac.replace_namespaced_role(role, namespace, current)


# Each remaining grant of the chart, taken away one at a time: the operator says which call was
# denied, keeps running (no crash loop), and the rest of its work is unaffected where it can be.
@pytest.mark.parametrize(
    ("resource", "role_suffix", "log_line"),
    [
        ("consumergrouppolicies/status", "", "status write failed"),
        ("events", "", "could not post event"),
        ("leases", "-leader-election", "Lease access failed"),
    ],
)
def test_each_chart_grant_is_needed_and_its_absence_is_reported_not_a_crash(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    release: Callable[..., None],
    tmp_path: Path,
    resource: str,
    role_suffix: str,
    log_line: str,
) -> None:
    release()
    _drop_rule(k8s, namespace, f"gw{role_suffix}", resource)
    sa_config = _chart_sa_kubeconfig(k8s, kubeconfig, namespace, tmp_path)
    with running_operator(sa_config, [namespace], tmp_path / "operator.log") as operator:
        create_policy(
            k8s,
            policy_manifest(
                "denied",
                namespace,
                kafka_bootstrap,
                mode="DryRun",
                interval="2s",
                rules={"emptyGroupRetention": "1h"},
                selector={"include": ["gw-helm-none-*"]},
            ),
        )
        wait_for(lambda: log_line in operator.logs(), timeout=60, what=f"the log line {log_line!r}")
        if resource == "events":  # runs and status are unaffected
            wait_for_status(k8s, namespace, "denied", reason="DryRun", timeout=30)
            assert events_of(k8s, namespace, "denied") == []
        else:  # no status (denied, or never the leader)
            assert (get_policy(k8s, namespace, "denied").get("status") or {}).get("conditions") is None
        time.sleep(3)  # deliberately no condition to wait for: a few more cycles, still alive
        assert operator.running
        logs = operator.logs()
    # The denied call is named (resource and HTTP status), never a stack of kopf retries.
    denied = [line for line in logs.splitlines() if log_line in line]
    assert any(re.search(r"\b403\b|Forbidden", line) for line in denied), denied


def test_without_the_watch_grant_the_operator_says_so_and_recovers_when_granted(
    k8s: ApiClient,
    kubeconfig: str,
    namespace: str,
    kafka_bootstrap: str,
    release: Callable[..., None],
    tmp_path: Path,
) -> None:
    """get/list/watch on policies is the one grant the operator cannot work without: it logs what
    is denied and retries in-process with backoff (no crash loop); once the grant is back (here: the
    chart's Role rules put back), it starts watching and reconciles."""
    release()
    rbac = client.RbacAuthorizationV1Api(k8s)
    granted_rules = rbac.read_namespaced_role("gw", namespace).rules
    _drop_rule(k8s, namespace, "gw", "consumergrouppolicies")
    sa_config = _chart_sa_kubeconfig(k8s, kubeconfig, namespace, tmp_path)
    with running_operator(sa_config, [namespace], tmp_path / "operator.log") as operator:
        wait_for(
            lambda: "needs get, list and watch on consumergrouppolicies" in operator.logs(),
            timeout=240,
            interval=1,
            what="the operator to report the missing grant",
        )
        assert operator.running
        role = rbac.read_namespaced_role("gw", namespace)
        role.rules = granted_rules  # the chart's grant is back
        rbac.replace_namespaced_role("gw", namespace, role)
        create_policy(
            k8s,
            policy_manifest(
                "granted",
                namespace,
                kafka_bootstrap,
                selector={"include": ["gw-helm-granted-none-*"]},
                mode="DryRun",
                interval="2s",
                rules={"emptyGroupRetention": "1h"},
            ),
        )
        wait_for(
            lambda: get_policy(k8s, namespace, "granted").get("status", {}).get("lastRun"),
            timeout=240,
            interval=1,
            what="the policy to be reconciled after the grant came back",
        )
        assert operator.running
        logs = operator.logs()
    assert "consumergrouppolicies.groupwarden.io is forbidden" in logs
