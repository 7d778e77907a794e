#!/usr/bin/env bash
# The soak: ./scripts/soak.sh [--minutes 30] [--profile medium] [--hours 6] [--kill-every-secs 180] [--seed N]
#
# Offers a simulated fleet at a steady rate (its trace piped into `kubefacts publish`,
# paced to last --minutes) through the three-broker SASL_SSL cluster while two `process`
# instances work through it; every --kill-every-secs on average (each wait drawn from half
# to one and a half times it) a seeded random choice SIGKILLs one instance or one broker and
# starts it again. At the end every output must equal `kubefacts replay` of the trace, and
# the report says the kills, the records, how many were lost or duplicated (both must be 0)
# and each instance's resident memory 30 s after its start and at the end.
#
# Not part of CI (about 45 min with the release build); CI runs tests/soak.rs's two-minute
# variant through ./scripts/test.sh. Starts its own infrastructure (scripts/infra/up.sh and
# cluster.sh) and stops it on exit. The report is kept in .cache/soak/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

minutes=30 profile=medium hours=6 kill_every=180 seed=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --hours) hours="$2"; shift 2 ;;
    --kill-every-secs) kill_every="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "soak: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
seed="${seed:-$(( $(date +%s) % 1000000 ))}"
echo "soak: $minutes min of the $profile fleet ($hours h), a kill every ~$kill_every s, seed $seed"

trap './scripts/infra/down.sh || true' EXIT
./scripts/infra/up.sh
./scripts/infra/cluster.sh up
# shellcheck source=/dev/null
source .cache/run/env
# shellcheck source=/dev/null
source .cache/run/cluster/env

mkdir -p .cache/soak
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
report=".cache/soak/report-$stamp.txt"
# The release build: the debug one cannot keep up with the medium fleet's rate.
KUBEFACTS_SOAK_MINUTES="$minutes" KUBEFACTS_SOAK_PROFILE="$profile" KUBEFACTS_SOAK_HOURS="$hours" \
  KUBEFACTS_SOAK_KILL_EVERY_SECS="$kill_every" KUBEFACTS_SOAK_SEED="$seed" KUBEFACTS_SOAK_REPORT="$PWD/$report" \
  cargo test --release --features failpoints --test soak -- --nocapture 2>&1 | tee ".cache/soak/log-$stamp.txt"
echo "soak: report in $report"
cat "$report"
