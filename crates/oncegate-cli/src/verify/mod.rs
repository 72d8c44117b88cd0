//! `oncegate verify`: the demo's proof, for a user's own registry.
//!
//! For every non-read capability: lint the key recipe for shapes that cannot be safe,
//! then run the scenarios through a real `Gate` on a scratch store, with a simulated
//! upstream standing in for the real one (no real effect is ever sent): timeout after
//! commit, a late commit (the provider commits after the timeout, and after the first
//! reconciliation read), re-plans that drift every significant argument in every way its
//! normaliser accepts, parallel identical calls, the attempt ceiling, the replay window,
//! and distinct business references. A `keyed` capability is also checked to really
//! thread its key upstream, and its re-execution to be deduplicated by it. Policies are not exercised here (they decide *whether*
//! a call may run, not *how many times*); `check-config` validates them.
//!
//! Here: the recipe lint and the run over every capability. world.rs is what one
//! capability's scenarios share (sample arguments, scratch gates, the simulated
//! provider of simulated.rs); scenarios.rs holds one method per scenario; samples.rs
//! the sample arguments and their drifted spellings; report.rs what is reported.

mod report;
mod samples;
mod scenarios;
mod simulated;
mod world;

use oncegate_core::config::{Capability, Category, OnUnknown, Registry};
use oncegate_core::normalise::Normaliser;
use oncegate_core::template::Source;

pub use report::{Check, Report};
use world::World;

/// Recipe shapes that cannot be safe.
pub fn lint(cap: &Capability) -> Vec<String> {
    let mut findings = Vec::new();
    let key = &cap.key;
    // A non_idempotent capability keyed on free text alone is a config error
    // (oncegate-core config/build): no registry that loads holds one.
    if let (Some(path), Some(up)) = (&key.business_ref, &cap.upstream)
        && let Some(body) = &up.body
    {
        let mut templates = vec![&up.url];
        templates.extend(up.headers.values());
        body.templates(&mut templates);
        let provided = templates.iter().flat_map(|t| t.sources()).any(|s| match s {
            Source::BusinessRef => true,
            Source::Arg(a) => a.root() == path.root(),
            _ => false,
        });
        if !provided {
            findings.push(format!("the business_ref `{path}` reaches the upstream through no argument of its body or URL: the provider cannot tie the effect to it"));
        }
    }
    for s in &key.significant {
        let leaf = s
            .path
            .as_str()
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let moneyish = leaf
            .split(['_', '-'])
            .any(|t| ["amount", "price", "total", "cost", "fee", "sum"].contains(&t));
        if moneyish && matches!(s.normaliser, Normaliser::Text { .. }) {
            findings.push(format!("`{}` looks like an amount but is normalised as {}: \"12.5\" and \"12.50\" would be two intents (use type = \"money\")", s.path, s.normaliser.type_name()));
        }
    }
    if cap.on_unknown == OnUnknown::Reconcile && cap.reconcile.is_none() {
        findings.push("on_unknown = \"reconcile\" but no [capabilities.reconcile] read is declared: every unknown outcome escalates to a human".into());
    }
    if cap.replay_window.is_zero() {
        findings.push(
            "replay_window is 0: every repeat is a new intent, so nothing is ever replayed".into(),
        );
    }
    findings
}

/// Verifies every non-read capability of `registry` as `principal`.
pub async fn verify(registry: &Registry, principal: &str) -> Result<Vec<Report>, String> {
    let mut reports = Vec::new();
    for cap in registry
        .capabilities()
        .iter()
        .filter(|c| c.category != Category::Read)
    {
        let mut findings = lint(cap);
        let checks = if cap.dry_run {
            vec![Check {
                name: "simulation".into(),
                ok: true,
                detail: "skipped: the capability is dry_run, it never executes".into(),
            }]
        } else {
            match World::new(registry, cap, principal).simulate().await {
                Ok(checks) => checks,
                Err(e) => {
                    findings.push(format!("the simulation could not run: {e}"));
                    Vec::new()
                }
            }
        };
        reports.push(Report {
            capability: cap.name.clone(),
            findings,
            checks,
        });
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The example registry, with `edit` applied, loaded from a scratch directory.
    fn example(edit: impl FnOnce(String) -> String) -> (Registry, tempfile::TempDir) {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            examples.join("policies.cedar"),
            dir.path().join("policies.cedar"),
        )
        .unwrap();
        let text = edit(std::fs::read_to_string(examples.join("payments.toml")).unwrap());
        let path = dir.path().join("oncegate.toml");
        std::fs::write(&path, text).unwrap();
        (oncegate_engine::config::load_registry(&path).unwrap(), dir)
    }

    fn check<'r>(reports: &'r [Report], capability: &str, name: &str) -> &'r Check {
        reports
            .iter()
            .find(|r| r.capability == capability)
            .unwrap_or_else(|| panic!("no report for {capability}"))
            .checks
            .iter()
            .find(|c| c.name.starts_with(name))
            .unwrap_or_else(|| panic!("no check `{name}` for {capability}"))
    }

    #[tokio::test]
    async fn the_example_registry_holds_under_late_commits() {
        let (registry, _dir) = example(|t| t);
        let reports = verify(&registry, "planner").await.unwrap();
        for r in &reports {
            assert!(r.ok(), "{r:#?}");
            let late = check(&reports, &r.capability, "late commit");
            assert!(late.detail.contains("1 effect(s)"), "{late:?}");
        }
        for keyed in ["charge_card", "refund"] {
            let threaded = check(&reports, keyed, "key threaded upstream");
            assert!(threaded.ok, "{threaded:?}");
            let dedupe = check(&reports, keyed, "re-execution deduplicated");
            assert!(
                dedupe.ok
                    && dedupe
                        .detail
                        .starts_with("2 execution(s) with the same key"),
                "a keyed repeat re-executes at once and the provider dedupes it: {dedupe:?}"
            );
        }
        // A non-keyed capability waits for the provider's record instead.
        let email = check(&reports, "send_email", "late commit");
        assert!(
            email.detail.contains("from 1 execution(s), then applied"),
            "{email:?}"
        );
    }

    #[tokio::test]
    async fn a_recipe_that_would_duplicate_under_a_late_commit_fails() {
        let (registry, _dir) = example(|t| {
            t.replace(
                "name = \"send_email\"\n",
                "name = \"send_email\"\nsettle_horizon = \"0s\"\n",
            ) + r#"
[[capabilities]]
name = "refund_by_get"
category = "keyed"
on_unknown = "retry"
[capabilities.key]
business_ref = "order_id"
[capabilities.upstream]
kind = "http"
method = "GET"
url = "http://127.0.0.1:9/refund"
idempotency = "argument"
idempotency_arg = "key"
body = { order_id = "{business_ref}" }
"#
        });
        let reports = verify(&registry, "planner").await.unwrap();
        let email = check(&reports, "send_email", "late commit");
        assert!(!email.ok, "{email:?}");
        assert!(
            email.detail.contains("2 effect(s)") && email.detail.contains("settle_horizon 0s"),
            "{email:?}"
        );
        let get = check(&reports, "refund_by_get", "key threaded upstream");
        assert!(
            !get.ok && get.detail.contains("never carries"),
            "a GET sends no body, so the key never arrives: {get:?}"
        );
        // The rest of the example still holds.
        let refund = check(&reports, "refund", "late commit");
        assert!(refund.ok, "{refund:?}");
    }
}
