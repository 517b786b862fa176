#!/usr/bin/env bash
# librdkafka's own integration tests that need several brokers (0101-fetch-from-follower by
# default) against `odradek cluster up` from this checkout: etcd and three broker processes
# on loopback, one rack each, Kafka's RackAwareReplicaSelector.
#
# usage: conformance/librdkafka-cluster.sh [TEST ...]          (default: 0101; repeat one to run it again)
#
# Environment (all optional):
#   WORK=/tmp/peer-lrk              LIBRDKAFKA_SRC=$WORK/librdkafka (tests/test-runner must exist:
#                                   build it with ../shared/conformance/librdkafka/run.sh, with
#                                   Debian's rapidjson-dev installed, or 0101 skips itself)
#   PROTOCOLS="classic consumer"    TEST_CONSUMER_GROUP_PROTOCOL values, one pass each
#   RACKS=RACK1,RACK2,RACK3         broker racks, round-robin by node id (see below)
#   PORT=29192                      first broker port (the others follow); 127.0.0.1 only
#   PER_TEST_TIMEOUT=300            seconds per test-runner process
#   TEST_TIMEOUT_MULTIPLIER=1       test.timeout.multiplier in the test.conf written here
#   BROKER_OPTS                     extra "-o key=value" arguments for every broker
#   OUT=$WORK/results-cluster-<date>  logs (test-runner and the brokers') and results.tsv
#
# Racks: 0101 sets `client.rack=RACK<id>` for a follower <id> of its partition, i.e. it assumes
# the brokers' racks are named RACK1, RACK2, RACK3 as in librdkafka's trivup cluster; with
# other names (`--racks a,b,c`) no broker shares the consumer's rack, the leader serves it,
# and the test's checks fail. Its checks (`test_assert` in 0101-fetch-from-follower.cpp) only
# print a message and never fail the test, so this script also fails a test whose log
# carries one of them ("rxbytes was not highest ...", "expecting rxbytes ...").
# The test-runner reads a private test.conf (RDKAFKA_TEST_CONF) naming all three brokers, so
# the shared one in the librdkafka tree is left alone for ../shared's run.sh.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/peer-lrk}
LRK=${LIBRDKAFKA_SRC:-$WORK/librdkafka}
PROTOCOLS=${PROTOCOLS:-"classic consumer"}
RACKS=${RACKS:-RACK1,RACK2,RACK3}
PORT=${PORT:-29192}
PER_TEST_TIMEOUT=${PER_TEST_TIMEOUT:-300}
MULT=${TEST_TIMEOUT_MULTIPLIER:-1}
OUT=${OUT:-$WORK/results-cluster-$(date +%Y%m%d-%H%M%S)}
TESTS_TO_RUN=("$@")
[ ${#TESTS_TO_RUN[@]} -eq 0 ] && TESTS_TO_RUN=(0101)
ODRADEK=$HERE/.venv/bin/odradek
SELECTOR=org.apache.kafka.common.replica.RackAwareReplicaSelector
mkdir -p "$OUT"

log() { echo "[librdkafka-cluster $(date +%H:%M:%S)] $*" >&2; }
[ -x "$LRK/tests/test-runner" ] || { log "no $LRK/tests/test-runner: build librdkafka's tests first"; exit 2; }
grep -q 'define WITH_RAPIDJSON 1' "$LRK/config.h" 2>/dev/null ||
  log "warning: librdkafka was built without RapidJSON: 0101 will skip itself"
LRK_VER=$(sed -n 's/.*RD_KAFKA_VERSION *\(0x[0-9a-f]*\).*/\1/p' "$LRK/src/rdkafka.h" | head -1)

# The Kafka-compatible scripts (kafka-topics.sh ...) for tests that shell out, as conformance/librdkafka.sh.
mkdir -p "$OUT/kafka"
"$ODRADEK" kafka-scripts "$OUT/kafka" --force >/dev/null
BOOTSTRAP="127.0.0.1:$PORT,127.0.0.1:$((PORT + 1)),127.0.0.1:$((PORT + 2))"
CONF=$OUT/test.conf
printf 'bootstrap.servers=%s\ntest.timeout.multiplier=%s\n' "$BOOTSTRAP" "$MULT" >"$CONF"

CLUSTER_PID=
cluster_start() {  # $1 = data dir; the brokers' own logs are in it (broker-N.log)
  local data=$1
  rm -rf "$data"
  # Broker settings as the shared run.sh's (librdkafka's "default" scenario: num.partitions=4).
  # shellcheck disable=SC2086
  "$ODRADEK" cluster up --brokers 3 --racks "$RACKS" --port "$PORT" --data-dir "$data" \
    -o replica.selector.class=$SELECTOR -o num.partitions=4 -o group.initial.rebalance.delay.ms=0 \
    -o group.consumer.min.heartbeat.interval.ms=500 -o group.consumer.heartbeat.interval.ms=1000 \
    ${BROKER_OPTS:-} >"$data.out" 2>&1 &
  CLUSTER_PID=$!
  local deadline=$((SECONDS + 90))
  while [ $SECONDS -lt $deadline ]; do
    grep -q '^bootstrap:' "$data.out" 2>/dev/null && return 0
    kill -0 "$CLUSTER_PID" 2>/dev/null || break
    sleep 0.5
  done
  log "cluster did not start; see $data.out"; cat "$data.out" >&2; return 1
}
cluster_stop() {
  [ -n "$CLUSTER_PID" ] || return 0
  kill -TERM "$CLUSTER_PID" 2>/dev/null  # `cluster up` stops its brokers, then etcd
  local deadline=$((SECONDS + 60))
  while kill -0 "$CLUSTER_PID" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
  kill -0 "$CLUSTER_PID" 2>/dev/null && kill -KILL "$CLUSTER_PID" 2>/dev/null
  wait "$CLUSTER_PID" 2>/dev/null
  CLUSTER_PID=
}
trap 'cluster_stop' EXIT
trap 'cluster_stop; exit 130' INT TERM

RESULTS=$OUT/results.tsv
: >"$RESULTS"
FAILED=0
log "odradek $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null), librdkafka $LRK_VER, racks $RACKS, output in $OUT"
for proto in $PROTOCOLS; do
  data=$OUT/cluster-$proto
  cluster_start "$data" || { FAILED=1; continue; }
  log "pass $proto: $(grep -E '^broker ' "$data.out" | tr '\n' ';')"
  k=0
  for t in "${TESTS_TO_RUN[@]}"; do
    k=$((k + 1))
    tlog=$OUT/$proto-$k-$t.log  # a test may be listed more than once (repeats)
    t0=$SECONDS
    (cd "$LRK/tests" && env TESTS="$t" TEST_KAFKA_VERSION=4.1.0 TEST_CONSUMER_GROUP_PROTOCOL="$proto" \
      RDKAFKA_TEST_CONF="$CONF" KAFKA_PATH="$OUT/kafka" BROKERS="$BOOTSTRAP" \
      LD_LIBRARY_PATH=../src:../src-cpp RDKAFKA_GITVER="$LRK_VER" \
      timeout -k 10 "$PER_TEST_TIMEOUT" ./test-runner -p1 -L >"$tlog" 2>&1)
    rc=$?
    verdict=PASS
    if [ $rc -ne 0 ]; then
      verdict=FAIL
    elif grep -q 'SKIPPED\|SKIPPING' "$tlog"; then
      verdict=SKIP
    elif grep -qE 'rxbytes was not highest|expecting rxbytes of client.rack broker' "$tlog"; then
      verdict=FAIL  # 0101's checks only print (see the header)
    fi
    [ $verdict = FAIL ] && FAILED=1
    printf '%s\t%s\t%s\t%s\t%s\n' "$proto" "$t" "$verdict" "$((SECONDS - t0))" "$tlog" >>"$RESULTS"
    log "[$proto] $t $verdict ($((SECONDS - t0)) s, rc $rc)"
    grep -aE 'leader id:|client.rack:|rxbytes for replica|rxbytes was not|expecting rxbytes|TEST.*(PASSED|FAILED|SKIPPED)' "$tlog" |
      sed 's/\x1b\[[0-9;]*m//g' | sed "s/^/[$proto]   /" >&2
  done
  cluster_stop
  for n in 1 2 3; do cp "$data/broker-$n.log" "$OUT/$proto-broker-$n.log" 2>/dev/null; done
done
column -t "$RESULTS" >&2
exit $FAILED
