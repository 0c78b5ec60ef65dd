#!/usr/bin/env bash
# deploy/lint.sh — validate keysvc's deployment files and runbooks offline.
#
# No Docker engine and no cluster are needed. The first run installs, into
# $KEYSVC_LINT_CACHE (default ~/.cache/keysvc-deploy-lint), what is missing:
#   - deploy/lint/k8s130 (keysvc-k8s130-lint, its own Go module: k8s.io/api
#     v0.30, i.e. Kubernetes 1.30) and deploy/lint (keysvc-deploy-lint, its own
#     Go module: compose-go, BuildKit's Dockerfile checks, the rest)
#   - a keysvc binary built from this checkout (its --help is the reference
#     for every command and flag written in deploy/ and docs/runbooks/)
#   - promtool, extracted from Debian's prometheus package (apt-get download;
#     the Prometheus server is not installed or started)
#   - systemd-analyze (Debian systemd), jq and shellcheck via apt-get, if absent
# Later runs reuse them (Go's build cache keeps rebuilds short).
#
# Prints one line per check; on a failure, the check's findings under it.
# Exit status: 0 all checks passed, 1 a check failed, 2 an install failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
# Go needs HOME (its module and build caches); take the user's if unset.
HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export HOME
cache=${KEYSVC_LINT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/keysvc-deploy-lint}
export PATH="$PATH:/usr/local/go/bin"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
mkdir -p "$cache"
tmp=$(mktemp -d)
dev_pid=
# shellcheck disable=SC2317  # runs on EXIT
cleanup() {
  if [ -n "$dev_pid" ]; then kill "$dev_pid" 2>/dev/null || true; wait "$dev_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

die() { echo "FAIL install: $*" >&2; exit 2; }

apt_updated=0
apt_install() { # package...
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" = 0 ]; then apt-get update -qq >/dev/null 2>&1 || true; apt_updated=1; fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || die "apt-get install $*"
}

# --- installs (idempotent, quiet) ------------------------------------------
(cd "$here/lint/k8s130" && go build -o "$cache/keysvc-k8s130-lint" .) >"$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log" >&2; die "building deploy/lint/k8s130"; }
(cd "$here/lint" && go build -o "$cache/keysvc-deploy-lint" .) >"$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log" >&2; die "building deploy/lint"; }
(cd "$repo" && go build -o "$cache/keysvc" ./cmd/keysvc) >"$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log" >&2; die "building keysvc (./cmd/keysvc)"; }
lint="$cache/keysvc-deploy-lint"
keysvc="$cache/keysvc"
export KEYSVC_LINT_BIN="$keysvc"

promtool=$(command -v promtool || true)
if [ -z "$promtool" ]; then
  promtool="$cache/promtool"
  if [ ! -x "$promtool" ]; then
    (cd "$tmp" && { apt-get download -qq prometheus >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1; apt-get download -qq prometheus >/dev/null 2>&1; }; }) \
      || die "apt-get download prometheus (for promtool)"
    dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -O ./usr/bin/promtool >"$tmp/promtool" \
      || die "extracting promtool"
    chmod 0755 "$tmp/promtool" && mv "$tmp/promtool" "$promtool"
  fi
fi
command -v systemd-analyze >/dev/null || apt_install systemd
command -v jq >/dev/null || apt_install jq
command -v shellcheck >/dev/null || apt_install shellcheck

# --- checks ------------------------------------------------------------------
failed=0
check() { # description, command...
  local what=$1; shift
  if "$@" >"$tmp/out" 2>&1; then
    echo "ok    $what"
  else
    echo "FAIL  $what"
    sed 's/^/      /' "$tmp/out"
    failed=1
  fi
}
# Fails when the command fails or prints anything (systemd-analyze verify
# reports unknown directives and bad values as warnings with exit status 0).
# shellcheck disable=SC2317  # invoked through check
silent() {
  local out
  out=$("$@" 2>&1) || { printf '%s\n' "$out"; return 1; }
  [ -z "$out" ] || { printf '%s\n' "$out"; return 1; }
}

cd "$repo"
mapfile -t yaml_files < <(find deploy -path deploy/lint -prune -o -type f \( -name '*.yaml' -o -name '*.yml' \) -print | sort)
mapfile -t text_files < <({ find deploy -path deploy/lint -prune -o -type f \( -name '*.yaml' -o -name '*.md' \
  -o -name '*.json' -o -name '*.service' -o -name '*.example' -o -name 'Dockerfile' -o -name '*.sh' \) -print;
  find docs/runbooks -type f -name '*.md' 2>/dev/null; } | sort)

check "YAML syntax, no duplicate keys (${#yaml_files[@]} files)" "$lint" yaml "${yaml_files[@]}"
check "Kubernetes manifests: strict decode into the Kubernetes 1.30 API (k8s.io/api v0.30), cross-object and restricted-PSS checks" \
  "$cache/keysvc-k8s130-lint" deploy/kubernetes
check "Kubernetes manifests: keysvc container args against keysvc --help" "$lint" k8s-args deploy/kubernetes
check "compose.yaml (Compose Specification loader, compose-go)" "$lint" compose deploy/compose.yaml
check "compose.yaml + compose.softhsm.yaml" "$lint" compose deploy/compose.yaml deploy/compose.softhsm.yaml
check "Dockerfile: BuildKit checks (docker build --check rules) and image policy" "$lint" dockerfile deploy/Dockerfile
if command -v hadolint >/dev/null; then
  check "Dockerfile: hadolint" hadolint deploy/Dockerfile
else
  echo "skip  hadolint: not installable here (no Debian, npm or Go package); BuildKit's checks above cover the Dockerfile"
fi

# systemd-analyze verify needs the ExecStart binary to exist: verify a copy
# of the unit whose keysvc path points at the binary just built.
mkdir -p "$tmp/systemd"
sed "s|/usr/local/bin/keysvc|$keysvc|g" deploy/systemd/keysvc.service >"$tmp/systemd/keysvc.service"
check "systemd unit: systemd-analyze verify" silent systemd-analyze verify "$tmp/systemd/keysvc.service"
check "systemd unit: systemd-analyze security exposure <= 2.0" \
  systemd-analyze security --offline=yes --threshold=20 "$tmp/systemd/keysvc.service"

check "Prometheus rules: promtool check rules" "$promtool" check rules deploy/prometheus/alerts.yaml
check "Prometheus rules: promtool test rules (alerts.test.yaml)" "$promtool" test rules deploy/prometheus/alerts.test.yaml
# shellcheck disable=SC2317  # invoked through check
grafana() {
  jq -e 'type == "object"' deploy/grafana/keysvc.json >/dev/null &&
    "$lint" grafana deploy/grafana/keysvc.json "$tmp/grafana-rules.yaml" &&
    "$promtool" check rules "$tmp/grafana-rules.yaml" >/dev/null
}
check "Grafana dashboard: JSON (jq), structure, PromQL (promtool)" grafana

if "$keysvc" config check --help >/dev/null 2>&1; then
  check "keysvc config check --syntax-only deploy/keysvc.example.yaml (its files are the target host's)" \
    env -i PATH=/usr/bin:/bin "$keysvc" config check --syntax-only deploy/keysvc.example.yaml
else
  echo "skip  keysvc config check: this keysvc has no 'config check' command yet"
fi
# The metric names of alerts.yaml and the dashboard, against a live keysvc:
# a throwaway dev instance on a free loopback port (SQLite in $tmp), which
# signs once at start; a rotation period gives its key a next rotation.
# shellcheck disable=SC2317  # invoked through check
live_metrics() {
  local d="$tmp/dev" addr=""
  mkdir -p "$d"
  env -i PATH=/usr/bin:/bin HOME="$d" "$keysvc" serve --dev --data-dir "$d/data" --listen 127.0.0.1:0 \
    >"$d/out" 2>"$d/err" &
  dev_pid=$!
  for _ in $(seq 1 150); do
    grep -q 'Press Ctrl-C' "$d/out" 2>/dev/null && break
    kill -0 "$dev_pid" 2>/dev/null || break
    sleep 0.1
  done
  addr=$(grep -o '"addr":"127.0.0.1:[0-9]*"' "$d/err" | head -n 1 | cut -d'"' -f4)
  if [ -z "$addr" ] || ! grep -q 'Press Ctrl-C' "$d/out"; then
    echo "keysvc serve --dev did not come up:"; cat "$d/err"; return 1
  fi
  env -i PATH=/usr/bin:/bin "$keysvc" keys policy dev --rotation-period 24h \
    --server "http://$addr" --data-dir "$d/data" >/dev/null &&
    "$lint" metrics "http://$addr"
  local rc=$?
  kill "$dev_pid"; wait "$dev_pid" 2>/dev/null || true; dev_pid=
  return "$rc"
}
check "metric names: a live keysvc (serve --dev on loopback) exports every one the alerts and dashboard use" live_metrics
check "keysvc commands and flags, KEYSVC_* variables, metric names in deploy/ and docs/runbooks/ (${#text_files[@]} files)" \
  "$lint" cli "$keysvc" "$repo" "${text_files[@]}"
check "shellcheck deploy/lint.sh" shellcheck deploy/lint.sh
check "shellcheck bench/sidebyside/run.sh (the side-by-side benchmark, issue 18)" shellcheck bench/sidebyside/run.sh

exit "$failed"
