#!/usr/bin/env bash
# `make demo`: the product end to end on the devstack. Run through the Makefile (which installs,
# starts the devstack and exports its environment).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
ns=${DEMO_NAMESPACE:-groupwarden-demo}
metrics_port=${DEMO_METRICS_PORT:-18080}
run=$(date +%H%M%S)
py=.venv/bin/python
logs=${DEMO_LOG_DIR:-${DEVSTACK_DIR:-.devstack}/logs}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_until() {  # wait_until SECONDS DESCRIPTION COMMAND...
  local deadline=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || { echo "demo: timed out waiting for $what" >&2; exit 1; }
    sleep 1
  done
}

say "Install the CRD"
kubectl apply -f crds/ >/dev/null
kubectl wait --for=condition=Established crd/consumergrouppolicies.groupwarden.io --timeout=60s
kubectl delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "$ns" >/dev/null

say "The operator's audit signing key (Ed25519; restore needs only its public half)"
keys=${DEVSTACK_DIR:-.devstack}/demo-audit-keys
if [[ ! -f $keys/signing-key.pem ]]; then  # one key per devstack: its audit topic keeps older runs' records
  mkdir -p "$keys" && chmod 0700 "$keys"
  openssl genpkey -algorithm ed25519 -out "$keys/signing-key.pem"
  openssl pkey -in "$keys/signing-key.pem" -pubout -out "$keys/public-key.pem"
fi
cat "$keys/public-key.pem"

say "Start the operator (watching namespace $ns; log: $logs/demo-operator.log)"
audit_topic=${DEMO_AUDIT_TOPIC:-groupwarden-demo-audit}
.venv/bin/groupwarden run --namespace "$ns" --default-credentials-namespaces "$ns" --min-retention 2s \
  --audit-topic "$audit_topic" --audit-signing-key "$keys/signing-key.pem" \
  --metrics-port "$metrics_port" --log-format text >"$logs/demo-operator.log" 2>&1 &
pids+=($!)

say "Create realistic consumer groups with real Kafka clients (run $run)"
$py scripts/demo_groups.py create "$run"
$py scripts/demo_groups.py serve "$run" >"$logs/demo-service.log" 2>&1 &
pids+=($!)
wait_until 60 "svc-billing to run" grep -q running "$logs/demo-service.log"
kafka-consumer-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --list --state --type | grep -E "GROUP|$run"
kafka-share-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --list --state | grep -E "GROUP|$run"
kafka-streams-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --list --state | grep -E "GROUP|$run"

apply_policies() {
  sed -e "s/__BOOTSTRAP__/$KAFKA_BOOTSTRAP_SERVERS/" -e "s/__NAMESPACE__/$ns/" -e "s/__MODE__/$1/" \
    examples/demo/policies.yaml | kubectl apply -f - >/dev/null
}
all_have_run() {
  [[ $(kubectl get cgp -n "$ns" -o jsonpath='{range .items[*]}{.status.lastRun.mode}{"\n"}{end}' | grep -c "$1") == 4 ]]
}

say "Apply the policies in DryRun: groupwarden plans, deletes nothing"
sleep 11  # let the 10s retentions pass, so the plans have something to show
apply_policies DryRun
wait_until 120 "DryRun plans" all_have_run DryRun
kubectl get cgp -n "$ns"
say "What ci-groups would delete (status.plan)"
kubectl get cgp ci-groups -n "$ns" -o jsonpath='{range .status.plan[*]}{.action}  {.group}  {.reason}{"\n"}{end}'
say "What queues-and-apps would delete (share and streams groups)"
kubectl get cgp queues-and-apps -n "$ns" -o jsonpath='{range .status.plan[*]}{.action}  {.groupKind}  {.group}  {.reason}{"\n"}{end}'
say "What services would delete"
kubectl get cgp services -n "$ns" -o jsonpath='{range .status.plan[*]}{.action}  {.group}  {.reason}{"\n"}{end}'

say "Switch to Enforce"
apply_policies Enforce
deleted() { ! kafka-consumer-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --list | grep -q "ci-build-$run-0"; }
wait_until 120 "Enforce runs" all_have_run Enforce
wait_until 120 "the stale CI groups to be deleted" deleted
modern_deleted() {
  ! kafka-share-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --list | grep -q "queue-worker-$run" &&
    ! kafka-streams-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --list | grep -q "wordcount-$run"
}
wait_until 120 "the forgotten share group and the abandoned streams app's group to be deleted" modern_deleted
sleep 6  # one more interval so every policy reports its deletions
kubectl get cgp -n "$ns"
say "Events"
kubectl get events -n "$ns" --sort-by=.lastTimestamp | tail -n 20
say "Status of services"
kubectl get cgp services -n "$ns" -o jsonpath='{.status.conditions}{"\n"}{.status.summary}{"\n"}{.status.totals}{"\n"}'
say "Kafka's own view afterwards"
kafka-consumer-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --list --state | grep -E "GROUP|$run" || true
kafka-share-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --list --state | grep -E "GROUP|$run" || true
kafka-streams-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --list --state | grep -E "GROUP|$run" || true
kafka-consumer-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --describe --group "svc-billing-$run" 2>/dev/null \
  | awk 'NR==1 || /demo-/ {print $1, $2, $3, $4}'
say "The signed write-ahead audit trail in Kafka (topic $audit_topic): what restore would put back for ci-build-$run-0"
.venv/bin/groupwarden restore --audit-topic "$audit_topic" --bootstrap-servers "$KAFKA_BOOTSTRAP_SERVERS" \
  --audit-public-key "$keys/public-key.pem" --group "ci-build-$run-0"
say "Done in $(( $(date +%s) - started )) s: stale CI groups deleted, ci-keep kept, billing's dropped topic offsets removed while it kept running, the standalone group expired, the forgotten share group and the abandoned streams app's group deleted; every deletion is in the audit topic and restorable."
