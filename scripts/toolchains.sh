# shellcheck shell=bash
# Sourced by scripts/test.sh, scripts/test-clock-ahead.sh and scripts/prerequisites.sh: puts the toolchains that
# this kind of machine preinstalls outside a bare PATH on it (rustup's cargo in ~/.cargo/bin,
# Go in /usr/local/go/bin). Defines nothing else.
if ! command -v cargo >/dev/null 2>&1 && [[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]]; then
  export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
