#!/usr/bin/env bash
# Sequential latency of one charge through each surface (JSON API, /mcp) and each
# upstream kind (HTTP, MCP), side by side in one run, against release binaries on
# loopback. Not in CI. Usage: benches/surfaces.sh [calls-per-row] (default 200).
# Each row runs N distinct charges (execute) and then the same N again (replay).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
n="${1:-200}"
bin="$root/target/release/oncegate"
[[ -x "$bin" ]] || (cd "$root" && cargo build --release -q -p oncegate-cli)
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
cp "$root/examples/payments.toml" "$work/mcp.toml"
cp "$root/examples/policies.cedar" "$work/"
# The same registry with charge_card on the sandbox's HTTP API instead of its MCP server.
python3 - "$work" <<'PY'
import sys
work = sys.argv[1]
s = open(f"{work}/mcp.toml").read()
i = s.index('[capabilities.upstream]\nkind = "mcp"')
j = s.index('# --- refund:')
http = '''[capabilities.upstream]
kind = "http"
url = "{env.SANDBOX_URL}/v1/charges"
timeout = "5s"
effect_ref = "/id"
headers = { Authorization = "Bearer {env.SANDBOX_API_KEY}" }
body = { order_id = "{business_ref}", amount_minor = "{norm.amount.minor}", currency = "{norm.amount.currency}", memo = "{arg.memo}" }

[capabilities.reconcile]
kind = "http"
url = "{env.SANDBOX_URL}/v1/charges?idempotency_key={key}"
found = "/found"
effect_ref = "/charge/id"
result = "/charge"

'''
open(f"{work}/http.toml", "w").write(s[:i] + http + s[j:].replace("sqlite://oncegate.db", "sqlite://http.db"))
open(f"{work}/mcp.toml", "w").write(s.replace("sqlite://oncegate.db", "sqlite://mcp.db"))
PY
export SANDBOX_API_KEY=sk ONCEGATE_TOKEN_PLANNER=tp ONCEGATE_TOKEN_ALICE=ta ONCEGATE_TOKEN_OPS=to \
  ONCEGATE_TOKEN_SUBAGENT=ts ONCEGATE_TOKEN_BOB=tb SANDBOX_URL=http://127.0.0.1:17800 RUST_LOG=warn
"$bin" sandbox --listen 127.0.0.1:17800 >"$work/sandbox.log" 2>&1 &
"$bin" serve --config "$work/http.toml" --listen 127.0.0.1:17801 >"$work/http.log" 2>&1 &
"$bin" serve --config "$work/mcp.toml" --listen 127.0.0.1:17802 >"$work/mcp.log" 2>&1 &
sleep 2
python3 - "$n" <<'PY'
import http.client, json, sys, time
n = int(sys.argv[1])
conns = {}
def post(port, path, body, headers):
    c = conns.setdefault(port, http.client.HTTPConnection("127.0.0.1", port))
    c.request("POST", path, json.dumps(body), headers)
    r = c.getresponse()
    return r.status, r.read()
api = {"Authorization": "Bearer tp", "Content-Type": "application/json"}
mcp = dict(api, **{"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
                   "Mcp-Method": "tools/call", "Mcp-Name": "charge_card"})
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}}
def row(name, port, surface, prefix):
    out = []
    for _ in range(2):  # execute, then replay
        t0 = time.perf_counter()
        for i in range(n):
            args = {"order_id": f"{prefix}-{i}", "amount": "1.00"}
            if surface == "api":
                st, d = post(port, "/v1/calls", {"capability": "charge_card", "arguments": args}, api)
            else:
                st, d = post(port, "/mcp", {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                            "params": {"name": "charge_card", "arguments": args, "_meta": meta}}, mcp)
            assert st == 200, (st, d[:300])
        out.append((time.perf_counter() - t0) / n * 1000)
    print(f"| {name} | {out[0]:.2f} ms | {out[1]:.2f} ms |")
print("| surface, upstream | execute | replay |\n|---|---:|---:|")
for rep in range(2):
    row("JSON API, HTTP upstream", 17801, "api", f"A{rep}")
    row("JSON API, MCP upstream", 17802, "api", f"B{rep}")
    row("/mcp, HTTP upstream", 17801, "mcp", f"C{rep}")
    row("/mcp, MCP upstream", 17802, "mcp", f"D{rep}")
PY
