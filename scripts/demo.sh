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

# Kafka's own view of this run's groups, asked for by name: a --list prints every group of the
# broker, minutes on one that holds the benchmarks' 100k groups. A group that is gone makes the
# tool say "not found" (and stop: one group per call).
consumer_groups=("ci-build-$run-0" "ci-build-$run-1" "ci-build-$run-2" "ci-keep-$run" "svc-billing-$run" "standalone-audit-$run")
describe_state() {  # describe_state TOOL GROUP: the tool's --describe --state output, errors included
  "$1" --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --describe --state --group "$2" 2>&1 || true
}
show_groups() {  # show_groups TOOL GROUP...: the state table of the groups, a gone group as such
  local tool=$1 group out header=
  shift
  for group in "$@"; do
    out=$(describe_state "$tool" "$group")
    if grep -qiE "not found|does not exist" <<<"$out"; then
      printf '%s  (gone)\n' "$group"
      continue
    fi
    [[ -n $header ]] || { header=1; grep -m1 '^GROUP' <<<"$out" || true; }
    grep -E "^${group}[[:space:]]" <<<"$out" || true
  done
}
gone() {  # gone TOOL GROUP: the broker no longer has the group (or holds it Dead on its way out)
  local out
  out=$(describe_state "$1" "$2")
  grep -qiE "not found|does not exist" <<<"$out" || grep -qE "^${2}[[:space:]].*[[:space:]]Dead[[:space:]]" <<<"$out"
}

show_groups kafka-consumer-groups "${consumer_groups[@]}"
show_groups kafka-share-groups "queue-worker-$run"
show_groups kafka-streams-groups "wordcount-$run"

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
deleted() { gone kafka-consumer-groups "ci-build-$run-0"; }
wait_until 120 "Enforce runs" all_have_run Enforce
wait_until 120 "the stale CI groups to be deleted" deleted
modern_deleted() { gone kafka-share-groups "queue-worker-$run" && gone kafka-streams-groups "wordcount-$run"; }
wait_until 120 "the forgotten share group and the abandoned streams app's group to be deleted" modern_deleted
sleep 6  # one more interval so every policy reports its deletions
kubectl get cgp -n "$ns"
say "Events"
kubectl get events -n "$ns" --sort-by=.lastTimestamp | tail -n 20
say "Status of services"
kubectl get cgp services -n "$ns" -o jsonpath='{.status.conditions}{"\n"}{.status.summary}{"\n"}{.status.totals}{"\n"}'
say "Kafka's own view afterwards"
show_groups kafka-consumer-groups "${consumer_groups[@]}"
show_groups kafka-share-groups "queue-worker-$run"
show_groups kafka-streams-groups "wordcount-$run"
kafka-consumer-groups --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --describe --group "svc-billing-$run" 2>/dev/null \
  | awk 'NR==1 || /demo-/ {print $1, $2, $3, $4}'
say "The signed write-ahead audit trail in Kafka (topic $audit_topic): what restore would put back for ci-build-$run-0"
.venv/bin/groupwarden restore --audit-topic "$audit_topic" --bootstrap-servers "$KAFKA_BOOTSTRAP_SERVERS" \
  --audit-public-key "$keys/public-key.pem" --group "ci-build-$run-0"
say "Done in $(( $(date +%s) - started )) s: stale CI groups deleted, ci-keep kept, billing's dropped topic offsets removed while it kept running, the standalone group expired, the forgotten share group and the abandoned streams app's group deleted; every deletion is in the audit topic and restorable."
