#!/usr/bin/env bash
# devstack/kafka.sh: a single-node KRaft Kafka broker for groupwarden's tests, run from
# Maven Central jars (no Docker, no tarball).
#
#   devstack/kafka.sh up             start (or confirm) the broker; idempotent
#   devstack/kafka.sh down [--purge] stop it; --purge also deletes its data, TLS and password
#   devstack/kafka.sh purge          same as down --purge
#   devstack/kafka.sh status         exit 0 if running, 1 if not
#   devstack/kafka.sh verify         run the CLI tools against the running broker (both listeners)
#   KAFKA_NODES=3 devstack/kafka.sh up [NODE...] | kill NODE... | stop NODE... | status | down [--purge]
#                                    a 3-node KRaft cluster under $DEVSTACK_DIR/kafka-cluster
#
# Knobs (environment): KAFKA_VERSION, DEVSTACK_DIR, GROUPWARDEN_CACHE, KAFKA_PORT,
# KAFKA_CONTROLLER_PORT, KAFKA_SASL_PORT, KAFKA_PROXIED_PORT + KAFKA_PROXIED_ADVERTISED_PORT,
# KAFKA_OAUTH_PORT + KAFKA_OAUTH_JWKS_URL (+ KAFKA_OAUTH_AUDIENCE, KAFKA_OAUTH_ISSUER),
# KAFKA_START_TIMEOUT, KAFKA_STOP_TIMEOUT, KAFKA_HEAP_OPTS, KAFKA_JVM_OPTS, KAFKA_AUTHORIZER.
# See docs/devstack-kafka.md.
set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true # '&' in ${x//a/b} replacements stays literal

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
TEMPLATE_DIR=$SCRIPT_DIR/kafka
DEVSTACK_NAME=kafka
# shellcheck source=lib/common.sh
. "$SCRIPT_DIR/lib/common.sh" # DEVSTACK_DIR, GROUPWARDEN_CACHE, log/die, servers (pid + start time)

# Newest Apache Kafka 4.x whose kafka_2.13 AND kafka-tools (and their deps) resolve from Maven
# Central at the time of writing (4.4.0's kafka_2.13 is published but kafka-tools(-api) 4.4.0 is not).
DEFAULT_KAFKA_VERSION=4.3.1

KAFKA_VERSION=${KAFKA_VERSION:-$DEFAULT_KAFKA_VERSION}
KAFKA_PORT=${KAFKA_PORT:-29092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-29093}
KAFKA_SASL_PORT=${KAFKA_SASL_PORT:-29094}
# POD listener (devstack node): bound on loopback, advertised at the node's bridge address, which
# devstack/node.sh DNATs to it. On when the devstack has the node (devstack/components.sh), so every
# caller of kafka.sh agrees on the broker's configuration; KAFKA_POD_HOST=none turns it off.
# shellcheck source=components.sh
. "$SCRIPT_DIR/components.sh"
if [[ -z ${KAFKA_POD_HOST:-} ]]; then
    KAFKA_POD_HOST=none
    for _c in "${DEVSTACK_COMPONENTS[@]}"; do [[ $_c == node ]] && KAFKA_POD_HOST=$NODE_GATEWAY_IP; done
fi
[[ $KAFKA_POD_HOST == none ]] && KAFKA_POD_HOST=
KAFKA_POD_PORT=${KAFKA_POD_PORT:-$((KAFKA_PORT + 3))}
# PROXIED listener (fault-injection tests, docs/fault-injection.md): bound on loopback at
# KAFKA_PROXIED_PORT and advertised at KAFKA_PROXIED_ADVERTISED_PORT, where a Toxiproxy forwards to
# it; clients that bootstrap there keep talking through the proxy. Off unless both are set.
KAFKA_PROXIED_PORT=${KAFKA_PROXIED_PORT:-}
KAFKA_PROXIED_ADVERTISED_PORT=${KAFKA_PROXIED_ADVERTISED_PORT:-}
# OAUTH listener (private brokers of the OAUTHBEARER tests, docs/devstack-kafka.md): SASL_PLAINTEXT
# with OAUTHBEARER on loopback at KAFKA_OAUTH_PORT; the broker validates the clients' JWTs with the
# keys at KAFKA_OAUTH_JWKS_URL (a test's loopback server) and, when set, their audience and issuer.
# Off unless both the port and the JWKS URL are set.
KAFKA_OAUTH_PORT=${KAFKA_OAUTH_PORT:-}
KAFKA_OAUTH_JWKS_URL=${KAFKA_OAUTH_JWKS_URL:-}
KAFKA_OAUTH_AUDIENCE=${KAFKA_OAUTH_AUDIENCE:-}
KAFKA_OAUTH_ISSUER=${KAFKA_OAUTH_ISSUER:-}
KAFKA_START_TIMEOUT=${KAFKA_START_TIMEOUT:-90}
KAFKA_STOP_TIMEOUT=${KAFKA_STOP_TIMEOUT:-30}
KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}
KAFKA_JVM_OPTS=${KAFKA_JVM_OPTS:-}
SASL_USER=groupwarden
HOST=127.0.0.1
# Authorization (docs/devstack-kafka.md, "Authorizer and tenant"): KRaft's StandardAuthorizer with
# every principal of the listeners above as a super user (nothing changes for them), and a tenant
# principal limited by prefixed ACLs, without any right on __consumer_offsets (a managed service's
# tenant). KAFKA_AUTHORIZER=off: neither (the nodes of a KAFKA_NODES cluster).
KAFKA_AUTHORIZER=${KAFKA_AUTHORIZER:-on}
TENANT_USER=tenant
TENANT_PREFIX=tenant-             # its groups (Describe, Read, Delete) and topics (Describe, Read)
TENANT_READONLY_PREFIX=tenant-ro- # groups it sees but may not delete (a DENY Delete ACL)
# The operator's observation store as the tenant (--observations-topic): topics under this prefix,
# and the transactional id of each (kafka_observation_store.transactional_id)
TENANT_OBSERVATIONS_TOPIC=${TENANT_PREFIX}groupwarden-observations
# An audit topic as docs/audit-and-restore.md asks of every principal that cleans: Write (implies
# Describe) and no more, so the tests can try to forge the trail as a tenant (Read comes from its
# topic prefix above)
TENANT_AUDIT_TOPIC=${TENANT_PREFIX}groupwarden-audit

[[ $KAFKA_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+([.-][A-Za-z0-9.-]+)?$ ]] ||
    die "KAFKA_VERSION='$KAFKA_VERSION' is not a Kafka version (e.g. $DEFAULT_KAFKA_VERSION)"
for _p in KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_SASL_PORT KAFKA_POD_PORT KAFKA_START_TIMEOUT KAFKA_STOP_TIMEOUT; do
    [[ ${!_p} =~ ^[0-9]+$ ]] || die "$_p='${!_p}' is not a number"
done
for _p in KAFKA_PROXIED_PORT KAFKA_PROXIED_ADVERTISED_PORT KAFKA_OAUTH_PORT; do
    [[ -z ${!_p} || ${!_p} =~ ^[0-9]+$ ]] || die "$_p='${!_p}' is not a number"
done
[[ $KAFKA_AUTHORIZER == on || $KAFKA_AUTHORIZER == off ]] || die "KAFKA_AUTHORIZER='$KAFKA_AUTHORIZER' is not on or off"
[[ -z $KAFKA_OAUTH_JWKS_URL || $KAFKA_OAUTH_JWKS_URL =~ ^https?://[^[:space:],]+$ ]] ||
    die "KAFKA_OAUTH_JWKS_URL='$KAFKA_OAUTH_JWKS_URL' is not an http(s) URL"
oauth_listener() { [[ -n $KAFKA_OAUTH_PORT && -n $KAFKA_OAUTH_JWKS_URL ]]; }
KAFKA_MAJOR=${KAFKA_VERSION%%.*}

KDIR=$DEVSTACK_DIR/kafka
LOG_DIR=$DEVSTACK_DIR/logs
BIN_DIR=$DEVSTACK_DIR/bin
ENV_FILE=$DEVSTACK_DIR/kafka.env
PID_FILE=$KDIR/kafka.pid
RUN_INFO=$KDIR/kafka.running # sourceable facts about the running broker
PROPS=$KDIR/server.properties
DATA_DIR=$KDIR/data-$KAFKA_VERSION
TLS_DIR=$KDIR/tls
PW_FILE=$KDIR/sasl-password
SASL_CLIENT_PROPS=$KDIR/sasl-client.properties
TENANT_PW_FILE=$KDIR/tenant-password
TENANT_CLIENT_PROPS=$KDIR/tenant-client.properties
CACHE_DIR=$GROUPWARDEN_CACHE/kafka-$KAFKA_VERSION
LIBS=$CACHE_DIR/libs
STREAMS_LIBS=$CACHE_DIR/streams-libs # Kafka Streams + examples (4.1+): a real streams app for tests
SERVER_LOG=$LOG_DIR/kafka-server.log # log4j output
STDOUT_LOG=$LOG_DIR/kafka.log        # JVM stdout/stderr (+ log4j WARN/ERROR)

# ---------------------------------------------------------------------------------------------
# helpers

render() { # render TEMPLATE OUT KEY=VALUE...: replace @KEY@ (atomic write)
    local tpl=$1 out=$2 kv content
    shift 2
    content=$(<"$tpl")
    for kv in "$@"; do content=${content//@${kv%%=*}@/${kv#*=}}; done
    write_file "$out" "$content"
}

find_java() {
    if [[ -n ${JAVA_HOME:-} && -x ${JAVA_HOME}/bin/java ]]; then
        JAVA=$JAVA_HOME/bin/java
    elif JAVA=$(command -v java 2>/dev/null); then
        :
    else
        die "java not found: install a JDK 17+"
    fi
    local v major
    v=$("$JAVA" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}') || true
    major=${v%%.*}
    [[ $major == 1 ]] && major=$(cut -d. -f2 <<<"$v")
    [[ $major =~ ^[0-9]+$ ]] || die "java at $JAVA does not run (java -version failed): install a JDK 17+"
    ((major >= 17)) || die "java $v at $JAVA is too old: install a JDK 17+"
}

logging_flavor() { # log4j2 (Kafka 4.x) or log4j1 (reload4j, Kafka 3.x)
    if compgen -G "$LIBS/log4j-core-*.jar" >/dev/null; then echo log4j2; else echo log4j1; fi
}

tool_log_opts() {
    if [[ $(logging_flavor) == log4j2 ]]; then
        echo "-Dlog4j2.configurationFile=$CACHE_DIR/config/log4j2-tools.properties"
    else
        echo "-Dlog4j.configuration=file:$CACHE_DIR/config/log4j-tools.properties"
    fi
}

run_class() { # run a Kafka main class with tool logging (stdout clean)
    local cls=$1
    shift
    "$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dkafka.tools.log.level=WARN \
        "$(tool_log_opts)" -cp "$LIBS/*" "$cls" "$@"
}

# ---------------------------------------------------------------------------------------------
# artifacts (cached per version; a warm cache does no Maven work)

ensure_libs() {
    if [[ ! -f $CACHE_DIR/.complete ]]; then
        mkdir -p "$GROUPWARDEN_CACHE"
        exec 8>>"$CACHE_DIR.lock"
        flock -w 900 8 || die "timed out waiting for another download of Kafka $KAFKA_VERSION ($CACHE_DIR.lock)"
        [[ -f $CACHE_DIR/.complete ]] || resolve_libs
        exec 8>&-
    fi
    # tool logging configs live in the cache (outside DEVSTACK_DIR) so wrappers survive a purge
    mkdir -p "$CACHE_DIR/config"
    local f
    for f in log4j2-tools.properties log4j-tools.properties; do
        write_file "$CACHE_DIR/config/$f" "$(<"$TEMPLATE_DIR/$f")"
    done
    [[ -s $CACHE_DIR/classes.txt ]] || index_classes
    ensure_streams_libs
}

# Kafka Streams with group.protocol=streams (KIP-1071) exists from 4.1: older versions get none.
# Optional: a failed download only warns (the broker does not need it; the streams tests do).
ensure_streams_libs() {
    [[ -f $STREAMS_LIBS/.complete ]] && return 0
    local major=${KAFKA_VERSION%%.*} rest=${KAFKA_VERSION#*.}
    local minor=${rest%%.*}
    ((major > 4 || (major == 4 && minor >= 1))) || return 0
    local work mlog=$CACHE_DIR/maven-streams.log
    work=$(mktemp -d "$CACHE_DIR/.resolve-streams.XXXXXX")
    render "$TEMPLATE_DIR/streams-pom.xml.in" "$work/pom.xml" KAFKA_VERSION="$KAFKA_VERSION"
    log "downloading Kafka Streams $KAFKA_VERSION (examples) into $STREAMS_LIBS (log: $mlog)"
    if mvn -B -ntp -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$work/libs" >"$mlog" 2>&1 &&
        [[ -f $work/libs/kafka-streams-examples-$KAFKA_VERSION.jar ]]; then
        rm -rf "$STREAMS_LIBS"
        mv "$work/libs" "$STREAMS_LIBS"
        date -u +%Y-%m-%dT%H:%M:%SZ >"$STREAMS_LIBS/.complete"
    else
        log "warning: could not resolve kafka-streams-examples:$KAFKA_VERSION (see $mlog); streams tests need it"
    fi
    rm -rf "$work"
}

resolve_libs() {
    command -v mvn >/dev/null 2>&1 ||
        die "mvn not found: install Maven 3.6+ (needed once to download Kafka $KAFKA_VERSION into $CACHE_DIR)"
    mkdir -p "$CACHE_DIR"
    local work mlog=$CACHE_DIR/maven.log lv
    work=$(mktemp -d "$CACHE_DIR/.resolve.XXXXXX")
    render "$TEMPLATE_DIR/pom.xml.in" "$work/pom.xml" KAFKA_VERSION="$KAFKA_VERSION"
    log "downloading Kafka $KAFKA_VERSION from Maven Central into $LIBS (log: $mlog)"
    if ! mvn -B -ntp -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$work/libs" >"$mlog" 2>&1; then
        rm -rf "$work"
        die "maven could not resolve org.apache.kafka:kafka_2.13/kafka-tools:$KAFKA_VERSION; see $mlog"
    fi
    # logging binding: 4.x ships log4j2 core but no slf4j 1.x binding; 3.x brings slf4j-reload4j
    if compgen -G "$work/libs/log4j-core-*.jar" >/dev/null; then
        if ! compgen -G "$work/libs/log4j-slf4j-impl-*.jar" >/dev/null; then
            lv=$(basename "$(compgen -G "$work/libs/log4j-core-*.jar" | head -n1)" .jar)
            lv=${lv#log4j-core-}
            mvn -B -ntp -f "$work/pom.xml" dependency:copy \
                -Dartifact="org.apache.logging.log4j:log4j-slf4j-impl:$lv" \
                -DoutputDirectory="$work/libs" >>"$mlog" 2>&1 || {
                rm -rf "$work"
                die "maven could not resolve log4j-slf4j-impl:$lv; see $mlog"
            }
        fi
    elif ! compgen -G "$work/libs/slf4j-reload4j-*.jar" >/dev/null; then
        local a
        for a in org.slf4j:slf4j-reload4j:1.7.36 ch.qos.reload4j:reload4j:1.2.25; do
            mvn -B -ntp -f "$work/pom.xml" dependency:copy -Dartifact="$a" \
                -DoutputDirectory="$work/libs" >>"$mlog" 2>&1 || {
                rm -rf "$work"
                die "maven could not resolve $a; see $mlog"
            }
        done
    fi
    [[ -f $work/libs/kafka_2.13-$KAFKA_VERSION.jar && -f $work/libs/kafka-tools-$KAFKA_VERSION.jar ]] || {
        rm -rf "$work"
        die "maven finished but kafka jars for $KAFKA_VERSION are missing; see $mlog"
    }
    rm -rf "$LIBS" "$CACHE_DIR/classes.txt"
    mv "$work/libs" "$LIBS"
    mv "$work/pom.xml" "$CACHE_DIR/pom.xml"
    rm -rf "$work"
    index_classes
    date -u +%Y-%m-%dT%H:%M:%SZ >"$CACHE_DIR/.complete"
}

index_classes() { # list main-ish classes of the kafka jars, to pick tool classes per version
    local j lister
    if command -v unzip >/dev/null 2>&1; then
        lister=(unzip -Z1)
    elif [[ -x $(dirname "$(readlink -f "$JAVA")")/jar ]]; then
        lister=("$(dirname "$(readlink -f "$JAVA")")/jar" tf)
    else
        die "need unzip (or the JDK's jar tool) to inspect $LIBS"
    fi
    for j in "$LIBS"/kafka*.jar; do "${lister[@]}" "$j"; done |
        grep -E '\.class$' | grep -v '\$' | sed 's/\.class$//; s#/#.#g' | sort -u >"$CACHE_DIR/classes.txt.tmp"
    mv -f "$CACHE_DIR/classes.txt.tmp" "$CACHE_DIR/classes.txt"
}

has_class() { grep -qxF "$1" "$CACHE_DIR/classes.txt"; }

# ---------------------------------------------------------------------------------------------
# tool wrappers: "<name> <required|optional> <class candidates, 4.x first>..."
TOOLS=(
    "kafka-topics required org.apache.kafka.tools.TopicCommand kafka.admin.TopicCommand"
    "kafka-consumer-groups required org.apache.kafka.tools.consumer.group.ConsumerGroupCommand kafka.admin.ConsumerGroupCommand"
    "kafka-broker-api-versions required org.apache.kafka.tools.BrokerApiVersionsCommand kafka.admin.BrokerApiVersionsCommand"
    "kafka-configs required org.apache.kafka.tools.ConfigCommand kafka.admin.ConfigCommand"
    "kafka-features required org.apache.kafka.tools.FeatureCommand kafka.admin.FeatureCommand"
    "kafka-console-producer required org.apache.kafka.tools.ConsoleProducer kafka.tools.ConsoleProducer"
    "kafka-console-consumer required org.apache.kafka.tools.consumer.ConsoleConsumer kafka.tools.ConsoleConsumer"
    "kafka-get-offsets optional org.apache.kafka.tools.GetOffsetShell kafka.tools.GetOffsetShell"
    "kafka-delete-records optional org.apache.kafka.tools.DeleteRecordsCommand kafka.admin.DeleteRecordsCommand"
    "kafka-metadata-quorum optional org.apache.kafka.tools.MetadataQuorumCommand"
    "kafka-groups optional org.apache.kafka.tools.GroupsCommand"
    "kafka-share-groups optional org.apache.kafka.tools.consumer.group.ShareGroupCommand"
    "kafka-streams-groups optional org.apache.kafka.tools.streams.StreamsGroupCommand"
    "kafka-console-share-consumer optional org.apache.kafka.tools.consumer.ConsoleShareConsumer"
    "kafka-storage optional kafka.tools.StorageTool"
    "kafka-acls optional org.apache.kafka.tools.AclCommand kafka.admin.AclCommand"
)

write_wrappers() {
    mkdir -p "$BIN_DIR"
    local spec name need cls c logopt header
    logopt=$(tool_log_opts)
    header="#!/usr/bin/env bash
# Generated by devstack/kafka.sh for Kafka $KAFKA_VERSION; regenerated on every 'up'.
# KAFKA_TOOLS_JVM_OPTS / KAFKA_TOOLS_LOG_LEVEL (default WARN, to stderr) may be set."
    local run
    # The tools share one dynamic CDS archive of the classes they load (ensure_tools_cds): a tool's
    # JVM starts in about half the time and CPU (measured 0.55 -> 0.3 s for a --list), and the test
    # suite starts hundreds of them as its oracle. -Xlog:disable: a missing or stale archive (another
    # JDK) is ignored silently instead of printing a warning into the tool's output.
    run="exec $(printf %q "$JAVA") \${KAFKA_TOOLS_JVM_OPTS:--Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:SharedArchiveFile=$(printf %q "$TOOLS_CDS") -Xlog:disable} \\
    -Dkafka.tools.log.level=\"\${KAFKA_TOOLS_LOG_LEVEL:-WARN}\" $(printf %q "$logopt") \\
    -cp $(printf %q "$LIBS/*")"
    for spec in "${TOOLS[@]}"; do
        read -r name need cls <<<"$spec"
        local found=
        for c in $cls; do
            if has_class "$c"; then found=$c; break; fi
        done
        if [[ -z $found ]]; then
            [[ $need == required ]] && die "no class for $name in Kafka $KAFKA_VERSION (tried: $cls)"
            rm -f "$BIN_DIR/$name"
            continue
        fi
        write_file "$BIN_DIR/$name" "$header
$run $found \"\$@\""
        chmod 755 "$BIN_DIR/$name"
    done
    write_file "$BIN_DIR/kafka-run-class" "$header
# usage: kafka-run-class <main class> [args...]
$run \"\$@\""
    chmod 755 "$BIN_DIR/kafka-run-class"
}

# ensure_tools_cds: creates the tools' class-data archive once per Kafka version and JDK, from a
# real `kafka-consumer-groups --list` against the running broker (the classes an admin tool loads).
ensure_tools_cds() {
    [[ -s $TOOLS_CDS ]] && return 0
    local tmp="$TOOLS_CDS.tmp.$$"
    if KAFKA_TOOLS_JVM_OPTS="-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit=$tmp -Xlog:disable" \
        "$BIN_DIR/kafka-consumer-groups" --bootstrap-server "$HOST:$KAFKA_PORT" --list >/dev/null 2>&1 && [[ -s $tmp ]]; then
        mv -f "$tmp" "$TOOLS_CDS"
    else
        rm -f "$tmp"  # the tools run without it, as before
    fi
}

# ---------------------------------------------------------------------------------------------
# config, TLS, credentials

ensure_password() { # ensure_password FILE VAR: a random password kept in FILE (mode 600), into VAR
    local file=$1 var=$2 value
    if [[ ! -s $file ]]; then
        (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$file.tmp.$$")
        mv -f "$file.tmp.$$" "$file"
    fi
    value=$(<"$file")
    [[ $value =~ ^[A-Za-z0-9._-]+$ ]] || die "$file must hold a password of [A-Za-z0-9._-]; delete it to regenerate"
    printf -v "$var" '%s' "$value"
}

ensure_tls() {
    [[ -s $TLS_DIR/ca.pem && -s $TLS_DIR/server.p12 && -s $TLS_DIR/keystore-password ]] && {
        KEYSTORE_PASSWORD=$(<"$TLS_DIR/keystore-password")
        return 0
    }
    command -v openssl >/dev/null 2>&1 || die "openssl not found: needed once to create the devstack TLS CA"
    log "creating a self-signed CA and server certificate in $TLS_DIR"
    local t
    t=$(mktemp -d "$KDIR/.tls.XXXXXX")
    (
        set -e
        umask 077
        cd "$t"
        od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >keystore-password
        openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -keyout ca.key -out ca.pem \
            -subj "/CN=groupwarden devstack CA" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
        openssl req -newkey rsa:2048 -nodes -sha256 -keyout server.key -out server.csr -subj "/CN=localhost"
        printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" >server.ext
        openssl x509 -req -sha256 -days 3650 -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -extfile server.ext -out server.pem
        openssl pkcs12 -export -name kafka -in server.pem -inkey server.key -certfile ca.pem \
            -out server.p12 -passout "pass:$(<keystore-password)"
        rm -f server.csr server.ext ca.srl
        chmod 644 ca.pem server.pem
    ) >"$LOG_DIR/kafka-tls.log" 2>&1 || { rm -rf "$t"; die "creating TLS material failed; see $LOG_DIR/kafka-tls.log"; }
    rm -rf "$TLS_DIR"
    mv "$t" "$TLS_DIR"
    chmod 755 "$TLS_DIR"
    KEYSTORE_PASSWORD=$(<"$TLS_DIR/keystore-password")
}

server_properties() {
    local listeners="PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT,SASL_SSL://$HOST:$KAFKA_SASL_PORT"
    local advertised="PLAINTEXT://$HOST:$KAFKA_PORT,SASL_SSL://$HOST:$KAFKA_SASL_PORT"
    local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL"
    if [[ -n $KAFKA_POD_HOST ]]; then
        listeners+=",POD://$HOST:$KAFKA_POD_PORT"
        advertised+=",POD://$KAFKA_POD_HOST:$KAFKA_POD_PORT"
        protocols+=",POD:PLAINTEXT"
    fi
    if [[ -n $KAFKA_PROXIED_PORT && -n $KAFKA_PROXIED_ADVERTISED_PORT ]]; then
        listeners+=",PROXIED://$HOST:$KAFKA_PROXIED_PORT"
        advertised+=",PROXIED://$HOST:$KAFKA_PROXIED_ADVERTISED_PORT"
        protocols+=",PROXIED:PLAINTEXT"
    fi
    if oauth_listener; then
        listeners+=",OAUTH://$HOST:$KAFKA_OAUTH_PORT"
        advertised+=",OAUTH://$HOST:$KAFKA_OAUTH_PORT"
        protocols+=",OAUTH:SASL_PLAINTEXT"
    fi
    # One node of a KAFKA_NODES cluster (cmd_cluster): its id, the quorum of all nodes, and
    # internal topics replicated across them. A single node renders exactly as it always did (a
    # changed file would restart the shared broker on its next 'up').
    local node_id=${KAFKA_NODE_ID:-1} voters=${KAFKA_QUORUM_VOTERS:-1@$HOST:$KAFKA_CONTROLLER_PORT}
    local rf=${KAFKA_REPLICATION:-1} offsets_partitions=${KAFKA_OFFSETS_PARTITIONS:-3} min_isr=1
    local shape="Single-node KRaft (combined broker+controller), loopback only."
    [[ $node_id =~ ^[0-9]+$ && $rf =~ ^[0-9]+$ && $offsets_partitions =~ ^[0-9]+$ ]] ||
        die "KAFKA_NODE_ID, KAFKA_REPLICATION and KAFKA_OFFSETS_PARTITIONS must be numbers"
    local internal_comment="# internal topics: single replica; __consumer_offsets keeps 3 partitions so that
# coordinator batching (several coordinators/partitions) is meaningful in tests"
    if ((rf > 1)); then
        min_isr=2
        internal_comment="# internal topics: $rf replicas, min ISR 2 (one node may be down); __consumer_offsets has
# $offsets_partitions partitions, so every node coordinates some groups"
        shape="Node $node_id of a KRaft cluster (each node broker+controller), loopback only."
    fi
    cat <<EOF
# Generated by devstack/kafka.sh for Kafka $KAFKA_VERSION; rewritten on every 'up'.
# $shape
process.roles=broker,controller
node.id=$node_id
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
# POD (only with the devstack node): loopback listener advertised at the node's bridge address
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$protocols
inter.broker.listener.name=PLAINTEXT
log.dirs=$DATA_DIR

num.network.threads=2
num.io.threads=4
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$min_isr
auto.create.topics.enable=false
num.recovery.threads.per.data.dir=1

$internal_comment
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=$offsets_partitions
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$min_isr
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$min_isr
# offsets.retention.minutes / offsets.retention.check.interval.ms: broker defaults on purpose

# groups: no initial rebalance delay; faster KIP-848 heartbeats/session than the defaults
group.initial.rebalance.delay.ms=0
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=${KAFKA_CONSUMER_SESSION_TIMEOUT_MS:-15000}

# SASL_SSL listener for auth tests$([[ $KAFKA_AUTHORIZER == on ]] || echo " (no authorizer: authorization is OFF)")
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$SASL_PASSWORD"$(plain_tenant_user);
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$TLS_DIR/server.p12
listener.name.sasl_ssl.ssl.keystore.password=$KEYSTORE_PASSWORD
listener.name.sasl_ssl.ssl.key.password=$KEYSTORE_PASSWORD
listener.name.sasl_ssl.ssl.client.auth=none
EOF
    oauth_listener_properties
    [[ $KAFKA_AUTHORIZER == on ]] || return 0
    cat <<EOF

# Authorization: every principal of the listeners above is a super user, so nothing changes for
# them (PLAINTEXT, CONTROLLER, POD and PROXIED clients are User:ANONYMOUS; SASL_SSL's is User:$SASL_USER).
# User:$TENANT_USER (SASL_SSL) has only the prefixed ACLs that 'up' creates (ensure_tenant_acls).
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:$SASL_USER
EOF
}

oauth_listener_properties() { # the OAUTH listener's block (KAFKA_OAUTH_*), nothing when it is off
    oauth_listener || return 0
    local prefix=listener.name.oauth.oauthbearer
    cat <<EOF

# OAUTH listener for OAUTHBEARER tests: JWTs validated against the JWKS at KAFKA_OAUTH_JWKS_URL
# (the JVM may fetch it: org.apache.kafka.sasl.oauthbearer.allowed.urls, see broker_cmd)
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
$prefix.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
$prefix.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
$prefix.sasl.oauthbearer.jwks.endpoint.url=$KAFKA_OAUTH_JWKS_URL
EOF
    [[ -z $KAFKA_OAUTH_AUDIENCE ]] || echo "$prefix.sasl.oauthbearer.expected.audience=$KAFKA_OAUTH_AUDIENCE"
    [[ -z $KAFKA_OAUTH_ISSUER ]] || echo "$prefix.sasl.oauthbearer.expected.issuer=$KAFKA_OAUTH_ISSUER"
}

plain_tenant_user() { # the tenant's entry in the PLAIN login module (none without the authorizer)
    [[ $KAFKA_AUTHORIZER == on ]] || return 0
    printf ' user_%s="%s"' "$TENANT_USER" "$TENANT_PASSWORD"
}

write_configs() {
    mkdir -p "$KDIR" "$LOG_DIR"
    chmod 700 "$KDIR"
    ensure_password "$PW_FILE" SASL_PASSWORD
    TENANT_PASSWORD=
    if [[ $KAFKA_AUTHORIZER == on ]]; then
        ensure_password "$TENANT_PW_FILE" TENANT_PASSWORD
    else
        rm -f "$TENANT_PW_FILE" "$TENANT_CLIENT_PROPS"
    fi
    ensure_tls
    (umask 077 && write_file "$PROPS" "$(server_properties)")
    (umask 077 && write_file "$SASL_CLIENT_PROPS" "# Java client/tool config for the SASL_SSL listener (use with --command-config)
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$SASL_USER\" password=\"$SASL_PASSWORD\";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem")
    [[ $KAFKA_AUTHORIZER == off ]] || (umask 077 && write_file "$TENANT_CLIENT_PROPS" "# Java client/tool config of the tenant principal on the SASL_SSL listener (--command-config)
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$TENANT_USER\" password=\"$TENANT_PASSWORD\";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem")
    if [[ $(logging_flavor) == log4j2 ]]; then
        render "$TEMPLATE_DIR/log4j2-broker.properties.in" "$KDIR/log4j2.properties" LOG_DIR="$LOG_DIR"
    else
        render "$TEMPLATE_DIR/log4j-broker.properties.in" "$KDIR/log4j.properties" LOG_DIR="$LOG_DIR"
    fi
}

write_env() {
    write_file "$ENV_FILE" "# Generated by devstack/kafka.sh; source it.
export KAFKA_BOOTSTRAP_SERVERS=$HOST:$KAFKA_PORT
export KAFKA_VERSION=$KAFKA_VERSION
export GROUPWARDEN_KAFKA_SASL_BOOTSTRAP=$HOST:$KAFKA_SASL_PORT
export GROUPWARDEN_KAFKA_SASL_USERNAME=$SASL_USER
export GROUPWARDEN_KAFKA_SASL_PASSWORD_FILE=$(printf %q "$PW_FILE")
export GROUPWARDEN_KAFKA_SASL_MECHANISM=SCRAM-SHA-512
export GROUPWARDEN_KAFKA_CA_FILE=$(printf %q "$TLS_DIR/ca.pem")
export GROUPWARDEN_KAFKA_SASL_CLIENT_CONFIG=$(printf %q "$SASL_CLIENT_PROPS")
export GROUPWARDEN_KAFKA_LIBS=$(printf %q "$LIBS")
export GROUPWARDEN_KAFKA_STREAMS_LIBS=$(printf %q "$STREAMS_LIBS")$(tenant_env)"
}

tenant_env() { # the tenant's variables for kafka.env (none without the authorizer)
    [[ $KAFKA_AUTHORIZER == on ]] || return 0
    printf '\nexport %s=%s' \
        GROUPWARDEN_KAFKA_TENANT_USERNAME "$TENANT_USER" \
        GROUPWARDEN_KAFKA_TENANT_PASSWORD_FILE "$(printf %q "$TENANT_PW_FILE")" \
        GROUPWARDEN_KAFKA_TENANT_CLIENT_CONFIG "$(printf %q "$TENANT_CLIENT_PROPS")" \
        GROUPWARDEN_KAFKA_TENANT_PREFIX "$TENANT_PREFIX" \
        GROUPWARDEN_KAFKA_TENANT_READONLY_PREFIX "$TENANT_READONLY_PREFIX" \
        GROUPWARDEN_KAFKA_TENANT_OBSERVATIONS_TOPIC "$TENANT_OBSERVATIONS_TOPIC" \
        GROUPWARDEN_KAFKA_TENANT_AUDIT_TOPIC "$TENANT_AUDIT_TOPIC"
}

format_storage() {
    [[ -f $DATA_DIR/meta.properties ]] && return 0
    rm -rf "$DATA_DIR"
    local cid=${KAFKA_CLUSTER_ID:-} flog=$LOG_DIR/kafka-format.log
    # The nodes of a cluster are formatted with one id (cmd_cluster gives it); a single node makes its own.
    if [[ -z $cid ]]; then
        cid=$(run_class kafka.tools.StorageTool random-uuid 2>>"$flog") ||
            die "kafka-storage random-uuid failed; see $flog"
    fi
    local args=(format -t "$cid" -c "$PROPS" --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$SASL_PASSWORD]")
    [[ $KAFKA_AUTHORIZER == off ]] || args+=(--add-scram "SCRAM-SHA-512=[name=$TENANT_USER,password=$TENANT_PASSWORD]")
    log "formatting $DATA_DIR (cluster id $cid)"
    run_class kafka.tools.StorageTool "${args[@]}" >>"$flog" 2>&1 ||
        die "formatting $DATA_DIR failed; see $flog"
    scram_hash >"$DATA_DIR.scram"
}

scram_hash() { # of the passwords formatted or added (without the authorizer: the groupwarden user's alone)
    if [[ $KAFKA_AUTHORIZER == on ]]; then
        printf '%s %s' "$SASL_PASSWORD" "$TENANT_PASSWORD"
    else
        printf '%s' "$SASL_PASSWORD"
    fi | sha256sum | cut -d' ' -f1
}

# ---------------------------------------------------------------------------------------------
# lifecycle

show_failure() {
    log "Kafka $KAFKA_VERSION: $*"
    local f
    for f in "$SERVER_LOG" "$STDOUT_LOG"; do
        [[ -s $f ]] || continue
        echo "---- last lines of $f ----" >&2
        tail -n 30 "$f" >&2
    done
    # A port taken between our check and the JVM's bind: say by what (a client's local port?).
    if grep -qs 'Address already in use' "$SERVER_LOG" "$STDOUT_LOG" && command -v ss >/dev/null; then
        echo "---- sockets on ports $KAFKA_PORT $KAFKA_CONTROLLER_PORT $KAFKA_SASL_PORT ----" >&2
        ss -tanp "( sport = :$KAFKA_PORT or sport = :$KAFKA_CONTROLLER_PORT or sport = :$KAFKA_SASL_PORT )" >&2 || true
    fi
}

# The broker (a spec for devstack/lib/common.sh's start_server). It is ours if its command line
# holds kafka.Kafka and our properties file, and current if that file has not changed since its
# start; heap or JVM options alone do not restart it. down and status need only IDENT (no java).
broker_cmd() {
    IDENT="kafka.Kafka $PROPS" MATCH="kafka.Kafka $PROPS" CONF=$PROPS STOP_TIMEOUT=$KAFKA_STOP_TIMEOUT LABEL="kafka broker"
    CLAIMS=("port-$KAFKA_PORT" "port-$KAFKA_CONTROLLER_PORT" "port-$KAFKA_SASL_PORT")
    [[ -z $KAFKA_POD_HOST ]] || CLAIMS+=("port-$KAFKA_POD_PORT")
    local oauth_opts=()
    if oauth_listener; then
        CLAIMS+=("port-$KAFKA_OAUTH_PORT")
        # Kafka 4 fetches no OAuth URL that this system property does not list.
        oauth_opts=("-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$KAFKA_OAUTH_JWKS_URL")
    fi
    KNOBS="KAFKA_PORT/KAFKA_CONTROLLER_PORT/KAFKA_SASL_PORT/KAFKA_POD_PORT"
    local log_opt="-Dlog4j.configuration=file:$KDIR/log4j.properties"
    [[ $(logging_flavor) != log4j2 ]] || log_opt="-Dlog4j2.configurationFile=$KDIR/log4j2.properties"
    # shellcheck disable=SC2206 # heap/jvm opts are word lists
    CMD=("${JAVA:-java}" $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20
        -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true -Dkafka.logs.dir="$LOG_DIR"
        "$log_opt" "${oauth_opts[@]}" $KAFKA_JVM_OPTS -cp "$LIBS/*" kafka.Kafka "$PROPS")
}

broker_started() { # the broker answers on its listener and has finished startup
    if ! proc_live_pid "$PID_FILE" >/dev/null; then
        rm -f "$PID_FILE" "$RUN_INFO"
        show_failure "broker process exited during startup"
        exit 1
    fi
    port_open "$KAFKA_PORT" && grep -q 'Kafka Server started' "$SERVER_LOG" 2>/dev/null
}

wait_ready() {
    if ! wait_until "$KAFKA_START_TIMEOUT" broker_started; then
        show_failure "broker not ready after ${KAFKA_START_TIMEOUT}s; stopping it"
        stop_broker
        exit 1
    fi
    # a real admin round trip through the CLI, also proves the tool classpath works
    local out
    if ! out=$("$BIN_DIR/kafka-features" --bootstrap-server "$HOST:$KAFKA_PORT" describe 2>&1); then
        show_failure "broker started but 'kafka-features describe' failed: $out"
        exit 1
    fi
    if ((KAFKA_MAJOR >= 4)) && ! grep -Eq 'Feature: group.version[[:space:]].*FinalizedVersionLevel: [1-9]' <<<"$out"; then
        log "group.version not finalized (KIP-848 off); enabling it"
        "$BIN_DIR/kafka-features" --bootstrap-server "$HOST:$KAFKA_PORT" upgrade --feature group.version=1 >&2 ||
            die "could not enable group.version=1 (KIP-848 consumer groups)"
    fi
}

ensure_scram_user() { # formatted data has the users; re-add only if a password file changed since
    [[ $(cat "$DATA_DIR.scram" 2>/dev/null) == "$(scram_hash)" ]] && return 0
    local users=("$SASL_USER=$SASL_PASSWORD") user
    [[ $KAFKA_AUTHORIZER == off ]] || users+=("$TENANT_USER=$TENANT_PASSWORD")
    for user in "${users[@]}"; do
        log "updating SCRAM credentials of '${user%%=*}'"
        "$BIN_DIR/kafka-configs" --bootstrap-server "$HOST:$KAFKA_PORT" --alter --entity-type users \
            --entity-name "${user%%=*}" --add-config "SCRAM-SHA-512=[password=${user#*=}]" >/dev/null ||
            die "could not set SCRAM credentials for ${user%%=*}"
    done
    scram_hash >"$DATA_DIR.scram"
}

# The tenant's ACLs, all prefixed (kept in the metadata log; re-added only when this list changes):
# its groups and topics, and a DENY that leaves it groups it sees but may not delete. No ACL names
# __consumer_offsets, so the tenant cannot read it, and ListGroups shows it only the groups it may
# Describe. The last two are what the observation store needs (docs/operator.md; Write implies
# Describe): Create, Write and Read on its topic, Write on its producer's transactional id. The
# last one is the audit topic's documented grant: Write.
TENANT_ACLS=(
    "--allow-principal User:$TENANT_USER --operation Describe --operation Read --operation Delete --group $TENANT_PREFIX"
    "--allow-principal User:$TENANT_USER --operation Describe --operation Read --topic $TENANT_PREFIX"
    "--deny-principal User:$TENANT_USER --operation Delete --group $TENANT_READONLY_PREFIX"
    "--allow-principal User:$TENANT_USER --operation Create --operation Write --operation Read --topic $TENANT_OBSERVATIONS_TOPIC"
    "--allow-principal User:$TENANT_USER --operation Write --transactional-id groupwarden-observations:$TENANT_OBSERVATIONS_TOPIC"
    "--allow-principal User:$TENANT_USER --operation Write --topic $TENANT_AUDIT_TOPIC"
)

ensure_tenant_acls() {
    [[ $KAFKA_AUTHORIZER == on ]] || return 0
    local want acl pids=() pid failed=0
    want=$(printf '%s\n' "${TENANT_ACLS[@]}" | sha256sum | cut -d' ' -f1)
    [[ $(cat "$DATA_DIR.acls" 2>/dev/null) == "$want" ]] && return 0
    [[ -x $BIN_DIR/kafka-acls ]] || die "no kafka-acls class in Kafka $KAFKA_VERSION: run with KAFKA_AUTHORIZER=off"
    log "adding the ACLs of User:$TENANT_USER (prefix $TENANT_PREFIX)"
    for acl in "${TENANT_ACLS[@]}"; do # side by side: one JVM each; adding an existing ACL is a no-op
        # shellcheck disable=SC2086 # an ACL spec is a word list
        "$BIN_DIR/kafka-acls" --bootstrap-server "$HOST:$KAFKA_PORT" --add --force \
            --resource-pattern-type prefixed $acl >>"$LOG_DIR/kafka-acls.log" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    ((failed == 0)) || die "could not add the ACLs of User:$TENANT_USER; see $LOG_DIR/kafka-acls.log"
    echo "$want" >"$DATA_DIR.acls"
}

stop_broker() {
    server_stop "$PID_FILE" broker_cmd
    rm -f "$PID_FILE" "$RUN_INFO"
}

start_broker() {
    format_storage
    local f
    for f in "$SERVER_LOG" "$STDOUT_LOG"; do [[ -f $f ]] && mv -f "$f" "$f.prev"; done
    log "starting Kafka $KAFKA_VERSION on $HOST:$KAFKA_PORT (SASL_SSL $HOST:$KAFKA_SASL_PORT)"
    # Machine-wide port claims kept by the broker for its lifetime; "pid starttime" recorded once
    # the JVM runs (never the pid of a wrapper shell, never mid-exec). Its working directory is
    # KDIR (where a JVM crash file lands).
    (cd "$KDIR" && start_server "$PID_FILE" "$STDOUT_LOG" broker_cmd) || { show_failure "broker did not start"; exit 1; }
    local pid
    read -r pid _ <"$PID_FILE"
    printf 'RUN_VERSION=%q\nRUN_PORT=%q\nRUN_SASL_PORT=%q\n' "$KAFKA_VERSION" "$KAFKA_PORT" "$KAFKA_SASL_PORT" >"$RUN_INFO"
    wait_ready
    ensure_scram_user
    ensure_tenant_acls
    ensure_tools_cds
    log "ready: $HOST:$KAFKA_PORT (pid $pid, ${SECONDS}s)"
}

cmd_up() {
    find_java
    TOOLS_CDS=$CACHE_DIR/tools-$("$JAVA" -version 2>&1 | sha256sum | cut -c1-12).jsa
    mkdir -p "$KDIR" "$LOG_DIR"
    exec 9>>"$KDIR/.lock"
    flock -w $((KAFKA_START_TIMEOUT + KAFKA_STOP_TIMEOUT + 900)) 9 || die "timed out waiting for $KDIR/.lock"
    ensure_libs
    write_configs
    write_wrappers
    write_env
    local pid
    if pid=$(server_pid "$PID_FILE" broker_cmd); then
        if server_running "$PID_FILE" broker_cmd; then
            if port_open "$KAFKA_PORT"; then
                ensure_tenant_acls # a changed list is added without a restart
                ensure_tools_cds
                log "already running: $HOST:$KAFKA_PORT (pid $pid, Kafka $KAFKA_VERSION)"
                return 0
            fi
            log "pid $pid is alive but $HOST:$KAFKA_PORT does not answer yet; waiting"
            wait_ready
            ensure_tenant_acls
            return 0
        fi
        log "configuration or version changed (now Kafka $KAFKA_VERSION); restarting pid $pid"
        stop_broker
    fi
    rm -f "$PID_FILE" "$RUN_INFO"
    start_broker
}

cmd_down() {
    local purge=${1:-}
    local pid
    if [[ -d $KDIR ]]; then
        exec 9>>"$KDIR/.lock"
        flock -w $((KAFKA_STOP_TIMEOUT + 120)) 9 || die "timed out waiting for $KDIR/.lock"
    fi
    if pid=$(server_pid "$PID_FILE" broker_cmd); then
        log "stopping pid $pid"
        stop_broker
        log "stopped"
    else
        rm -f "$PID_FILE" "$RUN_INFO"
        log "not running"
    fi
    if [[ $purge == purge ]]; then
        [[ -n $KDIR && $KDIR == */kafka ]] || die "refusing to purge '$KDIR'"
        rm -rf "$KDIR" "$ENV_FILE" "$LOG_DIR"/kafka*.log "$LOG_DIR"/kafka*.log.*
        log "purged $KDIR (cache $GROUPWARDEN_CACHE kept)"
    fi
}

cmd_status() {
    local pid RUN_VERSION=unknown RUN_PORT=$KAFKA_PORT RUN_SASL_PORT=$KAFKA_SASL_PORT
    # shellcheck disable=SC1090
    [[ -f $RUN_INFO ]] && source "$RUN_INFO"
    if pid=$(server_pid "$PID_FILE" broker_cmd); then
        if port_open "$RUN_PORT"; then
            echo "kafka: running (pid $pid, Kafka $RUN_VERSION) bootstrap=$HOST:$RUN_PORT sasl_ssl=$HOST:$RUN_SASL_PORT"
            return 0
        fi
        echo "kafka: process $pid alive but $HOST:$RUN_PORT not answering (starting or hung)"
        return 1
    fi
    echo "kafka: not running (bootstrap would be $HOST:$KAFKA_PORT)"
    return 1
}

cmd_verify() { # exercise the wrappers against the running broker, both listeners
    cmd_status >/dev/null || die "kafka is not running; run devstack/kafka.sh up"
    local b=$HOST:$KAFKA_PORT s=$HOST:$KAFKA_SASL_PORT t=devstack-verify-$$ listed refused
    set -x
    "$BIN_DIR/kafka-broker-api-versions" --bootstrap-server "$b" | grep -E 'OffsetDelete\(47\)|DeleteGroups\(42\)|ConsumerGroupDescribe\(69\)'
    "$BIN_DIR/kafka-features" --bootstrap-server "$b" describe
    "$BIN_DIR/kafka-topics" --bootstrap-server "$b" --create --topic "$t" --partitions 2
    printf 'a\nb\nc\n' | "$BIN_DIR/kafka-console-producer" --bootstrap-server "$b" --topic "$t"
    "$BIN_DIR/kafka-console-consumer" --bootstrap-server "$b" --topic "$t" --group "$t" --from-beginning --max-messages 3 --timeout-ms 20000
    "$BIN_DIR/kafka-consumer-groups" --bootstrap-server "$b" --describe --group "$t"
    "$BIN_DIR/kafka-consumer-groups" --bootstrap-server "$b" --list --state
    "$BIN_DIR/kafka-configs" --bootstrap-server "$b" --describe --entity-type users --entity-name "$SASL_USER"
    "$BIN_DIR/kafka-topics" --bootstrap-server "$s" --command-config "$SASL_CLIENT_PROPS" --list
    if [[ $KAFKA_AUTHORIZER == on ]]; then
        "$BIN_DIR/kafka-acls" --bootstrap-server "$b" --list --principal "User:$TENANT_USER"
        # the tenant does not see the super user's group, and may not read __consumer_offsets
        listed=$("$BIN_DIR/kafka-consumer-groups" --bootstrap-server "$s" --command-config "$TENANT_CLIENT_PROPS" --list)
        ! grep -qxF "$t" <<<"$listed" || die "the tenant sees group $t, which no ACL gives it"
        refused=$("$BIN_DIR/kafka-console-consumer" --bootstrap-server "$s" --consumer.config "$TENANT_CLIENT_PROPS" \
            --topic __consumer_offsets --max-messages 1 --timeout-ms 10000 2>&1 || true)
        grep -q TopicAuthorizationException <<<"$refused" || die "the tenant was not refused __consumer_offsets"
    fi
    "$BIN_DIR/kafka-consumer-groups" --bootstrap-server "$b" --delete --group "$t"
    "$BIN_DIR/kafka-topics" --bootstrap-server "$b" --delete --topic "$t"
    { set +x; } 2>/dev/null
    echo "kafka: verify OK"
}

# ---------------------------------------------------------------------------------------------
# a multi-node cluster (KAFKA_NODES=N, N > 1): N combined broker+controller nodes, each one this
# script's single broker with a DEVSTACK_DIR, node id and ports of its own, one cluster id and one
# static quorum (controller.quorum.voters) naming them all. The layout is written once, to
# $CLUSTER_DIR/cluster.env, so later commands (kill, up N) need only DEVSTACK_DIR and KAFKA_NODES.

CLUSTER_DIR=$DEVSTACK_DIR/kafka-cluster

cluster_layout() { # sets CLUSTER_PORTS / CLUSTER_CONTROLLER_PORTS / CLUSTER_SASL_PORTS / KAFKA_CLUSTER_ID
    local n=$KAFKA_NODES i
    if [[ -f $CLUSTER_DIR/cluster.env ]]; then
        # shellcheck disable=SC1091
        source "$CLUSTER_DIR/cluster.env"
        [[ $CLUSTER_NODES == "$n" ]] || die "$CLUSTER_DIR holds a $CLUSTER_NODES-node cluster (purge it first)"
        return 0
    fi
    # KAFKA_NODE_PORTS / KAFKA_NODE_CONTROLLER_PORTS / KAFKA_NODE_SASL_PORTS: space-separated, one
    # per node (tests pass free ports); by default KAFKA_PORT/KAFKA_CONTROLLER_PORT/KAFKA_SASL_PORT
    # + 100 * node id, away from the shared single broker.
    CLUSTER_PORTS=${KAFKA_NODE_PORTS:-} CLUSTER_CONTROLLER_PORTS=${KAFKA_NODE_CONTROLLER_PORTS:-}
    CLUSTER_SASL_PORTS=${KAFKA_NODE_SASL_PORTS:-}
    if [[ -z $CLUSTER_PORTS ]]; then
        for ((i = 1; i <= n; i++)); do
            CLUSTER_PORTS+="$((KAFKA_PORT + 100 * i)) "
            CLUSTER_CONTROLLER_PORTS+="$((KAFKA_CONTROLLER_PORT + 100 * i)) "
            CLUSTER_SASL_PORTS+="$((KAFKA_SASL_PORT + 100 * i)) "
        done
    fi
    local lists=("$CLUSTER_PORTS" "$CLUSTER_CONTROLLER_PORTS" "$CLUSTER_SASL_PORTS") list
    for list in "${lists[@]}"; do
        # shellcheck disable=SC2206
        local words=($list)
        ((${#words[@]} == n)) || die "KAFKA_NODE_*PORTS must name $n ports each (got '$list')"
        for i in "${words[@]}"; do [[ $i =~ ^[0-9]+$ ]] || die "port '$i' is not a number"; done
    done
    # A cluster id is 16 random bytes in URL-safe base64 without padding (what StorageTool makes).
    KAFKA_CLUSTER_ID=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    mkdir -p "$CLUSTER_DIR"
    printf 'CLUSTER_NODES=%q\nCLUSTER_PORTS=%q\nCLUSTER_CONTROLLER_PORTS=%q\nCLUSTER_SASL_PORTS=%q\nKAFKA_CLUSTER_ID=%q\n' \
        "$n" "$CLUSTER_PORTS" "$CLUSTER_CONTROLLER_PORTS" "$CLUSTER_SASL_PORTS" "$KAFKA_CLUSTER_ID" \
        >"$CLUSTER_DIR/cluster.env"
}

cluster_port() { # cluster_port LIST NODE: the NODE-th (1-based) port of a space-separated LIST
    # shellcheck disable=SC2206
    local words=($1)
    echo "${words[$(($2 - 1))]}"
}

cluster_node() { # cluster_node NODE COMMAND...: this script, as the single broker that is node NODE
    local node=$1 i voters=""
    shift
    for ((i = 1; i <= KAFKA_NODES; i++)); do
        voters+="${voters:+,}$i@$HOST:$(cluster_port "$CLUSTER_CONTROLLER_PORTS" "$i")"
    done
    local rf=$((KAFKA_NODES < 3 ? KAFKA_NODES : 3))
    # No authorizer in a cluster (KAFKA_AUTHORIZER=off): its nodes render as before the tenant existed.
    DEVSTACK_DIR=$CLUSTER_DIR/node-$node KAFKA_NODES=1 KAFKA_NODE_ID=$node KAFKA_QUORUM_VOTERS=$voters \
        KAFKA_AUTHORIZER=off \
        KAFKA_CLUSTER_ID=$KAFKA_CLUSTER_ID KAFKA_REPLICATION=$rf \
        KAFKA_OFFSETS_PARTITIONS=${KAFKA_OFFSETS_PARTITIONS:-12} \
        KAFKA_PORT=$(cluster_port "$CLUSTER_PORTS" "$node") \
        KAFKA_CONTROLLER_PORT=$(cluster_port "$CLUSTER_CONTROLLER_PORTS" "$node") \
        KAFKA_SASL_PORT=$(cluster_port "$CLUSTER_SASL_PORTS" "$node") \
        KAFKA_POD_HOST=none KAFKA_PROXIED_PORT='' KAFKA_PROXIED_ADVERTISED_PORT='' \
        "$SCRIPT_DIR/kafka.sh" "$@"
}

cluster_nodes() { # the node ids named on the command line, or all of them
    local i
    if (($# == 0)); then
        for ((i = 1; i <= KAFKA_NODES; i++)); do echo "$i"; done
        return 0
    fi
    for i in "$@"; do
        if ! [[ $i =~ ^[0-9]+$ ]] || ((i < 1 || i > KAFKA_NODES)); then
            die "no node '$i' (nodes are 1..$KAFKA_NODES)"
        fi
        echo "$i"
    done
}

cluster_pid_file() { echo "$CLUSTER_DIR/node-$1/kafka/kafka.pid"; }

cmd_cluster_up() { # start the named nodes (all by default) side by side: a quorum needs a majority
    local node pids=() failed=0 bootstrap="" i
    mkdir -p "$CLUSTER_DIR"
    if [[ ! -s $CLUSTER_DIR/sasl-password ]]; then
        (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$CLUSTER_DIR/sasl-password")
    fi
    for node in $(cluster_nodes "$@"); do
        # one SCRAM password for every node (each formats the user into its metadata log)
        mkdir -p "$CLUSTER_DIR/node-$node/kafka"
        [[ -s $CLUSTER_DIR/node-$node/kafka/sasl-password ]] ||
            (umask 077 && cp "$CLUSTER_DIR/sasl-password" "$CLUSTER_DIR/node-$node/kafka/sasl-password")
        cluster_node "$node" up &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || failed=1; done
    ((failed == 0)) || die "a node of the cluster in $CLUSTER_DIR did not start (logs: $CLUSTER_DIR/node-*/logs)"
    for ((i = 1; i <= KAFKA_NODES; i++)); do bootstrap+="${bootstrap:+,}$HOST:$(cluster_port "$CLUSTER_PORTS" "$i")"; done
    write_file "$CLUSTER_DIR/kafka.env" "# Generated by devstack/kafka.sh (KAFKA_NODES=$KAFKA_NODES); source it.
export KAFKA_BOOTSTRAP_SERVERS=$bootstrap
export KAFKA_VERSION=$KAFKA_VERSION
export PATH=$(printf %q "$CLUSTER_DIR/node-1/bin"):\$PATH"
    log "cluster ready: $bootstrap"
}

cmd_cluster_down() { # down [--purge]: every node, side by side
    local node pids=() i
    [[ -f $CLUSTER_DIR/cluster.env ]] || { log "no cluster in $CLUSTER_DIR"; return 0; }
    cluster_layout
    for node in $(cluster_nodes); do
        cluster_node "$node" down &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || true; done
    if [[ ${1:-} == --purge ]]; then
        [[ $CLUSTER_DIR == */kafka-cluster ]] || die "refusing to purge '$CLUSTER_DIR'"
        rm -rf "$CLUSTER_DIR"
        log "purged $CLUSTER_DIR"
    fi
}

cmd_cluster_kill() { # kill NODE...: SIGKILL, as a machine that is lost (no controlled shutdown)
    local node pid start
    for node in $(cluster_nodes "$@"); do
        if pid=$(proc_live_pid "$(cluster_pid_file "$node")" "kafka.Kafka "); then
            read -r _ start <"$(cluster_pid_file "$node")"
            kill -KILL "$pid"
            while proc_alive "$pid" "$start"; do sleep 0.05; done
            log "node $node (pid $pid) killed"
        else
            log "node $node is not running"
        fi
    done
}

cmd_cluster_stop() { # stop NODE...: a controlled shutdown (SIGTERM), as in a rolling restart
    local node
    for node in $(cluster_nodes "$@"); do cluster_node "$node" down; done
}

cmd_cluster_status() {
    local node rc=0
    for node in $(cluster_nodes); do
        printf 'node %s: ' "$node"
        cluster_node "$node" status || rc=1
    done
    return $rc
}

cmd_cluster() {
    [[ $KAFKA_NODES =~ ^[0-9]+$ ]] || die "KAFKA_NODES='$KAFKA_NODES' is not a number"
    local cmd=${1:-}
    shift || true
    case $cmd in
    purge) cmd_cluster_down --purge; return ;;
    down) cmd_cluster_down "$@"; return ;;
    esac
    cluster_layout
    case $cmd in
    up) cmd_cluster_up "$@" ;;
    kill) (($#)) || usage; cmd_cluster_kill "$@" ;;
    stop) (($#)) || usage; cmd_cluster_stop "$@" ;;
    status) cmd_cluster_status ;;
    *) usage ;;
    esac
}

usage() {
    echo "usage: devstack/kafka.sh up | down [--purge] | purge | status | verify | streams-libs" >&2
    echo "       KAFKA_NODES=N devstack/kafka.sh up [NODE...] | kill NODE... | stop NODE... | status | down [--purge] | purge" >&2
    exit 2
}

if ((${KAFKA_NODES:-1} > 1)); then
    cmd_cluster "$@"
    exit
fi

case ${1:-} in
up) cmd_up ;;
down)
    case ${2:-} in
    --purge) cmd_down purge ;;
    '') cmd_down ;;
    *) usage ;;
    esac
    ;;
purge) cmd_down purge ;;
status) cmd_status ;;
verify) find_java; cmd_verify ;;
streams-libs) ensure_streams_libs ;; # only the download (a running devstack from before it existed)
*) usage ;;
esac
