# shellcheck shell=bash
# Helpers shared by scripts/infra/lib.sh and scripts/k8s/lib.sh. Set LOG_PREFIX (and
# optionally FAIL_TAIL_LINES) before sourcing; defines functions only.

info() { printf '%s: %s\n' "$LOG_PREFIX" "$*"; }

# fail COMPONENT REASON [LOGFILE]: one clear line, then the tail of the component's log.
fail() {
  local component="$1" reason="$2" log="${3:-}" lines="${FAIL_TAIL_LINES:-40}"
  printf '%s: FAILED [%s] %s\n' "$LOG_PREFIX" "$component" "$reason" >&2
  if [[ -n "$log" && -s "$log" ]]; then
    printf -- '----- last %s lines of %s -----\n' "$lines" "$log" >&2
    tail -n "$lines" "$log" >&2
    printf -- '----- end of %s -----\n' "$log" >&2
  elif [[ -n "$log" ]]; then
    printf '%s: (its log %s is empty or missing)\n' "$LOG_PREFIX" "$log" >&2
  fi
  exit 1
}

now() { date +%s.%N; }

# elapsed START: seconds since START with one decimal.
elapsed() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }

# free_ports N: prints N distinct free TCP ports on 127.0.0.1, space separated.
# All sockets are held open together so the N ports differ from each other.
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
EOF
}
