//! `oncegate detect`: run the duplicate rules now, beside or without a running
//! gateway, and print what they find.
//!
//! Findings are recorded exactly as the scheduler records them (each raised once,
//! with its hold and audit event in one commit), so a run here and the gateway's next
//! tick never raise the same finding twice; a running gateway sees a hold placed here
//! within its kill-switch cache (≤500 ms).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{Context, bail};
use jiff::{SignedDuration, Timestamp};
use oncegate_engine::Gate;
use serde_json::{Value, json};

use crate::registry::ConfigArg;

#[derive(Debug, clap::Args)]
pub struct DetectArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Compare effects since this time: an RFC 3339 timestamp or a span back from now
    /// (`24h`, `90m`). Default: each rule's scheduled span (two of its `every`).
    #[arg(long)]
    since: Option<String>,
    /// Only this rule (its name, or its capability's name).
    #[arg(long)]
    rule: Option<String>,
    /// Print one JSON object: every rule run and every finding.
    #[arg(long)]
    json: bool,
}

/// `--since` as a time: a timestamp, or a span back from `now`.
fn since_of(text: &str, now: Timestamp) -> anyhow::Result<Timestamp> {
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    let span: SignedDuration = text.parse().with_context(|| {
        format!("--since `{text}` is neither an RFC 3339 time nor a span such as 24h")
    })?;
    now.checked_sub(span.abs())
        .with_context(|| format!("--since `{text}` reaches before the earliest time"))
}

pub async fn run(args: DetectArgs) -> anyhow::Result<ExitCode> {
    oncegate_gateway::server::install_crypto();
    let registry = crate::registry::load(&args.config.config)?;
    let store = crate::registry::open_store(&registry).await?;
    let gate = Gate::on_store(registry, store);
    let http = reqwest::Client::new();
    let now = gate.clock().now();
    let rules: Vec<_> = gate
        .registry()
        .capabilities()
        .iter()
        .filter_map(|c| c.duplicates.as_ref().map(|r| (c.clone(), r.clone())))
        .filter(|(c, r)| {
            args.rule
                .as_deref()
                .is_none_or(|want| want == r.name || want == c.name)
        })
        .collect();
    if rules.is_empty() {
        match &args.rule {
            Some(want) => {
                bail!("no duplicate rule is named `{want}` (nor on a capability of that name)")
            }
            None => bail!("the registry declares no duplicate rules ([capabilities.duplicates])"),
        }
    }
    let tty = std::io::stderr().is_terminal();
    let mut runs = Vec::new();
    let mut raised: Vec<Value> = Vec::new();
    let mut failed = false;
    for (cap, rule) in rules {
        let since = match &args.since {
            Some(text) => since_of(text, now)?,
            None => rule
                .every
                .checked_mul(2)
                .and_then(|span| now.checked_sub(span).ok())
                .unwrap_or(Timestamp::MIN),
        };
        let mut listing_error = None;
        let upstream = match &cap.listing {
            None => Vec::new(),
            Some(listing) => {
                let name = rule.name.clone();
                let mut progress = move |pages: usize, effects: usize| {
                    if tty {
                        eprint!(
                            "\r{name}: reading the upstream listing, page {pages}, {effects} effects"
                        );
                    }
                };
                let read = oncegate_gateway::detection_scheduler::fetch_listing_with_progress(
                    &http,
                    listing,
                    since,
                    &mut progress,
                )
                .await;
                if tty {
                    eprint!("\r\x1b[K");
                }
                match read {
                    Ok(effects) => effects,
                    Err(e) => {
                        // As the scheduler does: the ledger is still compared; the run
                        // says the upstream was not seen, and the exit code says so.
                        eprintln!("{}: the upstream listing could not be read: {e}", rule.name);
                        listing_error = Some(e);
                        failed = true;
                        Vec::new()
                    }
                }
            }
        };
        let listed = upstream.len();
        let run = gate
            .detect(&cap.name, since, upstream)
            .await
            .with_context(|| format!("rule {}", rule.name))?;
        eprintln!(
            "{}: {} effects compared since {since} ({listed} listed by the upstream): {} new finding(s), {} raised before",
            rule.name,
            run.compared,
            run.raised.len(),
            run.known.len()
        );
        runs.push(json!({
            "rule": rule.name,
            "capability": cap.name,
            "since": since,
            "compared": run.compared,
            "listed": listed,
            "listing_error": listing_error,
            "raised": run.raised.len(),
            "known": run.known,
        }));
        raised.extend(run.raised);
    }
    if args.json {
        crate::output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({"runs": runs, "findings": raised}))?
        ));
    } else if !raised.is_empty() {
        crate::output::emit(&table(&raised));
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One line per finding: id, rule, kind, how many effects, what they share, the hold.
fn table(findings: &[Value]) -> String {
    let mut out = format!(
        "{:<22} {:<20} {:<9} {:>7}  {:<18} {}\n",
        "FINDING", "RULE", "KIND", "EFFECTS", "HOLD", "ON"
    );
    for f in findings {
        let text = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
        out.push_str(&format!(
            "{:<22} {:<20} {:<9} {:>7}  {:<18} {}\n",
            text("id"),
            text("rule"),
            text("kind"),
            f.get("effects")
                .and_then(Value::as_array)
                .map_or(0, Vec::len),
            text("hold_id"),
            f.get("on").map(Value::to_string).unwrap_or_default(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_a_time_or_a_span_back() {
        let now: Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
        assert_eq!(
            since_of("2026-12-01T00:00:00Z", now).unwrap(),
            "2026-12-01T00:00:00Z".parse::<Timestamp>().unwrap()
        );
        assert_eq!(
            since_of("24h", now).unwrap(),
            "2026-12-02T12:00:00Z".parse::<Timestamp>().unwrap()
        );
        assert_eq!(
            since_of("90m", now).unwrap(),
            "2026-12-03T10:30:00Z".parse::<Timestamp>().unwrap()
        );
        let e = since_of("yesterday", now).unwrap_err().to_string();
        assert!(e.contains("--since `yesterday`"), "{e}");
        let e = since_of("200000000h", now).unwrap_err().to_string();
        assert!(e.contains("before the earliest time"), "{e}");
    }
}
