//! The embedded store is single-process, and says so: a second `oncegate serve` on one
//! SQLite file is refused with a message naming PostgreSQL, the first keeps serving,
//! CLI commands still open the store beside it, and once the first stops a new server
//! starts. Real processes.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::oncegate;
use crate::support::{Proc, Setup, client, effects, spawn};

/// Waits for a `serve` that must refuse to start: its exit status, stderr and stdout.
fn refused(mut second: std::process::Child) -> (std::process::ExitStatus, String, String) {
    let started = Instant::now();
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = second.kill();
            let _ = second.wait();
            panic!("the second serve did not exit within 30 s: it is serving the same file");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let mut stdout = String::new();
    second
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    (status, stderr, stdout)
}

fn charge(gw: &Proc, order: &str) -> Value {
    client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .json(&json!({"capability": "charge_card", "arguments": {"order_id": order, "amount": "3.00"}}))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

#[test]
fn a_second_serve_on_one_sqlite_file_is_refused_and_the_first_keeps_serving() {
    let setup = Setup::example();
    let first = setup.gateway();
    assert_eq!(charge(&first, "SW-1")["status"], "applied");

    // The second server, on the same file: it must exit by itself, non-zero.
    let second = setup
        .gateway_command(&[], "1h")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, stderr, stdout) = refused(second);
    assert!(!status.success(), "refused: {stderr}");
    assert!(!stdout.contains("listening"), "it never listened: {stdout}");
    assert!(stderr.contains("PostgreSQL"), "names PostgreSQL: {stderr}");
    assert!(
        stderr.contains("already serves") && stderr.contains("oncegate.db"),
        "says what holds which file: {stderr}"
    );
    assert!(stderr.contains("OG-0031"), "carries its code: {stderr}");

    // The first keeps serving.
    assert_eq!(charge(&first, "SW-2")["status"], "applied");
    assert_eq!(charge(&first, "SW-1")["status"], "replayed");
    // Commands that read the store still work beside the server.
    let cfg = setup.dir.path().join("oncegate.toml");
    let cfg = cfg.to_str().unwrap();
    for args in [
        vec!["audit", "verify", "--config", cfg],
        vec!["intents", "list", "--config", cfg, "--json"],
    ] {
        let out = oncegate(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Once the first stops, a new server starts on the file and carries on.
    drop(first);
    let next = setup.gateway();
    assert_eq!(charge(&next, "SW-2")["status"], "replayed");
    assert_eq!(effects(&setup.sandbox, "charge").len(), 2);
}

/// One lock per file, whatever the path (issue 32): a second `serve` whose config
/// reaches the same SQLite file through a symlink, or through a hard link, is refused
/// too, and the first keeps serving alone.
#[test]
fn a_second_serve_through_a_symlink_or_a_hard_link_is_refused() {
    let setup = Setup::example();
    let first = setup.gateway();
    assert_eq!(charge(&first, "SL-1")["status"], "applied");
    let dir = setup.dir.path();
    let text = std::fs::read_to_string(dir.join("oncegate.toml")).unwrap();
    std::os::unix::fs::symlink(dir.join("oncegate.db"), dir.join("alias.db")).unwrap();
    std::fs::hard_link(dir.join("oncegate.db"), dir.join("hard.db")).unwrap();
    for other in ["alias", "hard"] {
        let config = dir.join(format!("{other}.toml"));
        std::fs::write(
            &config,
            text.replace("sqlite://oncegate.db", &format!("sqlite://{other}.db")),
        )
        .unwrap();
        let cmd = setup.gateway_command(&[], "1h");
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let mut second = std::process::Command::new(cmd.get_program());
        for a in &args {
            second.arg(if a.ends_with("oncegate.toml") {
                config.to_str().unwrap()
            } else {
                a
            });
        }
        for (k, v) in cmd.get_envs() {
            if let Some(v) = v {
                second.env(k, v);
            }
        }
        let child = second
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (status, stderr, _) = refused(child);
        assert!(!status.success(), "{other}: refused: {stderr}");
        assert!(
            stderr.contains("already serves") && stderr.contains("OG-0031"),
            "{other}: {stderr}"
        );
    }
    assert_eq!(charge(&first, "SL-2")["status"], "applied");
    assert_eq!(effects(&setup.sandbox, "charge").len(), 2);
}

fn email(gw: &Proc, order: &str) -> Value {
    client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .json(&json!({"capability": "send_email", "arguments": {"order_id": order, "to": "ann@example.com", "template": "receipt", "body": "Thanks"}}))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// The database file and what SQLite keeps beside it, as a file-level backup takes
/// them (and a restore puts them back).
fn copy_store(from: &std::path::Path, to: &std::path::Path) {
    for ext in ["", "-wal", "-shm"] {
        let name = format!("oncegate.db{ext}");
        let _ = std::fs::remove_file(to.join(&name));
        if from.join(&name).exists() {
            std::fs::copy(from.join(&name), to.join(&name)).unwrap();
        }
    }
}

/// Issue 32: a store restored from a backup is not served as current. Backup, one
/// more email, restore: `serve` refuses (OG-0031, naming `--accept-rollback`); with
/// the flag, the email the restored store forgot is read from the provider before
/// anything is sent, and replayed. Before, the restored store served and the repeat
/// sent a second email.
#[test]
fn a_store_restored_from_a_backup_is_refused_until_the_rollback_is_accepted() {
    let setup = Setup::example();
    let dir = setup.dir.path();
    let backup = tempfile::tempdir().unwrap();
    let first = setup.gateway();
    assert_eq!(email(&first, "RB-1")["status"], "applied");
    drop(first);
    copy_store(dir, backup.path());
    let second = setup.gateway();
    assert_eq!(email(&second, "RB-2")["status"], "applied");
    drop(second);
    copy_store(backup.path(), dir);

    let child = setup
        .gateway_command(&[], "1h")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, stderr, stdout) = refused(child);
    assert!(!status.success(), "refused: {stderr}");
    assert!(!stdout.contains("listening"), "it never listened: {stdout}");
    assert!(
        stderr.contains("OG-0031")
            && stderr.contains("--accept-rollback")
            && stderr.contains("behind"),
        "says what happened and how to proceed: {stderr}"
    );

    let accepted = spawn(setup.serve_command(&[], "1h", &["--accept-rollback"]));
    let again = email(&accepted, "RB-2");
    assert_eq!(again["status"], "replayed", "{again}");
    assert_eq!(email(&accepted, "RB-1")["status"], "replayed");
    assert_eq!(
        effects(&setup.sandbox, "email").len(),
        2,
        "one email per intent"
    );
    drop(accepted);
    // The anchor names the store as it is now: a plain restart serves.
    let next = setup.gateway();
    assert_eq!(email(&next, "RB-2")["status"], "replayed");
    assert_eq!(effects(&setup.sandbox, "email").len(), 2);
}
