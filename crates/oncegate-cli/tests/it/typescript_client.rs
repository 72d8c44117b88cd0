//! The TypeScript client (`clients/typescript`) as its users get it: its dev dependencies
//! (`typescript`, `@types/node`) installed by `tests/clients/setup.sh typescript-client`
//! from the package's lock file, its sources compiled with `tsc --strict` (and the
//! committed `dist/` checked equal to that compile, since `npm install
//! ./clients/typescript` installs `dist/` as it is), a type test where a wrong argument
//! to a protected function must not compile, and its `node --test` suite run against
//! this build's `oncegate serve` and `oncegate sandbox` (the harness in
//! `clients/typescript/test/harness.mjs` starts them from `ONCEGATE_BIN`), the README's
//! example included, run from `npm pack`'s tarball installed in a fresh directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::mcp::run_client;

/// Where things are: the package, and its installed dev dependencies.
struct Paths {
    package: PathBuf,
    node_modules: PathBuf,
}

/// Runs the setup part once per test process (the script is cached and locked across
/// the processes nextest runs in parallel).
fn paths() -> &'static Paths {
    static PATHS: OnceLock<Paths> = OnceLock::new();
    PATHS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .unwrap();
        let out = Command::new("bash")
            .arg(root.join("tests/clients/setup.sh"))
            .arg("typescript-client")
            .stdin(Stdio::null())
            .output()
            .expect("run tests/clients/setup.sh");
        assert!(
            out.status.success(),
            "tests/clients/setup.sh typescript-client failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Paths {
            package: root.join("clients/typescript"),
            node_modules: root.join("target/typescript-client/current/node_modules"),
        }
    })
}

fn tsc() -> PathBuf {
    paths().node_modules.join(".bin/tsc")
}

/// `tsc` with the installed `@types` (the package has no node_modules of its own).
fn tsc_in(dir: &Path, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(tsc());
    cmd.current_dir(dir)
        .args(args)
        .arg("--typeRoots")
        .arg(paths().node_modules.join("@types"));
    run_client(cmd, Duration::from_secs(180))
}

/// Every file under `dir`, by path relative to it, with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

#[test]
fn the_typescript_client_compiles_under_tsc_strict_to_the_committed_dist() {
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().to_str().unwrap();
    let (ok, output) = tsc_in(
        &paths().package,
        &["-p", "tsconfig.json", "--outDir", out_dir],
    );
    assert!(
        ok,
        "tsc --strict on clients/typescript/src failed:\n{output}"
    );
    let fresh = files(out.path());
    let committed = files(&paths().package.join("dist"));
    assert!(fresh.len() >= 16, "tsc wrote {} files", fresh.len());
    let stale: Vec<_> = fresh
        .keys()
        .chain(committed.keys())
        .filter(|p| fresh.get(*p) != committed.get(*p))
        .collect();
    assert!(
        stale.is_empty(),
        "clients/typescript/dist differs from a fresh compile of src/ in {stale:?}: \
         run `npm install && npm run build` in clients/typescript and commit dist/"
    );
}

#[test]
fn a_wrong_argument_type_to_a_typescript_protected_function_does_not_compile() {
    // Each `@ts-expect-error` line in test/types/protect.ts must be an error: tsc fails
    // on an expectation that no longer holds, so this passes only while protect() keeps
    // the function's own parameter and return types.
    let dir = paths().package.join("test/types");
    let (ok, output) = tsc_in(&dir, &["-p", "tsconfig.json"]);
    assert!(ok, "tsc --strict --noEmit on test/types failed:\n{output}");
    let source = std::fs::read_to_string(dir.join("protect.ts")).unwrap();
    assert!(
        source.matches("// @ts-expect-error").count() >= 5,
        "{source}"
    );
}

#[test]
fn the_typescript_client_s_suite_passes_against_a_real_gateway_and_sandbox() {
    let package = &paths().package;
    let mut tests: Vec<PathBuf> = std::fs::read_dir(package.join("test"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".test.mjs"))
        .collect();
    tests.sort();
    assert!(tests.len() >= 4, "{tests:?}");
    let mut cmd = Command::new("node");
    cmd.current_dir(package)
        .arg("--test")
        .args(&tests)
        .env("ONCEGATE_BIN", env!("CARGO_BIN_EXE_oncegate"))
        .env("TSC", tsc())
        .env("TYPE_ROOTS", paths().node_modules.join("@types"));
    let started = std::time::Instant::now();
    let (ok, output) = run_client(cmd, Duration::from_secs(600));
    println!(
        "the TypeScript client's suite took {:.1?}",
        started.elapsed()
    );
    assert!(ok, "the TypeScript client's suite failed:\n{output}");
    // The suite ran for real: node's summary counts passes, and nothing was skipped.
    let count = |name: &str| {
        output
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# {name} ")))
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    assert!(count("pass").is_some_and(|n| n >= 20), "{output}");
    assert_eq!(count("fail"), Some(0), "{output}");
    assert_eq!(count("skipped"), Some(0), "{output}");
    assert_eq!(count("cancelled"), Some(0), "{output}");
}
