//! Issue 9, sections 2, 3 and 5 (readiness): a lost, edited or truncated store never
//! turns into a second effect. Real `oncegate sandbox` / `serve` processes, a real
//! SQLite file edited behind the gateway's back as an operator's SQLite client would.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::oncegate;
use crate::support::{Proc, Setup, client, effects, sql};

fn call(gw: &Proc, arguments: Value) -> (u16, Value) {
    let r = client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .json(&json!({"capability": "send_email", "arguments": arguments}))
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(Value::Null))
}

fn email() -> Value {
    json!({"order_id": "S-1", "to": "ann@example.com", "template": "receipt", "body": "Thanks!"})
}

fn config(setup: &Setup) -> String {
    setup.dir.path().join("oncegate.toml").display().to_string()
}

/// Applies one email and stops the gateway: the store holds one applied intent.
fn applied_then_stopped(setup: &Setup) {
    let gw = setup.gateway();
    let (_, first) = call(&gw, email());
    assert_eq!(first["status"], "applied", "{first}");
    drop(gw);
    assert_eq!(effects(&setup.sandbox, "email").len(), 1);
}

#[test]
fn a_lost_store_stops_serve_and_nothing_is_sent_again() {
    // The provider ignores keys: only the gateway's store stands between a repeat and
    // a second email.
    let setup = Setup::new(&["emails"]);
    applied_then_stopped(&setup);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", setup.db().display()));
    }
    let out = setup
        .serve_command(&[], "1h", &[])
        .output()
        .expect("serve runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "serve started on a lost store: {stderr}"
    );
    assert!(
        stderr.contains("does not exist")
            && stderr.contains("oncegate init")
            && stderr.contains("re-execute"),
        "{stderr}"
    );
    assert!(!setup.db().exists(), "serve created a store");

    // A zero-byte file (a volume mounted over an empty file) is refused the same way.
    std::fs::write(setup.db(), b"").unwrap();
    let out = setup.serve_command(&[], "1h", &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("is empty"),
        "{stderr}"
    );
    // So is a SQLite file that is not oncegate's.
    std::fs::remove_file(setup.db()).unwrap();
    sql_create(&setup.db());
    let out = setup.serve_command(&[], "1h", &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("not an oncegate store"),
        "{stderr}"
    );
    assert_eq!(
        effects(&setup.sandbox, "email").len(),
        1,
        "nothing was sent again"
    );

    // `init` is the explicit step; it refuses to overwrite, and serve then starts.
    std::fs::remove_file(setup.db()).unwrap();
    let cfg = config(&setup);
    let init = oncegate(&["init", "--config", &cfg]);
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let again = oncegate(&["init", "--config", &cfg]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    let migrate = oncegate(&["migrate", "--config", &cfg]);
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    // The lost store's serve anchor is still beside the file: the new store is not
    // the one it anchored, so serve says so (a fresh store forgets every intent of the
    // lost one), and starts once that is accepted, reading forgotten intents first.
    let out = setup.serve_command(&[], "1h", &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("belongs to store")
            && stderr.contains("--accept-rollback"),
        "{stderr}"
    );
    let _gw = crate::support::spawn(setup.serve_command(&[], "1h", &["--accept-rollback"]));
}

fn sql_create(db: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn =
            sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", db.display()))
                .await
                .unwrap();
        sqlx::query("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    });
}

fn verify(setup: &Setup, extra: &[&str]) -> (bool, String) {
    let cfg = config(setup);
    let mut args = vec!["audit", "verify", "--config", &cfg];
    args.extend_from_slice(extra);
    let out = oncegate(&args);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn an_edited_intent_row_is_refused_and_found_by_verify() {
    let setup = Setup::new(&["emails"]);
    applied_then_stopped(&setup);
    assert!(verify(&setup, &[]).0);
    // applied -> not_applied with a SQLite client while the gateway is stopped.
    sql(
        &setup.db(),
        &[
            "UPDATE intents SET state = 'not_applied', body = json_set(body, '$.state', 'not_applied')",
        ],
    );
    let (ok, text) = verify(&setup, &[]);
    assert!(
        !ok && text.contains("BROKEN ROW") && text.contains("edited row"),
        "{text}"
    );

    // The listing still answers, and names the row it cannot trust.
    let out = oncegate(&["intents", "list", "--config", &config(&setup)]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("UNREADABLE"), "{listed}");

    let gw = setup.gateway();
    let (code, again) = call(&gw, email());
    assert_eq!(again["status"], "refused", "{again}");
    assert_eq!(again["reason"]["code"], "OG-0030", "{again}");
    assert_eq!(code, 409, "{again}");
    assert_eq!(
        effects(&setup.sandbox, "email").len(),
        1,
        "the repeat sent nothing"
    );
}

#[test]
fn a_deleted_intent_row_is_refused_and_found_by_verify() {
    let setup = Setup::new(&["emails"]);
    applied_then_stopped(&setup);
    sql(&setup.db(), &["DELETE FROM intents"]);
    let (ok, text) = verify(&setup, &[]);
    assert!(!ok && text.contains("deleted row"), "{text}");
    let gw = setup.gateway();
    let (_, again) = call(&gw, email());
    assert_eq!(again["status"], "refused", "{again}");
    assert_eq!(again["reason"]["code"], "OG-0030", "{again}");
    assert_eq!(
        effects(&setup.sandbox, "email").len(),
        1,
        "the repeat sent nothing"
    );
}

#[test]
fn an_anchor_catches_the_newest_record_of_every_shard_dropped() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    for n in 0..6 {
        let (_, o) = call(
            &gw,
            json!({"order_id": format!("A-{n}"), "to": "ann@example.com", "template": "receipt"}),
        );
        assert_eq!(o["status"], "applied", "{o}");
    }
    drop(gw);
    let anchor_file = setup.dir.path().join("anchors.jsonl");
    let cfg = config(&setup);
    let out = oncegate(&[
        "audit",
        "anchor",
        "--config",
        &cfg,
        "--out",
        anchor_file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!line["heads"].as_object().unwrap().is_empty(), "{line}");
    let (ok, text) = verify(&setup, &["--anchor", anchor_file.to_str().unwrap()]);
    assert!(ok, "{text}");

    sql(
        &setup.db(),
        &["DELETE FROM audit WHERE id IN (SELECT MAX(id) FROM audit GROUP BY shard)"],
    );
    let (ok, text) = verify(&setup, &["--anchor", anchor_file.to_str().unwrap()]);
    assert!(!ok && text.contains("records were dropped"), "{text}");
}

#[test]
fn readyz_is_not_ready_while_another_process_holds_the_write_lock() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let ready = |gw: &Proc| {
        client()
            .get(format!("{}/readyz", gw.url))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(ready(&gw), 200);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut conn = rt.block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", setup.db().display()))
            .await
            .unwrap();
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut c)
            .await
            .unwrap();
        c
    });
    let started = Instant::now();
    assert_eq!(ready(&gw), 503, "ready while every write would fail");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "readiness waited out the busy timeout: {:?}",
        started.elapsed()
    );
    rt.block_on(async {
        sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
    });
    assert_eq!(ready(&gw), 200, "ready again once the lock is released");
}

/// Issue 32: a control deleted behind the gateway's back never reopens what it closed.
/// A deleted reservation does not make room in its budget: the budget refuses
/// (`OG-0030`) until an admin reconciles it (`oncegate limits reconcile`), after which
/// it is full again. A deleted kill switch stays on. `audit verify` reports both. (On
/// the code before, the third charge went through and the switched-off email was sent.)
#[test]
fn a_deleted_reservation_or_kill_switch_never_reopens_what_it_closed() {
    let setup = Setup::with_registry(&[], |text| {
        text.replacen(
            "# --- refund:",
            "[[capabilities.limits]]\nname = \"daily\"\nmax = 2\nwindow = \"24h\"\n\n# --- refund:",
            1,
        )
    });
    let gw = setup.gateway();
    let charge = |order: &str| {
        let r = client()
            .post(format!("{}/v1/calls", gw.url))
            .bearer_auth("tok-planner")
            .json(&json!({"capability": "charge_card", "arguments": {"order_id": order, "amount": "10.00"}}))
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().unwrap_or(Value::Null))
    };
    // A refusal's code, as a call's reason or as an error envelope.
    let code = |v: &Value| {
        [&v["reason"]["code"], &v["error"]["code"], &v["code"]]
            .into_iter()
            .find(|c| c.is_string())
            .cloned()
            .unwrap_or(Value::Null)
    };
    for order in ["L-1", "L-2"] {
        let (_, done) = charge(order);
        assert_eq!(done["status"], "applied", "{done}");
    }
    let (_, full) = charge("L-3");
    assert_eq!(code(&full), "OG-0027", "the budget holds two: {full}");

    sql(
        &setup.db(),
        &["DELETE FROM reservations WHERE rowid = (SELECT MIN(rowid) FROM reservations)"],
    );
    let (status, refused) = charge("L-3");
    assert_eq!(
        code(&refused),
        "OG-0030",
        "a deleted reservation makes no room: {status} {refused}"
    );
    assert_eq!(effects(&setup.sandbox, "charge").len(), 2);
    let (ok, report) = verify(&setup, &[]);
    assert!(
        !ok && report.contains("the ledger of limit daily"),
        "{report}"
    );

    let reconciled = oncegate(&[
        "limits",
        "reconcile",
        "daily",
        "--url",
        &gw.url,
        "--token",
        "tok-ops",
        "--reason",
        "restored after the incident",
    ]);
    assert!(
        reconciled.status.success(),
        "{}",
        String::from_utf8_lossy(&reconciled.stderr)
    );
    let (_, full) = charge("L-3");
    assert_eq!(
        code(&full),
        "OG-0027",
        "full again after reconciling: {full}"
    );
    assert_eq!(effects(&setup.sandbox, "charge").len(), 2);

    let killed = client()
        .put(format!(
            "{}/v1/admin/kill-switches/capability:send_email",
            gw.url
        ))
        .bearer_auth("tok-ops")
        .json(&json!({"killed": true, "reason": "phishing"}))
        .send()
        .unwrap();
    assert!(killed.status().is_success());
    sql(&setup.db(), &["DELETE FROM kill_switches"]);
    // Past the cache's freshness: the gateway reads the switches again.
    std::thread::sleep(Duration::from_millis(700));
    let (_, email) = call(&gw, email());
    assert_ne!(
        email["status"], "applied",
        "a deleted switch stays on: {email}"
    );
    assert_eq!(effects(&setup.sandbox, "email").len(), 0);
    let (ok, report) = verify(&setup, &[]);
    assert!(
        !ok && report.contains("kill switch capability:send_email"),
        "{report}"
    );
}
