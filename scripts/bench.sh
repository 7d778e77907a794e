#!/usr/bin/env bash
# The benchmark suite: ./scripts/bench.sh [-- --profile small|medium --seed N --hours H --no-scaling --latency-only]
#
# Starts the real broker on loopback (scripts/infra/up.sh, which also builds the suite's Kafka
# Streams anchor, benches/anchors/kafka-streams), runs `cargo bench --bench suite`
# (benches/suite.rs: ProducerPerformance, publish, process exactly once with latency, the
# in-memory driver, memory, state, restore, and the scaling from small to large), and stops
# the broker on exit whatever happens. Figures are printed and written as JSON under
# .cache/bench/. The medium profile is the default (~10 min here); `-- --profile small` is
# a quicker look, `-- --latency-only` measures only the latency (docs/BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# One suite at a time: a second one's up.sh restarts the broker under the first, and the
# first one's exit stops the second's.
mkdir -p .cache
exec 9>.cache/bench.lock
flock -n 9 || { echo "bench.sh: another benchmark suite is running in this checkout" >&2; exit 1; }
trap './scripts/infra/down.sh || true' EXIT
./scripts/infra/up.sh
# shellcheck source=/dev/null
source .cache/run/env
if [[ "${1:-}" == "--" ]]; then shift; fi
cargo bench --bench suite -- "$@"
