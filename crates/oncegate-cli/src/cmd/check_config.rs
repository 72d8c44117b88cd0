//! `oncegate check-config`: validate a registry without starting anything, and with
//! `--probe` find the upstreams it names that do not answer.

use std::path::Path;
use std::process::ExitCode;

use oncegate_core::{Registry, redact};

use crate::registry::ConfigArg;

#[derive(Debug, clap::Args)]
pub struct CheckConfigArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Also connect to every upstream and reconciliation read: report an unreachable
    /// one and an MCP tool the server does not list, and the doubts the store holds
    /// (a reconciliation read that could not find an applied effect, keys not
    /// honoured). No effect is ever sent (HTTP upstreams get a TCP connection only, MCP
    /// servers a `tools/list`).
    #[arg(long)]
    probe: bool,
}

pub fn run(args: &CheckConfigArgs) -> anyhow::Result<ExitCode> {
    let path = &args.config.config;
    let registry = match oncegate_engine::config::load_registry(path) {
        Ok(r) => r,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{}: {} error(s)", path.display(), errors.0.len());
            return Ok(ExitCode::FAILURE);
        }
    };
    for w in &registry.warnings {
        eprintln!("warning: {}: `{}`: {}", w.location, w.field, w.message);
    }
    for p in &registry.principals {
        if std::env::var_os(&p.token_env).is_none() {
            eprintln!(
                "note: principal `{}`: ${} is not set here (needed by `oncegate serve`)",
                p.name, p.token_env
            );
        }
    }
    print_summary(path, &registry);
    if !args.probe {
        return Ok(ExitCode::SUCCESS);
    }
    probe(path, &registry)
}

/// What the registry holds, one line per identity issuer, capability and fronted
/// server, every value as it is written in the config.
fn print_summary(path: &Path, registry: &Registry) {
    println!(
        "{}: ok ({} capabilities, {} principals, store {})",
        path.display(),
        registry.capabilities().len(),
        registry.principals.len(),
        // A PostgreSQL URL may carry its password; a JWKS URL a provider's key.
        redact::url(&registry.store_url)
    );
    if let Some(identity) = &registry.identity {
        println!(
            "  identity: resource {} (metadata {})",
            identity.resource,
            identity.metadata_url()
        );
        for i in &identity.issuers {
            let keys = match &i.jwks {
                oncegate_core::config::JwksSource::Url(u) => redact::url(u),
                oncegate_core::config::JwksSource::File(f) => f.display().to_string(),
            };
            println!(
                "    issuer {} keys {} algorithms {} audience {} principal {}<{}> role {}",
                i.issuer,
                keys,
                i.algorithms.join(","),
                i.audience.join(","),
                i.principal_prefix,
                i.principal_claim,
                match (&i.role_claim, i.default_role) {
                    (Some(c), Some(d)) => format!("from `{c}`, else {}", d.as_str()),
                    (Some(c), None) => format!("from `{c}`"),
                    (None, Some(d)) => d.as_str().to_owned(),
                    (None, None) => "none".to_owned(),
                },
            );
        }
    }
    for cap in registry.capabilities() {
        // Every value as it is written in the config, so the line can be checked
        // against the file.
        println!(
            "  {:<16} {:<16} window {:#} ceiling {} on_unknown {} policy {} executed by {}",
            cap.name,
            cap.category.as_str(),
            cap.replay_window,
            cap.attempt_ceiling
                .map_or("none".to_owned(), |c| c.to_string()),
            cap.on_unknown.as_str(),
            cap.policy_file.as_deref().unwrap_or("-"),
            executed_by(cap),
        );
    }
    // Cedar runs only for a capability with a policy file, and only with the policies
    // that can apply to it.
    let unpoliced: Vec<&str> = registry
        .capabilities()
        .iter()
        .filter(|c| c.policy.is_none())
        .map(|c| c.name.as_str())
        .collect();
    if !unpoliced.is_empty() {
        println!(
            "no policy (Cedar is not evaluated; policy allows every call): {}",
            unpoliced.join(", ")
        );
    }
    for cap in registry.capabilities() {
        if let (Some(engine), Some(file)) = (&cap.policy, &cap.policy_file)
            && engine.applicable(&cap.name) == 0
        {
            println!(
                "warning: capability {}: no policy in {file} can apply to it: every call is denied (Cedar is not evaluated)",
                cap.name
            );
        }
    }
    for server in &registry.mcp_servers {
        println!(
            "  mcp server {} at {} undeclared {} refresh {:#}",
            server.alias,
            server.url,
            server.undeclared.as_str(),
            server.refresh,
        );
    }
    let claim_only: Vec<&str> = registry
        .capabilities()
        .iter()
        .filter(|c| c.is_claim_only())
        .map(|c| c.name.as_str())
        .collect();
    if !claim_only.is_empty() {
        println!(
            "claim-only (no upstream: their callers execute them through POST /v1/intents/claim and complete the claim; POST /v1/calls and MCP refuse them): {}",
            claim_only.join(", ")
        );
    }
}

/// `--probe`: connects to every upstream, reconciliation read and fronted server, and
/// reads the store's tool pins and doubts; a failure on one of them fails the check.
fn probe(path: &Path, registry: &Registry) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let findings = runtime.block_on(oncegate_gateway::probe::probe(
        registry,
        oncegate_gateway::server::http_client(),
    ));
    let mut problems = findings.iter().filter(|f| f.problem.is_some()).count();
    for f in &findings {
        match f.problem {
            None => println!("probe: {}", f.line()),
            Some(_) => eprintln!("error: probe: {}", f.line()),
        }
    }
    let servers = runtime.block_on(oncegate_gateway::probe::probe_servers(
        registry,
        oncegate_gateway::server::http_client(),
    ));
    let pins = if servers.is_empty() {
        Ok(Vec::new())
    } else {
        runtime.block_on(tool_pins(registry))
    };
    if let Err(e) = &pins {
        eprintln!("note: probe: the store was not read, so tool pins are not shown: {e}");
    }
    for server in &servers {
        match &server.tools {
            Ok(tools) => {
                println!("probe: server {}: {} tool(s)", server.alias, tools.len());
                for t in tools {
                    println!("  {:<32} {:<24} {}", t.name, t.tool, t.verdict.describe());
                    let Ok(pins) = &pins else { continue };
                    let line = pin_line(&server.alias, t, pins);
                    if let Some((line, changed)) = line {
                        println!("  {:<32} pin: {line}", "");
                        if changed {
                            problems += 1;
                            eprintln!(
                                "error: probe: server {}: tool {} changed since it was pinned: held until accepted ({line})",
                                server.alias, t.tool
                            );
                        }
                    }
                }
            }
            Err(e) => {
                problems += 1;
                eprintln!(
                    "error: probe: server {}: cannot list its tools: {e}",
                    server.alias
                );
            }
        }
        for name in &server.missing {
            problems += 1;
            eprintln!(
                "error: probe: server {}: capability {name} declares a tool the server does not list",
                server.alias
            );
        }
    }
    problems += runtime.block_on(doubts(registry));
    if problems > 0 {
        eprintln!(
            "{}: {problems} upstream problem(s) found by --probe",
            path.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    if servers.is_empty() {
        println!("probe: {} upstream(s) answered", findings.len());
    } else {
        println!(
            "probe: {} upstream(s) and {} fronted server(s) answered",
            findings.len(),
            servers.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What the running gateways have seen the providers fail at, from the store (its
/// doubts, see `oncegate doubts`): each is a problem until an admin clears it. A store
/// that cannot be opened here is noted, not counted.
async fn doubts(registry: &oncegate_core::Registry) -> usize {
    let store = match crate::registry::open_store(registry).await {
        Ok(store) => store,
        Err(e) => {
            eprintln!(
                "note: probe: the store was not read, so doubts about providers are not shown: {e}"
            );
            return 0;
        }
    };
    let gate = oncegate_engine::Gate::on_store(registry.clone(), store);
    let doubts = match gate.doubts().await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("note: probe: the store's doubts could not be read: {e}");
            return 0;
        }
    };
    for d in &doubts {
        let part = match d.doubt {
            oncegate_engine::Doubt::ReconciliationUnproven => "reconcile",
            oncegate_engine::Doubt::KeysIgnored => "upstream",
        };
        eprintln!(
            "error: probe: {} {part}: {} since {} ({}): {}; clear with `oncegate doubts clear {} {}` once fixed",
            d.capability,
            d.doubt.as_str(),
            d.set_at,
            d.set_by,
            d.reason,
            d.capability,
            d.doubt.as_str(),
        );
    }
    gate.store().close().await;
    doubts.len()
}

/// The fronted tools' pins, from the store (read only: the probe pins nothing).
async fn tool_pins(
    registry: &oncegate_core::Registry,
) -> anyhow::Result<Vec<oncegate_store::ToolPin>> {
    use oncegate_store::PinsRead;
    let store = crate::registry::open_store(registry).await?;
    let pins = store.tool_pins().await;
    store.close().await;
    Ok(pins?)
}

/// What the pin says about a tool the server lists now (offered undeclared tools only;
/// registry capabilities keep the registry's definitions): the line, and whether the
/// tool is held.
fn pin_line(
    server: &str,
    t: &oncegate_gateway::fronted::FrontedTool,
    pins: &[oncegate_store::ToolPin],
) -> Option<(String, bool)> {
    use oncegate_gateway::fronted::Verdict;
    if !matches!(t.verdict, Verdict::Read | Verdict::RequireApproval) {
        return None;
    }
    let pin = pins.iter().find(|p| p.server == server && p.tool == t.tool);
    Some(match pin {
        None => (
            format!(
                "not pinned yet: {} is pinned when a gateway first offers it",
                t.digest
            ),
            false,
        ),
        Some(p) if p.digest == t.digest => (
            format!(
                "pinned {} (since {} by {})",
                p.digest, p.pinned_at, p.pinned_by
            ),
            false,
        ),
        Some(p) => (
            format!(
                "changed: pinned {}, the server offers {}; accept with `oncegate tools accept {server} {} {}`",
                p.digest, t.digest, t.tool, t.digest
            ),
            true,
        ),
    })
}

/// Who executes a capability's effects, as `check-config` lists it.
fn executed_by(cap: &oncegate_core::config::Capability) -> &'static str {
    match &cap.upstream {
        _ if cap.dry_run => "nobody (dry run)",
        Some(_) => "the gateway",
        None => "its callers (claim-only)",
    }
}
