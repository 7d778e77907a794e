#!/usr/bin/env bash
# The project's test command: ./scripts/test.sh [extra args for `cargo test --all-targets`]
#
# Installs what the machine lacks (scripts/prerequisites.sh: Debian packages as root, checks
# of the toolchains), starts the real test infrastructure on loopback (scripts/infra/up.sh: Kafka 4.4.0 KRaft,
# Apicurio Registry 3.3.3, the fastavro venv; scripts/infra/cluster.sh: three KRaft brokers
# with SASL_SSL and ACLs; scripts/k8s/up.sh: a Kubernetes v1.34.4 control
# plane with kwok nodes, built from the Go module proxy on first use, ~10 min cold;
# scripts/docker/up.sh: a private dockerd for the image), stops them again on exit whatever
# happens (scripts/docker/down.sh, scripts/infra/down.sh, scripts/k8s/down.sh), and in between
# runs:
#   cargo fmt --check
#   cargo clippy --lib --bins -- -D warnings                      (the production build)
#   cargo clippy --all-targets --features failpoints -- -D warnings
#   cargo doc --no-deps --features testcontainers                   (RUSTDOCFLAGS=-D warnings)
#   scripts/image/stand-ins.sh                                      (the testcontainers images)
#   cargo test --all-targets --features failpoints --no-fail-fast "$@"
#   scripts/image/stack-start.sh --runs 1                           (a stack's start, timed)
# Server logs stay in files under .cache/run/ (listed on failure), not on stdout.
#
# The verdict cannot lie: "==> test.sh passed" is printed only when every step ran and passed.
# SIGINT, SIGTERM or SIGHUP stop the running step (each step runs in its own process group)
# and end the run non-zero, naming the step; so does the time limit, KUBEFACTS_TEST_TIMEOUT_SECS
# (default 5100 s, under CI's 5400 s).
# Example: ./scripts/test.sh exactly_once -- --nocapture
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/toolchains.sh
source scripts/toolchains.sh

T_START="$(date +%s.%N)"
since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
SUMMARY=()
CURRENT_STEP=""   # the step running now, named when the run is interrupted
STEP_PID=""       # its process group
INTERRUPTED=""    # what interrupted the run, if anything
ALL_STEPS_RAN=0   # set after the last step: only then can the run pass
TESTS_RAN=0       # set when `cargo test` ran to its end: only then are its totals final
TIMEOUT_SECS="${KUBEFACTS_TEST_TIMEOUT_SECS:-5100}"
[[ "$TIMEOUT_SECS" =~ ^[1-9][0-9]*$ ]] || {
  echo "test.sh: KUBEFACTS_TEST_TIMEOUT_SECS=$TIMEOUT_SECS is not a positive number of seconds" >&2
  exit 2
}
# Job control: every background job (each step, the watchdog) gets a process group of its
# own, which a signal can stop as a whole (cargo, the test binaries and what they started).
set -m

# Stops the running step's process group: TERM, then KILL after 10 s.
stop_step() {
  [[ -n "$STEP_PID" ]] || return 0
  kill -TERM -- "-$STEP_PID" 2>/dev/null || return 0
  local i
  for i in $(seq 1 100); do
    kill -0 -- "-$STEP_PID" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL -- "-$STEP_PID" 2>/dev/null || true
}

# interrupted WHAT EXIT: the run ends here, non-zero, saying what stopped it.
interrupted() {
  INTERRUPTED="$1"
  trap '' INT TERM HUP USR1
  stop_step
  exit "$2"
}
trap 'interrupted SIGINT 130' INT
trap 'interrupted SIGTERM 143' TERM
trap 'interrupted SIGHUP 129' HUP
trap 'interrupted "the time limit (KUBEFACTS_TEST_TIMEOUT_SECS=$TIMEOUT_SECS)" 124' USR1
# The watchdog: USR1 to this script when the time limit has passed. Its subshell holds
# none of the script's outputs: a watchdog left behind (a signal racing the EXIT trap) once
# kept a reader of test.sh's stdout waiting for its 85 minutes.
{ sleep "$TIMEOUT_SECS" && kill -USR1 "$$"; } </dev/null >/dev/null 2>&1 &
WATCHDOG_PID=$!
# No job notice when finish stops it.
disown "$WATCHDOG_PID"

finish() {
  local rc=$?
  trap - EXIT
  trap '' INT TERM HUP USR1
  kill -- "-$WATCHDOG_PID" 2>/dev/null || true
  stop_step
  ./scripts/docker/down.sh --quiet || true
  ./scripts/k8s/down.sh --quiet || true
  ./scripts/infra/down.sh || true
  printf '\n'
  local line
  for line in "${SUMMARY[@]}"; do printf '    %s\n' "$line"; done
  if [[ -n "$CURRENT_STEP" ]]; then printf '    %-40s %7s    %s\n' "$CURRENT_STEP" "" "INTERRUPTED"; fi
  if [[ -n "$INTERRUPTED" ]]; then
    [[ "$rc" != 0 ]] || rc=1
    printf '==> test.sh INTERRUPTED by %s during step "%s" after %s s (exit %s): the run is incomplete\n' \
      "$INTERRUPTED" "${CURRENT_STEP:-between steps}" "$(since "$T_START")" "$rc"
  elif [[ "$rc" == 0 && "$ALL_STEPS_RAN" == 1 ]]; then
    printf '==> test.sh passed in %s s\n' "$(since "$T_START")"
  else
    [[ "$rc" != 0 ]] || rc=1
    printf '==> test.sh FAILED (exit %s) after %s s\n' "$rc" "$(since "$T_START")"
  fi
  if [[ "$rc" != 0 ]]; then
    printf '    server logs: .cache/run/kafka/server.log, .cache/run/registry/registry.log, .cache/k8s/run/logs/ (kept until the next up)\n'
  fi
  if [[ -f .cache/run/cargo-test.log ]]; then
    # One plain line with the totals of every test binary; "so far" when cargo test was cut short.
    awk -v label="$([[ "$TESTS_RAN" == 1 ]] && echo "tests:" || echo "tests so far (cargo test did not finish):")" \
      '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
         END { printf "%s %d passed, %d failed\n", label, p, f }' .cache/run/cargo-test.log
  fi
  exit "$rc"
}
trap finish EXIT

# step NAME COMMAND...: runs one step in its own process group, timing it; a failing step
# ends the run.
step() {
  local name="$1" t0 rc=0
  shift
  printf '\n==> %s\n' "$name"
  t0="$(date +%s.%N)"
  CURRENT_STEP="$name"
  "$@" &
  STEP_PID=$!
  wait "$STEP_PID" || rc=$?
  STEP_PID=""
  CURRENT_STEP=""
  SUMMARY+=("$(printf '%-40s %7s s  %s' "$name" "$(since "$t0")" "$([[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc)")")")
  return "$rc"
}

# A stale log of an earlier run must not be totalled as this run's.
rm -f .cache/run/cargo-test.log
step "prerequisites (scripts/prerequisites.sh)" ./scripts/prerequisites.sh
step "infra up (scripts/infra/up.sh)" ./scripts/infra/up.sh
# shellcheck source=/dev/null
source .cache/run/env
# Three KRaft brokers with SASL_SSL and ACLs, for the security and broker-failure tests.
step "kafka cluster up (scripts/infra/cluster.sh)" ./scripts/infra/cluster.sh up
# shellcheck source=/dev/null
source .cache/run/cluster/env
step "kubernetes up (scripts/k8s/up.sh)" ./scripts/k8s/up.sh
# shellcheck source=/dev/null
source .cache/k8s/run/env
# The private Docker daemon for the image and the chart's end-to-end test (DESIGN §7).
step "docker up (scripts/docker/up.sh)" ./scripts/docker/up.sh
# shellcheck source=/dev/null
source .cache/docker/env
# A full build of the test binaries needs disk; when the disk fills, rustc fails deep inside
# some dependency with "No space left on device". Say it up front instead.
check_disk() {
  # 8 GB for the tests' build, 1.3 GB more while tests/upgrade_keeps_state.rs builds the
  # previous release.
  local dir="${CARGO_TARGET_DIR:-target}" need_gb=10 free_kb
  mkdir -p "$dir"
  free_kb="$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')"
  echo "disk: $((free_kb / 1024 / 1024)) GB free for $dir (a fresh test build needs about $need_gb GB)"
  if (( free_kb < need_gb * 1024 * 1024 )); then
    echo "disk: FAILED less than $need_gb GB free for $dir; free space (cargo clean) and rerun" >&2
    return 1
  fi
}
step "disk space for the build" check_disk
step "cargo fmt --check" cargo fmt --check
# The production binary has no failpoints; the tests pause instances at them.
step "cargo clippy --lib --bins -D warnings" cargo clippy --lib --bins -- -D warnings
step "cargo clippy --all-targets --features failpoints" cargo clippy --all-targets --features failpoints -- -D warnings
# The API documentation, the testcontainers helper's included (its example is
# examples/consumer_test.rs, compiled with the tests): no broken links.
step "cargo doc --features testcontainers" env RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps --features testcontainers
# The images the testcontainers tests run (tests/testcontainers_stack.rs): local stand-ins for
# the official Kafka and registry images (no registry is reachable here), and kubefacts' image
# of this build's binary (kubefacts:test, never the release image's name), named in
# .cache/image/env for the helper.
TEST_FEATURES=failpoints,fixtures,testcontainers
test_images() {
  # The features cargo test builds the binary with (the dev-dependency adds the last two).
  cargo build --features "$TEST_FEATURES" --bin kubefacts &&
    KUBEFACTS_IMAGE="${KUBEFACTS_IMAGE:-kubefacts:test}" \
      ./scripts/image/stand-ins.sh --binary "${CARGO_TARGET_DIR:-target}/debug/kubefacts"
}
step "test images (scripts/image/stand-ins.sh)" test_images
# shellcheck source=/dev/null
source .cache/image/env
# Keep cargo's output on the terminal and in a file, to total the results at the end.
# --no-fail-fast: one red test binary must not hide whether the ones after it pass.
cargo_test() {
  cargo test --all-targets --features failpoints --no-fail-fast "$@" 2>&1 | tee .cache/run/cargo-test.log
}
tests_rc=0
step "cargo test --all-targets --features failpoints${*:+ $*}" cargo_test "$@" || tests_rc=$?
TESTS_RAN=1
[[ "$tests_rc" == 0 ]] || exit "$tests_rc"
# The start-time figure's machinery (the figures: scripts/image/stack-start.sh --cold, docs/TESTING_DOWNSTREAM.md).
step "stack start, warm, 1 run (scripts/image/stack-start.sh)" \
  ./scripts/image/stack-start.sh --runs 1 --features "$TEST_FEATURES" --binary "${CARGO_TARGET_DIR:-target}/debug/kubefacts"
ALL_STEPS_RAN=1
