#!/usr/bin/env bash
# Installs the real MCP clients the integration tests drive (crates/oncegate-cli/tests/it/mcp.rs):
#   - PyPI `mcp` into a virtualenv at target/mcp-clients/venv (python/requirements.txt),
#   - npm `@modelcontextprotocol/sdk` into node/node_modules (`npm ci` from the lock file).
# Idempotent and cached: a stamp holding a hash of the requirement files skips the work
# when nothing changed. Safe to run concurrently (nextest runs tests in parallel
# processes, each of which may call it): one flock serialises the runs.
# This script is the only place these clients are installed; .ci/run and the Rust test
# harness both call it.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/mcp-clients"
venv="$out/venv"
node_dir="$here/node"
mkdir -p "$out"

exec 9>"$out/.lock"
flock 9

fingerprint() {
  {
    cat "$here/setup.sh" "$here/python/requirements.txt" "$node_dir/package.json" "$node_dir/package-lock.json"
    python3 --version 2>&1
    node --version 2>&1
  } | sha256sum | cut -d' ' -f1
}

for tool in python3 node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "mcp-clients: FATAL: $tool is not on PATH" >&2; exit 1; }
done

want="$(fingerprint)"
stamp="$out/stamp"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" && -d "$node_dir/node_modules/@modelcontextprotocol/sdk" ]]; then
  exit 0
fi
rm -f "$stamp"

echo "mcp-clients: creating the Python virtualenv at $venv" >&2
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  -r "$here/python/requirements.txt" >&2
"$venv/bin/python" -c 'import mcp, mcp_types; from mcp.client.client import Client' >&2

echo "mcp-clients: npm ci in $node_dir" >&2
(cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
node -e 'require.resolve("@modelcontextprotocol/sdk/package.json", {paths: [process.argv[1]]})' "$node_dir" >&2

echo "$want" >"$stamp"
echo "mcp-clients: ready" >&2
