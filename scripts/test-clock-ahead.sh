#!/usr/bin/env bash
# The suite on another day: ./scripts/test-clock-ahead.sh [OFFSET] [extra args for cargo test]
#
# OFFSET (default +365d, libfaketime's syntax: +400d, +2y, -30d) moves the wall clock ahead for
# every process that reads it through libc: the Kafka brokers and the registry (JVMs),
# kubefacts, the test binaries and Python. The monotonic clock is left alone (timeouts,
# tokio and the JVM's timers stay real). Then it runs every test target that needs no
# Kubernetes control plane and no dockerd, against the brokers and registry started under
# the same moved clock: the fixtures, stamped late November 2026, are then a year older than
# they were on the day they were written.
#
# Left out, and why: tests/control_plane.rs, control_plane_outage.rs, deploy_with_the_chart.rs,
# helm_chart.rs and testcontainers_stack.rs run Go programs (kube-apiserver, etcd, kwok,
# helm, dockerd), which read the clock through the vDSO without libc, so no LD_PRELOAD moves
# theirs: a control plane a year behind its watcher would test clock skew, not fixtures.
# (What in those tests compares a time with the wall clock is listed in docs/TESTING.md,
# "Fixed dates".) Not part of CI: scripts/test.sh runs on the real date; this is the check
# that the calendar cannot turn it red. Installs Debian's libfaketime when it is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/toolchains.sh
source scripts/toolchains.sh

OFFSET="${1:-+365d}"
[[ $# -gt 0 ]] && shift
[[ "$OFFSET" =~ ^[+-][0-9]+[dhmy]?$ ]] || { echo "test-clock-ahead: '$OFFSET' is not an offset such as +365d" >&2; exit 2; }
GO_TESTS=(control_plane control_plane_outage deploy_with_the_chart helm_chart testcontainers_stack)

./scripts/prerequisites.sh
LIB="$(dpkg -L libfaketime 2>/dev/null | grep '/libfaketime.so.1$' || true)"
if [[ -z "$LIB" ]]; then
  echo "test-clock-ahead: installing Debian's libfaketime"
  [[ "$(id -u)" == 0 ]] || { echo "test-clock-ahead: FAILED libfaketime is missing; apt-get install libfaketime" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libfaketime </dev/null >/dev/null
  LIB="$(dpkg -L libfaketime | grep '/libfaketime.so.1$')"
fi

# Built on the real clock, so cargo's fingerprints see the real file times.
cargo test --all-targets --features failpoints --no-run

trap './scripts/infra/down.sh || true' EXIT
export LD_PRELOAD="$LIB" FAKETIME="$OFFSET" FAKETIME_DONT_FAKE_MONOTONIC=1
echo "test-clock-ahead: the clock of what follows reads $(date -u +%Y-%m-%dT%H:%M:%SZ) ($OFFSET)"
./scripts/infra/up.sh
./scripts/infra/cluster.sh up
# shellcheck source=/dev/null
source .cache/run/env
# shellcheck source=/dev/null
source .cache/run/cluster/env
targets=()
for file in tests/*.rs; do
  name="$(basename "$file" .rs)"
  [[ " ${GO_TESTS[*]} " == *" $name "* ]] || targets+=(--test "$name")
done
mkdir -p .cache/run
rc=0
cargo test --features failpoints --no-fail-fast --lib --bins --benches "${targets[@]}" "$@" 2>&1 |
  tee .cache/run/cargo-test-clock-ahead.log || rc=$?
awk -v offset="$OFFSET" '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "clock %s ahead, without %d Go-backed test files: %d passed, %d failed\n", offset, n, p, f }' \
  n="${#GO_TESTS[@]}" .cache/run/cargo-test-clock-ahead.log
exit "$rc"
