#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
# package.json, on the Node 22 it needs, also from package.json) against oncegate:
#
#   suite --> proxy.mjs (adds the bearer token) --> oncegate serve --> upstream.mjs
#
# oncegate fronts upstream.mjs (the suite's tools, resources and prompts) with
# oncegate.toml. Every active server scenario runs; expected-failures.yml lists those
# that cannot apply to a tools gateway (docs/mcp-conformance.md says why). The suite
# exits non-zero when a scenario outside that list fails, or when one in it passes.
#
#   bash tests/conformance/run.sh --oncegate target/debug/oncegate [--scenario NAME]
# Installs its packages first (tests/clients/setup.sh conformance, cached).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
oncegate=""
scenario=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --oncegate) oncegate="$2"; shift 2 ;;
    --scenario) scenario=(--scenario "$2"); shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$oncegate" ]] || { echo "run.sh: FATAL: --oncegate BIN (the built oncegate binary) is required" >&2; exit 2; }

bash "$root/tests/clients/setup.sh" conformance
node="$here/node_modules/.bin/node"
work="$(mktemp -d)"
pids=()
cleanup() {
  local pid
  for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -n "${KEEP:-}" ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
# A signal ends the run through the EXIT trap, so no child outlives it.
trap 'exit 143' TERM INT HUP

# Starts a process writing to $work/<name>.log, keeps its pid for cleanup, and waits for
# its "listening on URL" line; the URL is left in $started (not printed: a command
# substitution would run this in a subshell and lose the pid).
started=""
start() {
  local name="$1" pid
  shift
  "$@" >"$work/$name.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 100); do
    if grep -q "listening on" "$work/$name.log"; then
      started="$(grep -m1 "listening on" "$work/$name.log" | awk '{print $NF}')"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "run.sh: FATAL: $name did not start:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

start upstream "$node" "$here/upstream.mjs"
upstream_url="$started"
cp "$here/oncegate.toml" "$work/oncegate.toml"
export UPSTREAM_URL="$upstream_url" CONFORMANCE_TOKEN="conformance-$RANDOM$RANDOM"
start gateway "$oncegate" serve --init --config "$work/oncegate.toml" --listen 127.0.0.1:0 --sweep-every 1h
gateway_url="$started"
start proxy "$node" "$here/proxy.mjs" --target "$gateway_url" --header "Authorization: Bearer $CONFORMANCE_TOKEN"
proxy_url="$started"
echo "conformance: suite -> $proxy_url/mcp -> oncegate $gateway_url -> upstream $upstream_url"

# The suite runs in the background and is waited for, so a signal reaches the traps at
# once (bash defers them while a foreground child runs).
(cd "$work" && exec "$node" "$here/node_modules/@modelcontextprotocol/conformance/dist/index.js" server \
  --url "$proxy_url/mcp" --expected-failures "$here/expected-failures.yml" -o "$work/results" \
  ${scenario[@]+"${scenario[@]}"}) &
pids+=("$!")
status=0
wait "$!" || status=$?
if [[ $status -ne 0 ]]; then
  echo "conformance: the gateway's log:" >&2
  tail -n 50 "$work/gateway.log" >&2
fi
exit $status
