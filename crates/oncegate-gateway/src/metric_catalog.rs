//! Every metric family the process exports, in one table: its type, labels and HELP
//! text. The recorder is described from it at start, the families whose label values
//! are known (none, a fixed set, or one per capability) are exported at zero before
//! their first event, so a dashboard or an alert rule sees `0` rather than nothing, and
//! the metric table in docs/guide/tracing.md is checked against it (`metric_table`).
//!
//! The counters themselves are incremented where the event happens (engine, store,
//! gateway); a family named there and missing here fails `every_family_is_described`.

use metrics::Unit;
use oncegate_core::config::{Category, Registry};
use oncegate_core::intent::Status;
use oncegate_engine::Doubt;

/// A metric family's type, as Prometheus spells it (histograms render as summaries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[cfg(test)]
impl Kind {
    /// The spelling docs/guide/tracing.md's table shows.
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "summary",
        }
    }
}

/// One family.
#[derive(Debug)]
pub(crate) struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

const fn family(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Family {
    Family {
        name,
        kind,
        labels,
        help,
    }
}

use Kind::{Counter, Gauge, Histogram};

/// Every family, in the order docs/guide/tracing.md lists them.
pub(crate) const FAMILIES: &[Family] = &[
    family(
        "oncegate_decisions_total",
        Counter,
        &["capability", "outcome"],
        "Decisions answered, by outcome: a status, `claimed` for a two-phase claim, `read` for a read capability",
    ),
    family(
        "oncegate_duplicates_prevented_total",
        Counter,
        &["capability"],
        "Repeats answered from the record (replayed or in flight) instead of executed again",
    ),
    family(
        "oncegate_unknown_intents_open",
        Gauge,
        &[],
        "Intents whose outcome is unknown at the last /v1/unknown listing",
    ),
    family(
        "oncegate_alerts_total",
        Counter,
        &["capability", "kind"],
        "Alerts raised on a decision (cross_run, breaker_tripped, replay_storm, approval_queue_full)",
    ),
    family(
        "oncegate_stale_effects_total",
        Counter,
        &["capability"],
        "Upstream answers that arrived after their claim's lease had expired",
    ),
    family(
        "oncegate_not_sent_disproved_total",
        Counter,
        &["capability"],
        "Attempts classified not sent that a reconciliation read found applied",
    ),
    family(
        "oncegate_upstream_seconds",
        Histogram,
        &["capability"],
        "Time spent waiting for the upstream, per attempt",
    ),
    family(
        "oncegate_reconcile_claims_total",
        Counter,
        &["result"],
        "Reconciliation claims of the sweep: taken, or held by another replica",
    ),
    family(
        "oncegate_read_backs_total",
        Counter,
        &["capability", "result"],
        "Read-backs of applied intents by the sweep: found, not_found, undecidable",
    ),
    family(
        "oncegate_provider_doubts_total",
        Counter,
        &["capability", "doubt"],
        "Doubts raised about a provider (reconciliation_unproven, keys_ignored)",
    ),
    family(
        "oncegate_limit_refusals_total",
        Counter,
        &["limit"],
        "Calls refused because a spend or action limit was reached",
    ),
    family(
        "oncegate_limit_remaining",
        Gauge,
        &["limit", "principal"],
        "What a limit has left in its current window, at the last listing",
    ),
    family(
        "oncegate_findings_total",
        Counter,
        &["rule", "kind"],
        "Findings of the detection job (duplicate, bypass)",
    ),
    family(
        "oncegate_detection_runs_total",
        Counter,
        &["rule"],
        "Detection runs this replica made",
    ),
    family(
        "oncegate_finding_deliveries_total",
        Counter,
        &["result"],
        "Findings sent to the alert webhook: delivered or failed",
    ),
    family(
        "oncegate_clock_skew_seconds",
        Gauge,
        &[],
        "This process's wall clock minus the store's, at the last check",
    ),
    family(
        "oncegate_store_commit_seconds",
        Histogram,
        &[],
        "Time of one durable store commit (a group of writes)",
    ),
    family(
        "oncegate_store_pool_acquire_seconds",
        Histogram,
        &[],
        "Time to take a PostgreSQL connection from the pool",
    ),
    family(
        "oncegate_store_pool_connections",
        Gauge,
        &["state"],
        "PostgreSQL pool connections, in_use or idle",
    ),
    family(
        "oncegate_store_integrity_failures_total",
        Counter,
        &[],
        "Stored rows whose seal or encoding did not verify on read",
    ),
    family(
        "oncegate_connections_refused_total",
        Counter,
        &["cap"],
        "Connections refused: over the per-address or overall cap, or a failed accept",
    ),
    family(
        "oncegate_connections_evicted_total",
        Counter,
        &["reason"],
        "Connections closed to make room: never_requested, or idle",
    ),
    family(
        "oncegate_connections_closed_total",
        Counter,
        &["reason"],
        "Connections closed by a timeout: first_byte_timeout, or idle",
    ),
    family(
        "oncegate_approval_queue_refusals_total",
        Counter,
        &[],
        "Held calls refused because the agent had pending_approvals_per_agent approvals waiting",
    ),
    family(
        "oncegate_mcp_sessions_evicted_total",
        Counter,
        &[],
        "MCP sessions ended to keep a principal within mcp_sessions_per_principal",
    ),
    family(
        "oncegate_tool_changes_total",
        Counter,
        &["server"],
        "Fronted tools held because their server changed a pinned definition",
    ),
    family(
        "oncegate_auth_failures_total",
        Counter,
        &[],
        "Failed authentications (bearer tokens and console sign-ins)",
    ),
    family(
        "oncegate_auth_throttled_total",
        Counter,
        &["by"],
        "Authentication attempts refused by the throttle, by address or by principal",
    ),
];

/// The fixed label values of a family, where they are known before the first event.
fn fixed_values(name: &str) -> &'static [&'static str] {
    match name {
        "oncegate_reconcile_claims_total" => &["taken", "held_elsewhere"],
        "oncegate_finding_deliveries_total" => &["delivered", "failed"],
        "oncegate_store_pool_connections" => &["in_use", "idle"],
        "oncegate_connections_refused_total" => &["per_address", "max", "accept_failed"],
        "oncegate_connections_evicted_total" => &["never_requested", "idle"],
        "oncegate_connections_closed_total" => &["first_byte_timeout", "idle"],
        "oncegate_auth_throttled_total" => &["address", "principal"],
        _ => &[],
    }
}

/// Gives every family its HELP text (and unit), once per process.
pub(crate) fn describe() {
    for f in FAMILIES {
        let unit = f.name.ends_with("_seconds").then_some(Unit::Seconds);
        match (f.kind, unit) {
            (Counter, _) => metrics::describe_counter!(f.name, f.help),
            (Gauge, Some(u)) => metrics::describe_gauge!(f.name, u, f.help),
            (Gauge, None) => metrics::describe_gauge!(f.name, f.help),
            (Histogram, Some(u)) => metrics::describe_histogram!(f.name, u, f.help),
            (Histogram, None) => metrics::describe_histogram!(f.name, f.help),
        }
    }
}

/// Exports at zero every series whose labels are known now: unlabelled families, fixed
/// label sets, and the per-capability counters of this registry's capabilities (every
/// outcome of a decision). Series whose labels come from events (a limit's principal, a
/// rule's findings, a histogram's first sample) appear with their first event.
pub(crate) fn export_at_zero(registry: &Registry) {
    for f in FAMILIES {
        match (f.kind, f.labels) {
            (Counter, []) => metrics::counter!(f.name).increment(0),
            (Gauge, []) => metrics::gauge!(f.name).increment(0.0),
            (Counter, [label]) if !fixed_values(f.name).is_empty() => {
                for v in fixed_values(f.name) {
                    metrics::counter!(f.name, *label => *v).increment(0);
                }
            }
            (Gauge, [label]) => {
                for v in fixed_values(f.name) {
                    metrics::gauge!(f.name, *label => *v).increment(0.0);
                }
            }
            _ => {}
        }
    }
    for cap in registry.capabilities() {
        let name = cap.name.clone();
        let outcomes: Vec<&'static str> = if cap.category == Category::Read {
            vec!["read"]
        } else {
            Status::ALL
                .iter()
                .map(|s| s.as_str())
                .chain(["claimed"])
                .collect()
        };
        for outcome in outcomes {
            metrics::counter!("oncegate_decisions_total", "capability" => name.clone(), "outcome" => outcome)
                .increment(0);
        }
        if cap.category == Category::Read {
            continue;
        }
        for family in [
            "oncegate_duplicates_prevented_total",
            "oncegate_stale_effects_total",
            "oncegate_not_sent_disproved_total",
        ] {
            metrics::counter!(family, "capability" => name.clone()).increment(0);
        }
        for kind in [
            "cross_run",
            "breaker_tripped",
            "replay_storm",
            "approval_queue_full",
        ] {
            metrics::counter!("oncegate_alerts_total", "capability" => name.clone(), "kind" => kind)
                .increment(0);
        }
        for doubt in Doubt::ALL {
            metrics::counter!("oncegate_provider_doubts_total", "capability" => name.clone(), "doubt" => doubt.as_str())
                .increment(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/guide/tracing.md's metric table, as this catalog renders it.
    fn metric_table() -> String {
        let mut out =
            String::from("| family | type | labels | what it counts |\n|---|---|---|---|\n");
        for f in FAMILIES {
            let labels = if f.labels.is_empty() {
                String::from("-")
            } else {
                f.labels
                    .iter()
                    .map(|l| format!("`{l}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                f.name,
                f.kind.as_str(),
                labels,
                f.help
            ));
        }
        out
    }

    /// docs/guide/tracing.md's table is the catalog's rendering, between its two markers.
    #[test]
    fn the_readme_lists_every_family() {
        let readme = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/guide/tracing.md"
        ))
        .expect("docs/guide/tracing.md");
        let start =
            "<!-- metrics: generated from crates/oncegate-gateway/src/metric_catalog.rs -->\n";
        let end = "<!-- end of metrics -->";
        let from = readme
            .find(start)
            .expect("docs/guide/tracing.md's metrics marker")
            + start.len();
        let to = from
            + readme[from..]
                .find(end)
                .expect("docs/guide/tracing.md's end-of-metrics marker");
        assert_eq!(
            &readme[from..to],
            metric_table(),
            "docs/guide/tracing.md's metric table differs from the catalog; paste the right-hand side between the markers"
        );
    }

    /// Every `metrics::counter!/gauge!/histogram!("oncegate_...")` in the source tree
    /// names a family of the catalog, with the catalog's type.
    #[test]
    fn every_family_is_described() {
        let crates = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let mut files = Vec::new();
        let mut dirs = vec![std::path::PathBuf::from(crates)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("a source directory") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    if name != "target" && name != "tests" {
                        dirs.push(path);
                    }
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        let mut found = 0;
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for (kind, macro_name) in [
                (Counter, "metrics::counter!("),
                (Gauge, "metrics::gauge!("),
                (Histogram, "metrics::histogram!("),
            ] {
                for (at, _) in text.match_indices(macro_name) {
                    let rest = text[at + macro_name.len()..].trim_start();
                    let Some(rest) = rest.strip_prefix("\"oncegate_") else {
                        continue;
                    };
                    let name = format!(
                        "oncegate_{}",
                        &rest[..rest.find('"').expect("a closing quote")]
                    );
                    let family = FAMILIES.iter().find(|f| f.name == name);
                    assert!(
                        family.is_some_and(|f| f.kind == kind),
                        "{} uses {name} as a {kind:?}: add it to FAMILIES with that type",
                        file.display()
                    );
                    found += 1;
                }
            }
        }
        assert!(found >= FAMILIES.len(), "only {found} uses found");
    }
}
