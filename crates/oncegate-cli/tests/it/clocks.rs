//! One clock decides (issue 31), on one SQLite gateway: its wall clock steps while an
//! email is unknown or a refund waits for an approver (libfaketime, its offset read from
//! a file the test rewrites while the gateway runs), or it restarts with a wrong clock.
//! The store's clock (the kernel's boot clock, from an origin kept in the store) judges
//! the settle horizon and the approval's expiry, so no step, forward or back, gives a
//! second email or runs an approval past its TTL. Each test first checks, on
//! `oncegate_clock_skew_seconds`, that the gateway's wall clock really moved; effects
//! are counted in the sandbox's own ledger.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    Log, Proc, Setup, SteppedClock, call, client, clock_skew, effects, env_refs, faketime_env,
    fault, intent, spawn_logged, sql,
};

/// How long the sandbox takes before it commits an email: well past the gateway's 1 s
/// timeout, so that repeats and sweeps read "not found" for several seconds first.
const COMMIT_AFTER_MS: u64 = 6000;

/// The example registry with 1 s upstream timeouts, room for many reconciliation reads,
/// a settle horizon on `send_email` longer than any of these tests runs (only a clock
/// that jumped could see it pass), and a 4 s approval TTL on `refund`.
fn setup() -> Setup {
    Setup::with_registry(&["emails"], |text| {
        text.replace("timeout = \"5s\"", "timeout = \"1s\"")
            .replace("attempt_ceiling = 5\n", "attempt_ceiling = 1000\n")
            .replacen(
                "name = \"send_email\"\n",
                "name = \"send_email\"\nsettle_horizon = \"60s\"\n",
                1,
            )
            .replacen(
                "name = \"refund\"\n",
                "name = \"refund\"\napproval_ttl = \"4s\"\n",
                1,
            )
    })
}

/// The gateway's wall clock is `offset` seconds off the store's: the step took effect.
fn assert_skew(gw: &Proc, offset: f64) {
    let skew = clock_skew(&gw.url);
    assert!(
        (skew - offset).abs() < 2.0,
        "the gateway's wall clock should be {offset:+} s off the store's, /metrics says {skew:+}"
    );
}

/// How the gateway's wall clock moves once the email is unknown.
enum Move {
    /// The running gateway's clock steps to this offset.
    Step(&'static str),
    /// The gateway is killed and started again with its clock this far off
    /// (`"+200s"`).
    Restart(&'static str),
    /// The machine reboots (the store's timeline belongs to another boot, so it resumes
    /// at the wall clock) and the gateway starts with its clock this far off: the
    /// store's time itself jumps with it, and only the gap rule keeps the horizon.
    Reboot(&'static str),
}

/// `oncegate serve` on `setup`'s store, sweeping every 250 ms, with `env`: the process
/// and its log.
fn gateway(setup: &Setup, env: &[(&'static str, String)]) -> (Proc, Log) {
    spawn_logged(setup.gateway_command(&env_refs(env), "250ms"))
}

/// `send_email` goes unknown (the provider commits 6 s late), the gateway's clock moves
/// by `offset` seconds, and the agent repeats every 400 ms, through the late commit,
/// while the sweep runs every 250 ms: one email, and every answer that names an email
/// names that one. The gateway notices its clock moved, and logs a warning.
fn one_email_while_the_clock_moves(order: &str, how: Move, offset: f64) {
    let setup = setup();
    let clock = SteppedClock::in_dir(setup.dir.path());
    let (mut gw, mut log) = gateway(&setup, &clock.env());
    assert_skew(&gw, 0.0);
    let args = json!({"order_id": order, "to": "ann@example.com", "template": "receipt", "body": "Thanks!"});
    fault(&setup.sandbox, "/v1/emails", "slow", COMMIT_AFTER_MS);
    let started = Instant::now();
    let (_, first) = call(&gw, "send_email", &args);
    assert_eq!(first["status"], "unknown", "{first}");
    let key = first["intent_key"].as_str().unwrap().to_owned();
    match how {
        Move::Step(to) => clock.step_to(to),
        Move::Restart(to) => {
            drop(gw);
            (gw, log) = gateway(&setup, &faketime_env(to));
        }
        Move::Reboot(to) => {
            drop(gw);
            sql(
                &setup.db(),
                &[
                    "UPDATE meta SET value = json_set(value, '$.boot_id', 'a-boot-before') WHERE name = 'clock'",
                ],
            );
            (gw, log) = gateway(&setup, &faketime_env(to));
        }
    }
    assert_skew(&gw, offset);

    let landed = started + Duration::from_millis(COMMIT_AFTER_MS + 1500);
    let deadline = started + Duration::from_secs(40);
    let mut answers = vec![first];
    // Until settled past the late commit; an answer that is not a late commit's ends it
    // early, to be judged once the emails are counted.
    let statuses = loop {
        std::thread::sleep(Duration::from_millis(400));
        let (_, again) = call(&gw, "send_email", &args);
        answers.push(again);
        let statuses: Vec<&str> = answers
            .iter()
            .map(|a| a["status"].as_str().unwrap_or("?"))
            .collect();
        let last = statuses[statuses.len() - 1];
        let settled = matches!(last, "applied" | "replayed");
        if !(settled || matches!(last, "unknown" | "in_flight"))
            || (settled && Instant::now() > landed)
            || Instant::now() > deadline
        {
            break statuses;
        }
    };
    std::thread::sleep(landed.saturating_duration_since(Instant::now()));

    let ledger = effects(&setup.sandbox, "email");
    assert_eq!(
        ledger.len(),
        1,
        "one email for one intent: {ledger:#?}\nanswers: {answers:#?}"
    );
    let id = ledger[0]["id"].as_str().unwrap();
    for answer in &answers {
        if let Some(named) = answer["effect_ref"].as_str() {
            assert_eq!(named, id, "the agent was told another email: {answers:#?}");
        }
    }
    assert!(
        statuses[1..]
            .iter()
            .all(|s| matches!(*s, "unknown" | "in_flight" | "applied" | "replayed"))
            && matches!(statuses[statuses.len() - 1], "applied" | "replayed"),
        "not a late commit's answers, or not settled in 40 s: {statuses:?}\n{answers:#?}"
    );
    let settled = intent(&gw, &key);
    assert_eq!(
        (settled["state"].as_str(), settled["effect_ref"].as_str()),
        (Some("applied"), Some(id)),
        "{settled}"
    );
    if let Move::Reboot(_) = how {
        // After the reboot the store's own time resumed at the fast wall clock (no skew
        // to report): the intent was settled at a store time about 200 s ahead.
        let at: jiff::Timestamp = settled["updated_at"].as_str().unwrap().parse().unwrap();
        let ahead = at.duration_since(jiff::Timestamp::now()).as_secs_f64();
        assert!(
            ahead > 150.0,
            "the store's time should have jumped with the reboot, it is {ahead:+} s: {settled}"
        );
        return;
    }
    // The skew is measured every 10 s: reported, never needed.
    let side = if offset > 0.0 { "ahead of" } else { "behind" };
    let warning = log
        .wait_for(Duration::from_secs(15), |l| {
            l.contains("WARN") && l.contains("this host's clock is off from the store's")
        })
        .unwrap_or_else(|lines| panic!("no skew warning; the log:\n{}", lines.join("\n")));
    assert!(warning.contains(side), "{warning}");
}

#[test]
fn a_gateway_clock_stepped_forward_200_s_sends_one_email() {
    one_email_while_the_clock_moves("CLK-1", Move::Step("+200"), 200.0);
}

#[test]
fn a_gateway_clock_stepped_back_200_s_sends_one_email() {
    one_email_while_the_clock_moves("CLK-2", Move::Step("-200"), -200.0);
}

#[test]
fn a_gateway_restarted_200_s_fast_sends_one_email() {
    one_email_while_the_clock_moves("CLK-3", Move::Restart("+200s"), 200.0);
}

/// A reboot with the clock 200 s fast moves the store's own time 200 s ahead (how long
/// the machine was down is unknown): the horizon of the email unknown across it counts
/// from the resumption, so the late commit is still found. One email.
#[test]
fn a_reboot_with_the_clock_200_s_fast_sends_one_email() {
    one_email_while_the_clock_moves("CLK-6", Move::Reboot("+200s"), 0.0);
}

/// A refund above 100.00 waits for an approver, with a 4 s TTL; the gateway's clock
/// steps back 200 s, and an approver approves 5.5 s after the ask. By the store's clock
/// the approval has expired: refused with `OG-0003`, and no refund is made. (One asked
/// and approved in time after the step is made, once.)
#[test]
fn an_approval_does_not_outlive_its_ttl_when_the_clock_steps_back() {
    let setup = setup();
    let clock = SteppedClock::in_dir(setup.dir.path());
    let gw = setup.gateway_sweeping(&env_refs(&clock.env()), "250ms");
    let args = json!({"order_id": "CLK-4", "amount": "250.00"});
    let (code, held) = call(&gw, "refund", &args);
    // The approval was asked (and its expiry set) before the answer: the TTL is
    // counted from here at the latest.
    let asked = Instant::now();
    assert_eq!(
        (code, held["status"].as_str()),
        (202, Some("pending_approval")),
        "{held}"
    );
    let id = held["approval_id"].as_str().unwrap().to_owned();
    clock.step_to("-200");
    assert_skew(&gw, -200.0);

    // In time, after the step: the refund is made.
    let (_, in_time) = call(
        &gw,
        "refund",
        &json!({"order_id": "CLK-5", "amount": "150.00"}),
    );
    let (_, approved) = approve(&gw, in_time["approval_id"].as_str().unwrap());
    assert_eq!(approved["status"], "applied", "{approved}");

    let past_ttl = asked + Duration::from_millis(5500);
    std::thread::sleep(past_ttl.saturating_duration_since(Instant::now()));
    approval_expired(&gw, &id, "approved past its TTL");
    // The agent's repeat hears the same, and nothing runs.
    let (_, again) = call(&gw, "refund", &args);
    assert_eq!(again["reason"]["code"], "OG-0003", "{again}");
    let refunds = effects(&setup.sandbox, "refund");
    assert_eq!(
        refunds
            .iter()
            .map(|r| r["order_id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["CLK-5"],
        "no refund past the approval's TTL: {refunds:#?}"
    );
}

/// A refund waits for an approver (4 s TTL); the machine goes down for 5 s and boots
/// with its clock 600 s slow, so the store's timeline resumes at the newest instant it
/// held and cannot count the downtime. The approval pending across the reboot has
/// expired (the gap counted as endless): approving it right after the start is refused
/// with `OG-0003`, and no refund is made.
#[test]
fn an_approval_pending_across_a_reboot_has_expired() {
    let setup = setup();
    let gw = setup.gateway_sweeping(&[], "250ms");
    let args = json!({"order_id": "CLK-7", "amount": "250.00"});
    let (code, held) = call(&gw, "refund", &args);
    assert_eq!(
        (code, held["status"].as_str()),
        (202, Some("pending_approval")),
        "{held}"
    );
    let id = held["approval_id"].as_str().unwrap().to_owned();
    drop(gw);
    std::thread::sleep(Duration::from_secs(5));
    sql(
        &setup.db(),
        &[
            "UPDATE meta SET value = json_set(value, '$.boot_id', 'a-boot-before') WHERE name = 'clock'",
        ],
    );
    let (gw, _log) = gateway(&setup, &faketime_env("-600s"));
    approval_expired(&gw, &id, "approved across a reboot, 5 s after its 4 s TTL");
    assert!(
        effects(&setup.sandbox, "refund").is_empty(),
        "no refund past the approval's TTL"
    );
}

/// Approving `id` now is refused as expired (`OG-0003`).
fn approval_expired(gw: &Proc, id: &str, what: &str) {
    let (status, body) = approve(gw, id);
    let code = body["reason"]["code"]
        .as_str()
        .or_else(|| body["error"]["code"].as_str());
    assert_eq!(code, Some("OG-0003"), "{what} (HTTP {status}): {body}");
}

/// `POST /v1/approvals/{id}/approve` as an approver: (HTTP status, body).
fn approve(gw: &Proc, id: &str) -> (u16, Value) {
    let r = client()
        .post(format!("{}/v1/approvals/{id}/approve", gw.url))
        .bearer_auth("tok-alice")
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}
