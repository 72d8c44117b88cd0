//! `oncegate verify --live` against a real `oncegate sandbox`: a provider that honours
//! the key, one that silently ignores it, a reconciliation read that looks in the wrong
//! place, and capabilities that cannot be checked live. The sandbox's own ledger says
//! what the provider committed.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{API_KEY, Setup, effects_where};

const CHARGE: &str = r#"{"order_id":"V-1","amount":"12.50","memo":"live check"}"#;
const REFUND: &str = r#"{"order_id":"V-2","amount":"3.00"}"#;

/// `oncegate verify --live` on the setup's registry, in front of its sandbox.
fn verify_live(setup: &Setup, capability: &str, args: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["verify", "--live", "--config"])
        .arg(setup.dir.path().join("oncegate.toml"))
        .args(["--capability", capability, "--args", args])
        .args(extra)
        .env("SANDBOX_URL", &setup.sandbox.url)
        .env("SANDBOX_API_KEY", API_KEY)
        .output()
        .expect("the binary runs")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The verification key the report names: how the test finds the provider's effects.
fn key_of(out: &Output) -> String {
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", text(out)));
    report["idempotency_key"].as_str().unwrap().to_owned()
}

#[test]
fn verify_live_says_a_provider_that_honours_the_key_does() {
    let setup = Setup::example();
    // An MCP upstream (charge_card: the key in _meta) and an HTTP one (refund: the
    // Idempotency-Key header), each read back by its reconciliation read.
    for (capability, args, kind) in [
        ("charge_card", CHARGE, "charge"),
        ("refund", REFUND, "refund"),
    ] {
        let out = verify_live(&setup, capability, args, &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        assert!(
            stdout.contains("the provider honours the key")
                && stdout.contains("key honoured: yes; reconciliation read finds the effect: yes"),
            "{stdout}"
        );
        let json = verify_live(&setup, capability, args, &["--json"]);
        assert!(json.status.success(), "{:?}", text(&json));
        let key = key_of(&json);
        let effects = effects_where(
            &setup.sandbox,
            &format!("kind={kind}&idempotency_key={key}"),
        );
        assert_eq!(
            effects.len(),
            1,
            "two requests with one key are one {kind} at a provider that honours it: {effects:#?}"
        );
        let report: Value = serde_json::from_slice(&json.stdout).unwrap();
        assert!(
            report["checks"][1]["detail"]
                .as_str()
                .unwrap()
                .contains(effects[0]["id"].as_str().unwrap()),
            "the repeat answered the effect the ledger holds: {report:#}"
        );
    }
}

#[test]
fn verify_live_says_a_provider_that_ignores_the_key_does_not() {
    let setup = Setup::with_registry(&["charges"], |text| text);
    let out = verify_live(&setup, "charge_card", CHARGE, &["--read-within", "1s"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("the provider does not honour the key")
            && stdout.contains("key honoured: NO"),
        "{stdout}"
    );
    // A live check makes real effects: against a provider that ignores the key, two.
    let charges = effects_where(&setup.sandbox, "kind=charge&order_id=V-1");
    assert_eq!(charges.len(), 2, "{charges:#?}");
    assert_eq!(
        charges[0]["idempotency_key"], charges[1]["idempotency_key"],
        "both carried the one verification key"
    );
    assert_ne!(charges[0]["id"], charges[1]["id"]);
}

#[test]
fn verify_live_fails_a_reconciliation_read_that_cannot_find_the_effect() {
    // The refund's read looks among charges: a wrong path, as a typo would make it.
    let setup = Setup::with_registry(&[], |text| {
        text.replace(
            "url = \"{env.SANDBOX_URL}/v1/refunds?idempotency_key={key}\"",
            "url = \"{env.SANDBOX_URL}/v1/charges?idempotency_key={key}\"",
        )
    });
    let out = verify_live(&setup, "refund", REFUND, &["--read-within", "1s"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("the provider honours the key")
            && stdout.contains("key honoured: yes; reconciliation read finds the effect: NO")
            && stdout.contains("did not find re_"),
        "{stdout}"
    );
    assert_eq!(
        effects_where(&setup.sandbox, "kind=refund&order_id=V-2").len(),
        1
    );
}

#[test]
fn verify_live_refuses_what_it_cannot_check_and_sends_nothing() {
    let setup = Setup::with_registry(&[], |text| {
        // The refund's answer is no longer read for an effect reference.
        text.replacen(
            "effect_ref = \"/id\"\nbody = { order_id = \"{business_ref}\", amount_minor",
            "body = { order_id = \"{business_ref}\", amount_minor",
            1,
        )
    });
    let email = r#"{"order_id":"V-3","to":"a@example.com","template":"receipt"}"#;
    for (capability, args, says) in [
        ("send_email", email, "is `non_idempotent`"),
        ("get_order", r#"{"order_id":"V-3"}"#, "is a `read`"),
        ("refund", REFUND, "declares no effect_ref"),
        (
            "charge_card",
            r#"{"order_id":"V-3","amount":"12.505"}"#,
            "--args",
        ),
    ] {
        let out = verify_live(&setup, capability, args, &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{capability}: {stdout}\n{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "cannot verify `{capability}` live (nothing was sent)"
            )) && stderr.contains(says),
            "{capability}: {stderr}"
        );
    }
    assert_eq!(effects_where(&setup.sandbox, "order_id=V-3").len(), 0);
    assert_eq!(effects_where(&setup.sandbox, "order_id=V-2").len(), 0);
}
