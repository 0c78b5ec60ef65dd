#!/usr/bin/env bash
# Side-by-side benchmark (issue 18): keysvc against the net/http floors and,
# when BAO=/path/to/bao is set, OpenBao transit (dev mode, ed25519 key), all
# driven by one wrk client with a Lua script per route, on 127.0.0.1 only.
# Pairs are interleaved (keysvc, then its peer, for every route, level and
# round); every run prints requests/s, p50/p99/p99.9 and the server's CPU
# per request from /proc/PID/stat, and the end prints keysvc/peer ratios.
#
#   bench/sidebyside/run.sh                       # 5 s runs at 1, 16, 64 connections, 2 rounds
#   DURATION=10s CONNS="1 4 16 64" ROUNDS=3 bench/sidebyside/run.sh
#   BAO=/usr/local/bin/bao bench/sidebyside/run.sh
#   TLOG=1 bench/sidebyside/run.sh                # keysvc with its embedded transparency log
#   TLOG=remote bench/sidebyside/run.sh           # keysvc with its spool, delivering to a log in
#       # another process (keysvc tlog serve --dev: the production layout, on
#       # the same cores here); the log's own CPU per request is printed too
#   JWKS_VERSIONS=20 bench/sidebyside/run.sh      # the dev key rotated first, so that its JWKS
#       # holds 20 keys (~6.5 KiB), as after years of rotations (VRP K2)
#   SMOKE=1 bench/sidebyside/run.sh               # 1 s, one connection, one round
#   PIN=1 CONNS=1 PAIRS="floor-jwks jwks" bench/sidebyside/run.sh
#       # wrk on CPU 0 and every server on CPU 1 (taskset): at one
#       # connection this takes the kernel's thread placement out of the
#       # ratio, which then compares the servers' work per request alone
#       # (docs/performance.md, session 43); at 16 and 64 connections the
#       # servers get one core, not two
#   PAIRS="jwks jwks304" ROUNDS=10 DURATION=2s CONNS="16 64" bench/sidebyside/run.sh
#       # two keysvc routes only, A then B in each round: mean rate and CPU
#       # per request of each, in how many rounds B cost less than A, and
#       # each round's B/A rate ratio as a median and range (routes: sign,
#       # mcp-transport, batch100, jwks, jwks304, the floors'
#       # floor-sign, floor-jwks, and with BAO openbao-sign, openbao-batch100)
#   BAO=/usr/local/bin/bao PAIRS="openbao-sign sign" ROUNDS=8 CONNS=16 bench/sidebyside/run.sh
#   KEYSVC=/tmp/keysvc-old KEYSVC_B=/tmp/keysvc-new PAIRS="sign b:sign" bench/sidebyside/run.sh
#       # two keysvc builds A/B, interleaved: KEYSVC_B runs as a second
#       # server whose routes are b:sign, b:mcp-transport, b:batch100,
#       # b:jwks, b:jwks304
#
# Needs wrk (Debian package wrk) and Go (to build keysvc, unless KEYSVC is
# the path of a keysvc binary). Ports: PORT_BASE (29100) .. PORT_BASE+4.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
DURATION=${DURATION:-5s}
CONNS=${CONNS:-1 16 64}
ROUNDS=${ROUNDS:-2}
PORT_BASE=${PORT_BASE:-29100}
if [[ -n ${SMOKE:-} ]]; then DURATION=1s CONNS=1 ROUNDS=1; fi
# PIN=1: the load generator and the servers on CPUs of their own.
cli_pin=() srv_pin=()
if [[ -n ${PIN:-} ]]; then
  (($(nproc) >= 2)) || { echo "run.sh: PIN needs two CPUs" >&2; exit 1; }
  command -v taskset >/dev/null || { echo "run.sh: PIN needs taskset (Debian package util-linux)" >&2; exit 1; }
  cli_pin=(taskset -c 0) srv_pin=(taskset -c 1)
fi
command -v wrk >/dev/null || { echo "run.sh: wrk is missing (apt-get install wrk)" >&2; exit 1; }

work=$(mktemp -d /tmp/sidebyside.XXXXXX)
pids=()
cleanup() {
  exec 3>&- 4>&- 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

keysvc=${KEYSVC:-}
if [[ -z $keysvc ]]; then
  keysvc=$work/keysvc
  (cd "$repo" && go build -o "$keysvc" ./cmd/keysvc)
fi

# Request bodies: one 258-byte RFC 8785 payload (already canonical, as a
# careful client sends it), the same payload 100 times for the batches.
data=$work/data && mkdir -p "$data"
payload='{"check_in":"2026-09-02","check_out":"2026-09-05","currency":"SEK","guests":2,"nights":3,"offer_id":"offer:villaakerlyckan.se:2026-09-02/05","price":"3600.00","property":"villaakerlyckan.se","room":"sjostugan","terms":"https://villaakerlyckan.se/terms/2026"}'
printf '%s' "$payload" > "$data/payload.json"
printf '{"payload":%s}' "$payload" > "$data/keysvc-sign.json"
b64=$(printf '%s' "$payload" | base64 -w0)
printf '{"input":"%s"}' "$b64" > "$data/bao-sign.json"
{ printf '{"items":['; for i in $(seq 100); do ((i > 1)) && printf ','; printf '{"payload":%s}' "$payload"; done; printf ']}'; } > "$data/keysvc-batch.json"
{ printf '{"batch_input":['; for i in $(seq 100); do ((i > 1)) && printf ','; printf '{"input":"%s"}' "$b64"; done; printf ']}'; } > "$data/bao-batch.json"
printf '{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}}' > "$data/keysvc-mcp.json"

wait_http() { # url
  for _ in $(seq 100); do curl -fs -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "run.sh: $1 did not answer" >&2; return 1
}

# keysvc, signing path only unless TLOG=1 (the embedded log) or
# TLOG=remote (a log in a process of its own, PORT_BASE+5).
kport=$PORT_BASE
tlog=false tlog_args=() lpid=""
case ${TLOG:-} in
  "") ;;
  remote)
    tlog=remote lport=$((PORT_BASE + 5))
    "${srv_pin[@]}" "$keysvc" tlog serve --dev --data-dir "$work/tlog-data" --listen "127.0.0.1:$lport" >"$work/tlog.log" 2>&1 &
    lpid=$!; pids+=("$lpid")
    wait_http "http://127.0.0.1:$lport/.well-known/vrp/log/v0.1/vkey"
    tlog_args=(--tlog-embedded=false --tlog-url "http://127.0.0.1:$lport") ;;
  *) tlog=true ;;
esac
[[ $tlog == remote ]] || tlog_args=(--tlog-embedded="$tlog")
"${srv_pin[@]}" "$keysvc" serve --dev --data-dir "$work/keysvc-data" --listen "127.0.0.1:$kport" \
  --rate-limit 0 --public-rate-limit 0 "${tlog_args[@]}" >"$work/keysvc.log" 2>&1 &
kpid=$!; pids+=("$kpid")
# JWKS_VERSIONS=N: the dev key is rotated N-1 times (keys rotate --now)
# before anything is measured, so that its JWKS publishes N keys, the
# retired ones with their windows (VRP K2), as a key's JWKS does after
# years of rotations; the floor then serves those same bytes.
rotate_dev() { # data-dir port
  local i
  for ((i = 1; i < ${JWKS_VERSIONS:-1}; i++)); do
    "$keysvc" keys rotate dev --now --yes --reason "bench/sidebyside JWKS_VERSIONS" \
      --data-dir "$1" --server "http://127.0.0.1:$2" >/dev/null
  done
}
wait_http "http://127.0.0.1:$kport/healthz"
rotate_dev "$work/keysvc-data" "$kport"
export SBS_TOKEN; SBS_TOKEN=$(cat "$work/keysvc-data/dev-token")
curl -fs -o "$data/jwks.json" "http://127.0.0.1:$kport/v1/keys/dev/jwks.json"
echo "# JWKS: $(grep -c "\"kid\"" "$data/jwks.json") key(s), $(wc -c <"$data/jwks.json") bytes"
# The JWS signing input keysvc signs for the payload (header.payload, RFC
# 7515 §5.1): raw ed25519.Sign is measured over it around every keysvc batch run.
jws=$(curl -fs -H "Authorization: Bearer $SBS_TOKEN" -H 'Content-Type: application/json' \
  --data-binary @"$data/keysvc-sign.json" "http://127.0.0.1:$kport/v1/keys/dev/sign" | sed 's/.*"jws":"\([^"]*\)".*/\1/')
printf '%s' "${jws%.*}" >"$data/signing-input.txt"
export SBS_ETAG; SBS_ETAG=$(curl -fsI "http://127.0.0.1:$kport/v1/keys/dev/jwks.json" | tr -d '\r' | awk -F': ' 'tolower($1)=="etag"{print $2}')

# A second keysvc build for A/B pairs (KEYSVC_B), on its own data
# directory: its own dev token and key, so its own ETag.
kbpid="" kbport=$((PORT_BASE + 4)) btoken="" betag=""
if [[ -n ${KEYSVC_B:-} ]]; then
  "${srv_pin[@]}" "$KEYSVC_B" serve --dev --data-dir "$work/keysvc-b-data" --listen "127.0.0.1:$kbport" \
    --rate-limit 0 --public-rate-limit 0 "${tlog_args[@]}" >"$work/keysvc-b.log" 2>&1 &
  kbpid=$!; pids+=("$kbpid")
  wait_http "http://127.0.0.1:$kbport/healthz"
  rotate_dev "$work/keysvc-b-data" "$kbport"
  btoken=$(cat "$work/keysvc-b-data/dev-token")
  betag=$(curl -fsI "http://127.0.0.1:$kbport/v1/keys/dev/jwks.json" | tr -d '\r' | awk -F': ' 'tolower($1)=="etag"{print $2}')
fi

# The floors: keysvc bench-floor processes (net/http behind serve's settings).
# Each serves until its standard input (a FIFO held open on fd 3 or 4) closes.
start_floor() { # fd port args...; sets floor_pid
  local fd=$1 port=$2; shift 2
  mkfifo "$work/floor$port"
  "${srv_pin[@]}" "$keysvc" bench-floor --listen "127.0.0.1:$port" "$@" <"$work/floor$port" >"$work/floor$port.out" 2>&1 &
  floor_pid=$!; pids+=("$floor_pid")
  eval "exec $fd>\"$work/floor$port\""
}
sport=$((PORT_BASE + 1)) jport=$((PORT_BASE + 2))
start_floor 3 "$sport" --sign; spid=$floor_pid
start_floor 4 "$jport" --body-file "$data/jwks.json"; jpid=$floor_pid
wait_http "http://127.0.0.1:$jport/"
curl -fs -o /dev/null -X POST -d '{}' "http://127.0.0.1:$sport/"
fetag=$(curl -fsI "http://127.0.0.1:$jport/" | tr -d '\r' | awk -F': ' 'tolower($1)=="etag"{print $2}')

bpid=""
if [[ -n ${BAO:-} ]]; then
  bport=$((PORT_BASE + 3))
  "${srv_pin[@]}" "$BAO" server -dev -dev-root-token-id=root -dev-listen-address="127.0.0.1:$bport" >"$work/bao.log" 2>&1 &
  bpid=$!; pids+=("$bpid")
  wait_http "http://127.0.0.1:$bport/v1/sys/health"
  curl -fs -H 'X-Vault-Token: root' -X POST -d '{"type":"transit"}' "http://127.0.0.1:$bport/v1/sys/mounts/transit"
  curl -fs -H 'X-Vault-Token: root' -X POST -d '{"type":"ed25519"}' "http://127.0.0.1:$bport/v1/transit/keys/bench" >/dev/null
fi

tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime, after the (comm) field
# rss_kib PID: VmRSS, and its anonymous and file-backed parts. The file
# part is the binary's pages mapped into the process, and it depends on the
# page cache: a binary just built (every page cached) maps ~12 MiB more
# through the kernel's fault-around than one read from disk after
# `echo 3 > /proc/sys/vm/drop_caches` (docs/performance.md, session 34).
rss_kib() { awk '/^VmRSS/{r=$2} /^RssAnon/{a=$2} /^RssFile/{f=$2} END{printf "%d (anon %d, file %d)", r, a, f}' "/proc/$1/status"; }

echo "# side by side, $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); payload $(wc -c <"$data/payload.json") bytes, JWS signing input $(wc -c <"$data/signing-input.txt") bytes; tlog $tlog${PIN:+; pinned: wrk on CPU 0, servers on CPU 1}"
echo "# keysvc idle RSS $(rss_kib "$kpid") KiB"
results=$work/results
# With TLOG=remote, log_us/req is the log process's CPU over a keysvc run,
# per request: the work the production layout moves off the node.
printf '%-18s %-14s %5s %10s %10s %8s %8s %9s %9s%s\n' route target conns req/s sig/s p50_us p99_us p99.9_us cpu_us/req "${lpid:+ log_us/req}"
# run ROUTE TARGET PID PORT SCRIPT SIGS_PER_REQ CONNS [ENV...]
run() {
  local route=$1 target=$2 pid=$3 port=$4 script=$5 per=$6 c=$7; shift 7
  local t=$((c < 2 ? 1 : 2)) c0 c1 l0=0 l1=0 out
  c0=$(cpu_ticks "$pid")
  [[ -n $lpid ]] && l0=$(cpu_ticks "$lpid")
  out=$(env "$@" SBS_DATA="$data" SBS_LUA="$here/lua" "${cli_pin[@]}" wrk -t"$t" -c"$c" -d"$DURATION" --timeout 10s \
    -s "$here/lua/$script" "http://127.0.0.1:$port" | grep '^RESULT') || true
  c1=$(cpu_ticks "$pid")
  [[ -n $lpid ]] && l1=$(cpu_ticks "$lpid")
  if [[ -z $out ]]; then echo "run.sh: wrk failed for $target $route at $c connections" >&2; return 1; fi
  local requests=0 rps=0 p50_us=0 p99_us=0 p999_us=0 bad_status=0 socket_errors=0
  eval "${out#RESULT }" # lib.lua's done(): name=value pairs of the fields above
  if ((bad_status + socket_errors > 0)); then echo "run.sh: $target $route: $bad_status bad statuses, $socket_errors socket errors" >&2; fi
  local cpu_us; cpu_us=$(awk -v d=$((c1 - c0)) -v t="$tck" -v n="$requests" 'BEGIN{printf "%.1f", n ? d*1e6/t/n : 0}')
  local sigs; sigs=$(awk -v r="$rps" -v p="$per" 'BEGIN{printf "%.0f", r*p}')
  # The log's CPU counts only for the node's own routes (keysvc, keysvc-b).
  local log_us=-
  [[ -n $lpid && $target == keysvc* ]] && log_us=$(awk -v d=$((l1 - l0)) -v t="$tck" -v n="$requests" 'BEGIN{printf "%.1f", n ? d*1e6/t/n : 0}')
  printf '%-18s %-14s %5d %10.0f %10s %8d %8d %9d %9s%s\n' "$route" "$target" "$c" "$rps" "$sigs" "$p50_us" "$p99_us" "$p999_us" "$cpu_us" "${lpid:+ $(printf '%10s' "$log_us")}"
  echo "$route $target $c $rps $sigs $cpu_us $per $log_us" >>"$results"
}

if [[ -n ${PAIRS:-} ]]; then
  # pair_route NAME: target, PID, port, Lua script and signatures per
  # request of a route ("floor-" routes are the net/http floors').
  pair_route() {
    case $1 in
      sign) echo "keysvc $kpid $kport keysvc-sign.lua 1" ;;
      mcp-transport) echo "keysvc $kpid $kport keysvc-mcp.lua 1" ;;
      batch100) echo "keysvc $kpid $kport keysvc-batch.lua 100" ;;
      jwks) echo "keysvc $kpid $kport jwks.lua 0" ;;
      jwks304) echo "keysvc $kpid $kport jwks304.lua 0" ;;
      floor-sign) echo "floor-net/http $spid $sport floor-sign.lua 1" ;;
      floor-jwks) echo "floor-net/http $jpid $jport jwks.lua 0" ;;
      openbao-sign | openbao-batch100)
        [[ -n $bpid ]] || { echo "run.sh: PAIRS: $1 needs BAO (an OpenBao binary)" >&2; return 1; }
        if [[ $1 == openbao-sign ]]; then echo "openbao $bpid $bport bao-sign.lua 1"; else echo "openbao $bpid $bport bao-batch.lua 100"; fi ;;
      b:*)
        [[ -n $kbpid ]] || { echo "run.sh: PAIRS: $1 needs KEYSVC_B (a second keysvc binary)" >&2; return 1; }
        local r script per; r=$(pair_route "${1#b:}") || return 1
        [[ $r == keysvc\ * ]] || { echo "run.sh: PAIRS: $1: only keysvc routes have a b: twin" >&2; return 1; }
        read -r _ _ _ script per <<<"$r"
        echo "keysvc-b $kbpid $kbport $script $per" ;;
      *) echo "run.sh: PAIRS: unknown route $1" >&2; return 1 ;;
    esac
  }
  # pair_env NAME: the environment of a route's wrk run (KEYSVC_B's token
  # and ETag for its routes).
  pair_env() { if [[ $1 == b:* ]]; then echo "SBS_TOKEN=$btoken SBS_ETAG=$betag"; fi; }
  read -r pa pb <<<"$PAIRS"
  [[ -n $pb ]] || { echo "run.sh: PAIRS needs two routes, e.g. PAIRS=\"jwks jwks304\"" >&2; exit 1; }
  ra=$(pair_route "$pa") rb=$(pair_route "$pb")
  for c in $CONNS; do
    for _ in $(seq "$ROUNDS"); do
      # shellcheck disable=SC2086,SC2046 # the route's fields and environment are separate arguments
      run "$pa" $ra "$c" $(pair_env "$pa")
      # shellcheck disable=SC2086,SC2046
      run "$pb" $rb "$c" $(pair_env "$pb")
    done
  done
  echo
  echo "# pairs: $pa then $pb, $ROUNDS round(s) per level; cpu per request in µs"
  # Besides the means, each round's own rate ratio (b over the a run just
  # before it): their median and range say whether a mean near a line is
  # the routes' difference or this machine's drift between rounds.
  awk -v a="$pa" -v b="$pb" '
    $1 == a { ra[$3] += $4; ca[$3] += $6; last[$3] = $6; lastr[$3] = $4; n[$3]++ }
    $1 == b { rb[$3] += $4; cb[$3] += $6; if ($6 < last[$3]) cheaper[$3]++; q[$3, n[$3]] = lastr[$3] > 0 ? $4 / lastr[$3] : 0 }
    function median(c, k, i, j, t, v) {
      k = n[c]
      for (i = 1; i <= k; i++) v[i] = q[c, i]
      for (i = 2; i <= k; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      lo = v[1]; hi = v[k]
      return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
    }
    END {
      for (c in n) {
        printf "conns=%s %s: %.0f req/s, cpu %.2f | %s: %.0f req/s, cpu %.2f | %s/%s rate %.3f | %s cheaper in %d of %d rounds\n",
          c, a, ra[c] / n[c], ca[c] / n[c], b, rb[c] / n[c], cb[c] / n[c], b, a, rb[c] / ra[c], b, cheaper[c] + 0, n[c]
        md = median(c)
        printf "conns=%s %s/%s rate per round: median %.3f, range %.3f-%.3f\n", c, b, a, md, lo, hi
      }
    }' "$results"
  exit 0
fi

# raw_ed25519 CONNS: raw ed25519.Sign's CPU per signature on the JWS
# signing input, one goroutine, one second. It is taken right before and
# right after keysvc's batch run, and the batch is compared with the mean
# of the two: this machine's CPU per signature drifts by up to 10 % within
# a minute, more than the difference measured.
raw_ed25519() {
  local raw; raw=$("${srv_pin[@]}" "$keysvc" bench-floor --raw-ed25519 "$data/signing-input.txt" | awk '{print $2}')
  printf '%-18s %-14s %5d %10s %10s %8s %8s %9s %9s\n' raw-ed25519 "1 goroutine" "$1" - - - - - "$raw"
  echo "raw ed25519 $1 0 0 $raw 1" >>"$results"
}

for _ in $(seq "$ROUNDS"); do
  for c in $CONNS; do
    run sign keysvc "$kpid" "$kport" keysvc-sign.lua 1 "$c"
    run sign floor-net/http "$spid" "$sport" floor-sign.lua 1 "$c"
    [[ -n $bpid ]] && run sign openbao "$bpid" "$bport" bao-sign.lua 1 "$c"
    raw_ed25519 "$c"
    run batch100 keysvc "$kpid" "$kport" keysvc-batch.lua 100 "$c"
    raw_ed25519 "$c"
    [[ -n $bpid ]] && run batch100 openbao "$bpid" "$bport" bao-batch.lua 100 "$c"
    run mcp-transport keysvc "$kpid" "$kport" keysvc-mcp.lua 1 "$c"
    run jwks keysvc "$kpid" "$kport" jwks.lua 0 "$c"
    run jwks floor-net/http "$jpid" "$jport" jwks.lua 0 "$c"
    run jwks304 keysvc "$kpid" "$kport" jwks304.lua 0 "$c"
    run jwks304 floor-net/http "$jpid" "$jport" jwks304.lua 0 "$c" SBS_ETAG="$fetag"
  done
done
echo "# keysvc RSS after the load $(rss_kib "$kpid") KiB"

# Ratios: mean over rounds of the rate (signatures/s for batches) and of
# the server CPU per signature (per request where nothing is signed).
echo
echo "# ratios (mean over $ROUNDS round(s)); cpu per signature in µs"
awk '
  { k = $1 SUBSEP $2 SUBSEP $3; rate[k] += ($7 > 0 ? $5 : $4); cpu[k] += ($7 > 0 ? $6 / $7 : $6); n[k]++; conns[$3] = 1 }
  $2 == "keysvc" && $8 != "" && $8 != "-" { lcpu[$1 SUBSEP $3] += $8; lcpu[$1 SUBSEP $3 SUBSEP "n"]++ }
  function r(a, b) { return (b > 0 ? sprintf("%.2f", a / b) : "-") }
  function m(arr, k) { return n[k] ? arr[k] / n[k] : 0 }
  function f(x) { return (x > 0 ? sprintf("%.1f", x) : "-") }
  END {
    for (c in conns) {
      ks = m(rate, "sign" SUBSEP "keysvc" SUBSEP c); fl = m(rate, "sign" SUBSEP "floor-net/http" SUBSEP c)
      ob = m(rate, "sign" SUBSEP "openbao" SUBSEP c)
      kb = m(rate, "batch100" SUBSEP "keysvc" SUBSEP c); obb = m(rate, "batch100" SUBSEP "openbao" SUBSEP c)
      mc = m(rate, "mcp-transport" SUBSEP "keysvc" SUBSEP c)
      j = m(rate, "jwks" SUBSEP "keysvc" SUBSEP c); jf = m(rate, "jwks" SUBSEP "floor-net/http" SUBSEP c)
      j3 = m(rate, "jwks304" SUBSEP "keysvc" SUBSEP c); j3f = m(rate, "jwks304" SUBSEP "floor-net/http" SUBSEP c)
      printf "conns=%s sign/floor=%s sign/openbao=%s batch/openbao=%s mcp/sign=%s jwks/floor=%s jwks304/floor=%s jwks304/jwks=%s\n", c, r(ks, fl), r(ks, ob), r(kb, obb), r(mc, ks), r(j, jf), r(j3, j3f), r(j3, j)
      raw = m(cpu, "raw" SUBSEP "ed25519" SUBSEP c); kbc = m(cpu, "batch100" SUBSEP "keysvc" SUBSEP c)
      printf "conns=%s cpu_us: sign keysvc=%.1f floor=%.1f openbao=%s | batch per sig keysvc=%.1f (raw ed25519 %.1f, %+.1f) openbao=%s | jwks keysvc=%.1f 304=%.1f floor=%.1f\n", c,
        m(cpu, "sign" SUBSEP "keysvc" SUBSEP c), m(cpu, "sign" SUBSEP "floor-net/http" SUBSEP c), f(m(cpu, "sign" SUBSEP "openbao" SUBSEP c)),
        kbc, raw, kbc - raw, f(m(cpu, "batch100" SUBSEP "openbao" SUBSEP c)),
        m(cpu, "jwks" SUBSEP "keysvc" SUBSEP c), m(cpu, "jwks304" SUBSEP "keysvc" SUBSEP c), m(cpu, "jwks" SUBSEP "floor-net/http" SUBSEP c)
      if (lcpu["sign" SUBSEP c SUBSEP "n"])
        printf "conns=%s log process cpu_us per signature: sign %.1f, batch %.1f (keysvc tlog serve; not counted in the keysvc cpu above)\n", c,
          lcpu["sign" SUBSEP c] / lcpu["sign" SUBSEP c SUBSEP "n"], lcpu["batch100" SUBSEP c] / lcpu["batch100" SUBSEP c SUBSEP "n"] / 100
    }
  }' "$results"
