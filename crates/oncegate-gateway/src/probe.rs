//! Probing the upstreams a registry names: `oncegate check-config --probe`, and the
//! warnings `oncegate serve` logs at startup.
//!
//! A config can be valid and still point at nothing: a provider that is not running, an
//! MCP tool name with a typo. Both surface only at the first call, as `not_sent`
//! answers an agent cannot fix. The probe finds them before any agent calls.
//!
//! It never sends an effect: an HTTP upstream is only connected to (TCP, no request,
//! since its URL is an endpoint that charges or sends), and an MCP upstream is asked
//! for its `tools/list`, which is read-only by the protocol.

use std::sync::Arc;
use std::time::Duration;

use oncegate_core::config::{Capability, Registry, Upstream, UpstreamKind};

use crate::upstream::UpstreamExecutor;

/// How long a TCP connect may take before the upstream counts as unreachable.
const CONNECT_LIMIT: Duration = Duration::from_secs(5);

/// What the probe found about one upstream or reconciliation read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeFinding {
    /// The capability.
    pub capability: String,
    /// `upstream` or `reconcile`: the config table probed.
    pub part: &'static str,
    /// Where it was probed (the rendered URL's origin, or the MCP endpoint and tool).
    pub target: String,
    /// `None`: it answered as expected; `Some(problem)`: what is wrong.
    pub problem: Option<String>,
}

impl ProbeFinding {
    /// One line for a terminal or a log.
    pub fn line(&self) -> String {
        match &self.problem {
            None => format!("{} {}: {}: ok", self.capability, self.part, self.target),
            Some(p) => format!("{} {}: {}: {p}", self.capability, self.part, self.target),
        }
    }
}

/// Probes every upstream and reconciliation read of the registry, concurrently.
pub async fn probe(registry: &Registry, client: reqwest::Client) -> Vec<ProbeFinding> {
    let mut probes = Vec::new();
    for cap in registry.capabilities() {
        if let Some(up) = &cap.upstream {
            probes.push(probe_one(
                client.clone(),
                cap.clone(),
                "upstream",
                up.clone(),
            ));
        }
        if let Some(rec) = &cap.reconcile {
            // A reconciliation read is probed as an upstream of its own kind, with the
            // headers it is sent with: its own, then the write's (same provider
            // credentials), as UpstreamExecutor does.
            let mut headers = rec.headers.clone();
            if let Some(up) = &cap.upstream {
                for (name, value) in &up.headers {
                    headers.entry(name.clone()).or_insert_with(|| value.clone());
                }
            }
            let as_upstream = Upstream {
                kind: rec.kind,
                url: rec.url.clone(),
                method: rec.method.clone(),
                timeout: rec.timeout,
                headers,
                body: None,
                effect_ref: None,
                idempotency: oncegate_core::config::KeyThreading::None,
                idempotency_header: String::new(),
                idempotency_arg: None,
                tool: rec.tool.clone(),
                server: None,
                tool_errors: Default::default(),
                rejected: None,
            };
            probes.push(probe_one(
                client.clone(),
                cap.clone(),
                "reconcile",
                as_upstream,
            ));
        }
    }
    futures::future::join_all(probes).await
}

/// Probes one upstream; what it says shows no credential (the lines reach a terminal
/// and serve's log): the values filled in from the environment and the URL's userinfo
/// and query read `***`.
async fn probe_one(
    client: reqwest::Client,
    cap: Arc<Capability>,
    part: &'static str,
    up: Upstream,
) -> ProbeFinding {
    let secrets = crate::upstream::client::secrets(cap.templates());
    let found = probe_upstream(client, cap, part, up).await;
    ProbeFinding {
        target: secrets.text(&found.target),
        problem: found.problem.map(|p| secrets.text(&p)),
        ..found
    }
}

async fn probe_upstream(
    client: reqwest::Client,
    cap: Arc<Capability>,
    part: &'static str,
    up: Upstream,
) -> ProbeFinding {
    let executor = UpstreamExecutor::new(client, cap.clone());
    let finding = |target: String, problem: Option<String>| ProbeFinding {
        capability: cap.name.clone(),
        part,
        target,
        problem,
    };
    let url = match executor.render_url_outside_a_call(&up.url) {
        Ok(url) => url,
        Err(e) => {
            return finding(
                up.url.to_string(),
                Some(format!("cannot render the URL: {e}")),
            );
        }
    };
    match up.kind {
        UpstreamKind::Mcp => {
            let tool = up.tool.clone().unwrap_or_default();
            let target = format!("{url} tool `{tool}`");
            match executor.upstream_tool_schema(&up).await {
                Ok(_) => finding(target, None),
                Err(e) => finding(target, Some(e)),
            }
        }
        UpstreamKind::Http => {
            let (origin, problem) = connect(&url, up.timeout.unsigned_abs()).await;
            finding(origin, problem)
        }
    }
}

/// Opens (and drops) a TCP connection to the URL's host and port.
async fn connect(url: &str, timeout: Duration) -> (String, Option<String>) {
    let parsed = match reqwest::Url::parse(url) {
        Ok(u) => u,
        Err(e) => return (url.to_owned(), Some(format!("not a URL ({e})"))),
    };
    let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
        return (url.to_owned(), Some("the URL names no host".into()));
    };
    let origin = format!("{}://{host}:{port}", parsed.scheme());
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let limit = timeout.min(CONNECT_LIMIT);
    let problem =
        match tokio::time::timeout(limit, tokio::net::TcpStream::connect((host, port))).await {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!("unreachable: {e}")),
            Err(_) => Some(format!(
                "unreachable: no connection within {}s",
                limit.as_secs()
            )),
        };
    (origin, problem)
}

/// What the probe read of one fronted MCP server.
#[derive(Clone, Debug)]
pub struct ServerProbe {
    /// The alias.
    pub alias: String,
    /// Each listed tool and what will happen to it, or why the list could not be read.
    pub tools: Result<Vec<crate::fronted::FrontedTool>, String>,
    /// Tools the registry declares for this server that it does not list.
    pub missing: Vec<String>,
}

/// Reads every `[[mcp_servers]]` entry's tool list (read-only, like any MCP probe) and
/// classifies it as the gateway will.
pub async fn probe_servers(registry: &Registry, client: reqwest::Client) -> Vec<ServerProbe> {
    let reads = registry.mcp_servers.iter().map(|server| {
        let client = client.clone();
        async move {
            let listed = match crate::upstream::server_request(server) {
                Ok(request) => crate::upstream::mcp::list_tools(client, &request).await,
                Err(e) => Err(e),
            };
            let tools = listed.map(|tools| {
                let (classified, _) = crate::fronted::classify(registry, server, &tools);
                classified
            });
            let missing = match &tools {
                Ok(listed) => registry
                    .capabilities()
                    .iter()
                    .filter_map(|c| c.upstream.as_ref().map(|u| (c, u)))
                    .filter(|(_, u)| u.server.as_deref() == Some(&server.alias))
                    .filter(|(_, u)| {
                        !listed
                            .iter()
                            .any(|t| Some(t.tool.as_str()) == u.tool.as_deref())
                    })
                    .map(|(c, _)| c.name.clone())
                    .collect(),
                Err(_) => Vec::new(),
            };
            ServerProbe {
                alias: server.alias.clone(),
                tools,
                missing,
            }
        }
    });
    futures::future::join_all(reads).await
}
