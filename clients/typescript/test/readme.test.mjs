// The README's example, run as written by a new user: `npm pack` of this package,
// installed into a fresh directory, the example compiled there with `tsc --strict`
// against the installed type declarations, and run against a real gateway and sandbox.
// TSC names the compiler (the Rust driver passes the one tests/clients/setup.sh
// installed); TYPE_ROOTS its @types.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { AGENT_TOKEN, SANDBOX_API_KEY, readmeExample, withStack } from "./harness.mjs";

const here = fileURLToPath(new URL("..", import.meta.url));

function npm(args, cwd) {
  return execFileSync("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error"], { cwd, encoding: "utf8" });
}

test("the README's example runs as written from a packed install", () =>
  withStack(async (stack) => {
    const tsc = process.env.TSC;
    const typeRoots = process.env.TYPE_ROOTS;
    assert.ok(tsc && typeRoots, "TSC and TYPE_ROOTS are set (by crates/oncegate-cli/tests/it/typescript_client.rs)");
    const dir = mkdtempSync(join(tmpdir(), "oncegate-ts-readme-"));
    try {
      const packed = join(dir, "pack");
      mkdirSync(packed);
      npm(["pack", "--pack-destination", packed], here);
      const [tarball] = readdirSync(packed).filter((f) => f.endsWith(".tgz"));
      assert.ok(tarball, "npm pack made a tarball");

      const app = join(dir, "app");
      mkdirSync(app);
      writeFileSync(join(app, "package.json"), JSON.stringify({ name: "readme-example", private: true, type: "module" }));
      npm(["install", join(packed, tarball)], app);
      writeFileSync(join(app, "example.ts"), readmeExample(join(here, "README.md")));
      const compiled = spawnSync(
        tsc,
        ["--strict", "--target", "ES2022", "--module", "NodeNext", "--moduleResolution", "NodeNext", "--types", "node", "--typeRoots", typeRoots, "example.ts"],
        { cwd: app, encoding: "utf8" },
      );
      assert.equal(compiled.status, 0, `tsc --strict on the README example:\n${compiled.stdout}${compiled.stderr}`);

      const env = { ...process.env, ONCEGATE_URL: stack.url, ONCEGATE_TOKEN: AGENT_TOKEN, SANDBOX_URL: stack.sandboxUrl, SANDBOX_API_KEY };
      const ran = spawnSync(process.execPath, ["example.js"], { cwd: app, env, encoding: "utf8", timeout: 60_000 });
      assert.equal(ran.status, 0, `the example failed:\n${ran.stdout}${ran.stderr}`);
      const charges = await stack.charges("A-1001");
      assert.equal(charges.length, 1, "one charge for the example's order (the sandbox ignores keys)");
      assert.equal(ran.stdout.trim(), `charged once: ${charges[0].id}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }));
