//! `/metrics` as Prometheus's own linter reads it: `promtool check metrics` is clean on a
//! gateway that has answered nothing yet (every family it can export at zero is there,
//! with HELP and TYPE) and after a charge, a replay and a read; a read counts as
//! `outcome="read"`, never `applied`.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::support::{Proc, Setup, call, client, promtool};

fn scrape(gw: &Proc) -> String {
    client()
        .get(format!("{}/metrics", gw.url))
        .send()
        .unwrap()
        .text()
        .unwrap()
}

/// `promtool check metrics` on `text`: its complaints (empty when clean).
fn lint(text: &str) -> String {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        String::new()
    } else {
        said
    }
}

/// The value of the series written exactly as `series` (name and labels), if exported.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn metrics_pass_promtool_from_the_first_scrape_and_reads_count_as_reads() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();

    let first = scrape(&gw);
    assert_eq!(lint(&first), "", "promtool on the first scrape:\n{first}");
    for series in [
        r#"oncegate_decisions_total{capability="charge_card",outcome="applied"}"#,
        r#"oncegate_decisions_total{capability="charge_card",outcome="pending_approval"}"#,
        r#"oncegate_decisions_total{capability="get_order",outcome="read"}"#,
        r#"oncegate_duplicates_prevented_total{capability="charge_card"}"#,
        r#"oncegate_alerts_total{capability="charge_card",kind="replay_storm"}"#,
        "oncegate_auth_failures_total",
        r#"oncegate_connections_refused_total{cap="per_address"}"#,
        r#"oncegate_reconcile_claims_total{result="taken"}"#,
    ] {
        assert_eq!(
            value(&first, series),
            Some(0.0),
            "{series} at zero:\n{first}"
        );
    }
    assert!(
        first.contains("# HELP oncegate_decisions_total "),
        "{first}"
    );

    let charge = json!({"order_id": "M-1", "amount": 1250, "memo": "metrics"});
    assert_eq!(call(&gw, "charge_card", &charge).0, 200);
    assert_eq!(call(&gw, "charge_card", &charge).0, 200);
    let (code, read) = call(&gw, "get_order", &json!({"order_id": "M-1"}));
    assert_eq!(code, 200, "{read}");

    let after = scrape(&gw);
    assert_eq!(lint(&after), "", "promtool after calls:\n{after}");
    let decisions = |outcome: &str, cap: &str| {
        value(
            &after,
            &format!(r#"oncegate_decisions_total{{capability="{cap}",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(decisions("applied", "charge_card"), Some(1.0), "{after}");
    assert_eq!(decisions("replayed", "charge_card"), Some(1.0), "{after}");
    assert_eq!(decisions("read", "get_order"), Some(1.0), "{after}");
    assert_eq!(decisions("applied", "get_order"), None, "{after}");
}
