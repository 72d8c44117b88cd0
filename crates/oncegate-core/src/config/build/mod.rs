//! Building the validated registry from the raw TOML shapes: the store, the audit key,
//! the gateway settings and limits, the principals and the policy files, plus the
//! `Builder` helpers every part uses (located errors and warnings, durations,
//! templates, bodies).
//!
//! Each capability is built in `capability`, its upstream call and reconciliation read in
//! `upstream`. Every problem is collected, not returned at the first one, so one run of
//! `check-config` shows them all.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use jiff::SignedDuration;
use jiff::tz::TimeZone;

use super::locate::{Locator, Seg, help_for_serde};
use super::raw::{RawCapability, RawConfig, RawGateway, RawPrincipal, RawStore};
use super::{
    Capability, ConfigEnv, ConfigError, ConfigErrors, DEFAULT_LISTEN,
    DEFAULT_MCP_SESSIONS_PER_PRINCIPAL, DEFAULT_PENDING_APPROVALS_PER_AGENT, DEFAULT_STORE_URL,
    GatewaySettings, MAX_BUDGET, PrincipalConfig, Registry, StoreSettings,
};
use crate::policy::PolicyEngine;
use crate::template::Template;

mod builder;
mod capability;
mod connections;
mod detection;
mod identity;
mod servers;
mod telemetry;

mod upstream;

pub use servers::FrontedAs;

use builder::{Builder, k};

impl Registry {
    /// Parses and validates a config. `file` is used in messages and to resolve relative
    /// policy paths.
    pub fn parse(file: &Path, text: &str, env: &dyn ConfigEnv) -> Result<Registry, ConfigErrors> {
        let loc = Locator::new(file, text);
        let raw: RawConfig = match toml::from_str(text) {
            Ok(raw) => raw,
            Err(e) => {
                let offset = e.span().map_or(0, |s| s.start);
                let (line, column) = loc.line_col(offset);
                let message = e.message().to_owned();
                return Err(ConfigErrors(vec![ConfigError {
                    file: file.to_owned(),
                    line,
                    column,
                    field: loc.path_at(offset),
                    help: help_for_serde(&message),
                    message,
                }]));
            }
        };
        Builder {
            loc: &loc,
            env,
            errors: Vec::new(),
            warnings: Vec::new(),
            servers: Vec::new(),
        }
        .build(raw)
    }
}

impl Builder<'_> {
    fn build(mut self, raw: RawConfig) -> Result<Registry, ConfigErrors> {
        let gateway = self.gateway(raw.gateway);
        let audit_chain_key_env = raw.audit.and_then(|a| a.chain_key_env);
        if let Some(name) = &audit_chain_key_env
            && (name.is_empty() || name.contains('='))
        {
            self.err(
                &[k("audit"), k("chain_key_env")],
                format!("`{name}` is not an environment variable name"),
                Some("name the variable that holds the secret, e.g. ONCEGATE_AUDIT_KEY"),
            );
        }
        let (store_url, store) = self.store(raw.store);
        if !(store_url.starts_with("sqlite:")
            || store_url.starts_with("postgres://")
            || store_url.starts_with("postgresql://"))
        {
            self.err(
                &[k("store"), k("url")],
                format!("`{store_url}` is not a store URL"),
                Some("use sqlite://PATH (embedded) or postgres://USER@HOST/DB"),
            );
        }

        let principals = self.principals(raw.principals);

        let identity = self.identity(raw.identity, &principals);
        let telemetry = self.telemetry(raw.telemetry);
        self.servers = self.mcp_servers(raw.mcp_servers);

        let (mut capabilities, by_name, policy_refs) = self.capabilities(raw.capabilities);
        self.compile_policies(&mut capabilities, policy_refs);

        if !self.errors.is_empty() {
            return Err(ConfigErrors(self.errors));
        }
        Ok(Registry {
            source: self.loc.file.to_owned(),
            gateway,
            store_url,
            store,
            audit_chain_key_env,
            principals,
            identity,
            mcp_servers: std::mem::take(&mut self.servers),
            telemetry,
            capabilities: capabilities.into_iter().map(Arc::new).collect(),
            by_name,
            warnings: self.warnings,
        })
    }

    /// `[[principals]]`: unique names, and token variables that can be environment
    /// variable names.
    fn principals(&mut self, raw: Vec<RawPrincipal>) -> Vec<PrincipalConfig> {
        let mut principals = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, p) in raw.into_iter().enumerate() {
            let path = [k("principals"), Seg::Index(i)];
            if !seen.insert(p.name.clone()) {
                self.err(
                    &[path[0].clone(), path[1].clone(), k("name")],
                    format!("principal `{}` is declared twice", p.name),
                    None,
                );
            }
            let valid_env = !p.token_env.is_empty()
                && p.token_env
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_env {
                self.err(&[path[0].clone(), path[1].clone(), k("token_env")], format!("`{}` is not an environment variable name", p.token_env), Some("name the variable that holds the token, e.g. token_env = \"ONCEGATE_TOKEN_PLANNER\""));
            }
            principals.push(PrincipalConfig {
                name: p.name,
                role: p.role,
                token_env: p.token_env,
            });
        }
        if principals.is_empty() {
            self.warn(
                &[k("principals")],
                "no principals are declared: nobody can call the gateway",
            );
        }
        principals
    }

    /// `[[capabilities]]`, in declaration order, with each one's index by name and the
    /// policy file each one references (by index); limit names are unique across them.
    #[expect(
        clippy::type_complexity,
        reason = "three parallel views of one list, built in one pass"
    )]
    fn capabilities(
        &mut self,
        raw: Vec<RawCapability>,
    ) -> (
        Vec<Capability>,
        HashMap<String, usize>,
        Vec<(usize, String)>,
    ) {
        let mut capabilities = Vec::new();
        let mut by_name = HashMap::new();
        let mut policy_refs: Vec<(usize, String)> = Vec::new();
        for (i, rc) in raw.into_iter().enumerate() {
            let base = vec![k("capabilities"), Seg::Index(i)];
            if by_name
                .insert(rc.name.clone(), capabilities.len())
                .is_some()
            {
                self.err(
                    &[base.clone(), vec![k("name")]].concat(),
                    format!("capability `{}` is declared twice", rc.name),
                    None,
                );
            }
            if let Some(p) = &rc.policy {
                policy_refs.push((capabilities.len(), p.clone()));
            }
            let cap = self.capability(&base, rc);
            capabilities.push(cap);
        }
        for (ci, li, name) in detection::duplicate_limit_names(&capabilities) {
            self.err(
                &[
                    k("capabilities"),
                    Seg::Index(ci),
                    k("limits"),
                    Seg::Index(li),
                    k("name"),
                ],
                format!("limit `{name}` is declared twice"),
                Some("limit names are unique in the registry: they name stored budgets"),
            );
        }
        (capabilities, by_name, policy_refs)
    }

    /// Policies: one engine per referenced file, validated against the schema of the
    /// capabilities that reference it, and shared by them.
    fn compile_policies(
        &mut self,
        capabilities: &mut [Capability],
        policy_refs: Vec<(usize, String)>,
    ) {
        let mut files: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (idx, file) in policy_refs {
            files.entry(file).or_default().push(idx);
        }
        let dir = self
            .loc
            .file
            .parent()
            .map(Path::to_owned)
            .unwrap_or_default();
        for (file, users) in files {
            let path = vec![k("capabilities"), Seg::Index(users[0]), k("policy")];
            let text = match self.env.read_file(&dir.join(&file)) {
                Ok(t) => t,
                Err(e) => {
                    self.err(
                        &path,
                        format!(
                            "cannot read policy file `{}`: {e}",
                            dir.join(&file).display()
                        ),
                        Some("paths are relative to the config file"),
                    );
                    continue;
                }
            };
            let caps: Vec<&Capability> = users.iter().map(|&i| &capabilities[i]).collect();
            match PolicyEngine::new(&text, &caps) {
                Ok(engine) => {
                    let engine = Arc::new(engine);
                    for &i in &users {
                        capabilities[i].policy = Some(engine.clone());
                    }
                }
                Err(msg) => self.err(&path, format!("{file}: {msg}"), Some("context attributes are the capability's significant arguments (dots become `_`; money is a Long in minor units plus `<name>_currency`) and `business_ref`")),
            }
        }
    }

    fn store(&mut self, raw: Option<RawStore>) -> (String, StoreSettings) {
        let raw = raw.unwrap_or(RawStore {
            url: None,
            pool_size: None,
            statement_timeout: None,
            audit_shards: None,
        });
        let defaults = StoreSettings::default();
        let mut bounded =
            |field: &str, value: Option<i64>, max: i64, default: u32, help: &str| match value {
                None => default,
                Some(n) if (1..=max).contains(&n) => n as u32,
                Some(n) => {
                    self.err(
                        &[k("store"), k(field)],
                        format!("`{n}` is out of range: {field} is between 1 and {max}"),
                        Some(help),
                    );
                    default
                }
            };
        let pool_size = bounded(
            "pool_size",
            raw.pool_size,
            1000,
            defaults.pool_size,
            "the most connections one gateway opens; keep replicas x pool_size below the server's max_connections",
        );
        let audit_shards = bounded(
            "audit_shards",
            raw.audit_shards,
            4096,
            defaults.audit_shards,
            "how many audit chains new records spread over (default 16); changing it re-shards only new records",
        );
        let path = [k("store"), k("statement_timeout")];
        let timeout = self.duration(
            &path,
            raw.statement_timeout.as_deref(),
            SignedDuration::try_from(defaults.statement_timeout)
                .unwrap_or(SignedDuration::from_secs(5)),
        );
        let statement_timeout = if timeout.is_zero() {
            self.err(
                &path,
                "a statement timeout of zero would let one statement hold a connection forever",
                Some("write a duration like \"5s\" (the default)"),
            );
            defaults.statement_timeout
        } else {
            timeout.unsigned_abs()
        };
        let url = raw.url.unwrap_or_else(|| DEFAULT_STORE_URL.to_owned());
        (
            url,
            StoreSettings {
                pool_size,
                statement_timeout,
                audit_shards,
            },
        )
    }

    fn gateway(&mut self, raw: Option<RawGateway>) -> GatewaySettings {
        let raw = raw.unwrap_or(RawGateway {
            tenant: None,
            time_zone: None,
            listen: None,
            read_rate_per_second: None,
            auth_failures_per_minute: None,
            alert_webhook: None,
            alert_webhook_secret_env: None,
            mcp_allowed_hosts: None,
            mcp_allowed_origins: None,
            max_argument_bytes: None,
            max_argument_depth: None,
            max_answer_bytes: None,
            max_answer_depth: None,
            connections: None,
            mcp_sessions_per_principal: None,
            pending_approvals_per_agent: None,
        });
        let limits = self.limits(&raw);
        let connections = self.connections(raw.connections);
        let mcp_sessions_per_principal = self.budget(
            "mcp_sessions_per_principal",
            raw.mcp_sessions_per_principal,
            DEFAULT_MCP_SESSIONS_PER_PRINCIPAL,
        );
        let pending_approvals_per_agent = self.budget(
            "pending_approvals_per_agent",
            raw.pending_approvals_per_agent,
            DEFAULT_PENDING_APPROVALS_PER_AGENT,
        );
        let tenant = raw.tenant.unwrap_or_else(|| "default".to_owned());
        let tz_name = raw.time_zone.unwrap_or_else(|| "UTC".to_owned());
        let time_zone = self.time_zone(&tz_name);
        let listen_text = raw.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        let listen = self.listen(&listen_text);
        let read_rate_per_second = raw.read_rate_per_second.unwrap_or(50);
        if read_rate_per_second == 0 {
            self.err(
                &[k("gateway"), k("read_rate_per_second")],
                "a read rate of 0 refuses every read",
                Some("use at least 1 (default 50)"),
            );
        }
        let auth_failures_per_minute = raw.auth_failures_per_minute.unwrap_or(30);
        let alert_webhook = raw.alert_webhook.map(|url| self.alert_webhook(&url));
        let alert_webhook_secret_env = raw.alert_webhook_secret_env.clone();
        if alert_webhook_secret_env.is_some() && alert_webhook.is_none() {
            self.warn(
                &[k("gateway"), k("alert_webhook_secret_env")],
                "a webhook secret without `alert_webhook`: nothing is sent",
            );
        }
        let mcp_allowed_hosts = self.mcp_allowed_hosts(raw.mcp_allowed_hosts, listen);
        let mcp_allowed_origins = raw.mcp_allowed_origins.unwrap_or_default();
        if mcp_allowed_origins
            .iter()
            .any(|o| o != "null" && !o.contains("://"))
        {
            self.err(
                &[k("gateway"), k("mcp_allowed_origins")],
                "an allowed origin names its scheme",
                Some("e.g. [\"https://console.example.com:443\", \"http://localhost:*\"]"),
            );
        }
        GatewaySettings {
            tenant,
            time_zone,
            time_zone_name: tz_name,
            listen,
            read_rate_per_second,
            auth_failures_per_minute,
            alert_webhook,
            alert_webhook_secret_env,
            mcp_allowed_hosts,
            mcp_allowed_origins,
            limits,
            connections,
            mcp_sessions_per_principal,
            pending_approvals_per_agent,
        }
    }

    /// `[gateway] time_zone`: an IANA name the environment knows (UTC otherwise).
    fn time_zone(&mut self, tz_name: &str) -> TimeZone {
        match self.env.time_zone(tz_name) {
            Some(tz) => tz,
            None => {
                self.err(
                    &[k("gateway"), k("time_zone")],
                    format!("`{tz_name}` is not a known time zone"),
                    Some("use an IANA name such as \"UTC\" or \"Europe/Paris\""),
                );
                TimeZone::UTC
            }
        }
    }

    /// `[gateway] listen`: HOST:PORT (the default otherwise).
    fn listen(&mut self, listen_text: &str) -> SocketAddr {
        match listen_text.parse() {
            Ok(addr) => addr,
            Err(_) => {
                self.err(
                    &[k("gateway"), k("listen")],
                    format!("`{listen_text}` is not an address"),
                    Some("write HOST:PORT, e.g. \"127.0.0.1:7878\""),
                );
                DEFAULT_LISTEN
                    .parse()
                    .expect("the default listen address parses")
            }
        }
    }

    /// `[gateway] alert_webhook`: an http(s) URL template.
    fn alert_webhook(&mut self, url: &str) -> Template {
        if !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("{env."))
        {
            self.err(
                &[k("gateway"), k("alert_webhook")],
                format!("`{url}` is not an http(s) URL"),
                Some("e.g. \"https://hooks.example.com/oncegate\" or \"{env.ALERT_WEBHOOK}\""),
            );
        }
        self.template(&[k("gateway"), k("alert_webhook")], url)
    }

    /// `[gateway] mcp_allowed_hosts`: the `Host` values `/mcp` accepts; loopback when
    /// absent, with a warning when the gateway listens beyond it.
    fn mcp_allowed_hosts(&mut self, raw: Option<Vec<String>>, listen: SocketAddr) -> Vec<String> {
        match raw {
            Some(hosts) => {
                if hosts.is_empty() || hosts.iter().any(|h| h.trim().is_empty() || h.contains('/'))
                {
                    self.err(
                        &[k("gateway"), k("mcp_allowed_hosts")],
                        "list at least one allowed host, each a hostname or host:port (an empty list would turn the Host check off)",
                        Some("e.g. [\"gateway.internal\", \"gateway.internal:7878\"]"),
                    );
                }
                hosts
            }
            None => {
                if !listen.ip().is_loopback() {
                    self.warn(
                        &[k("gateway"), k("listen")],
                        "the gateway listens beyond loopback but /mcp accepts only loopback Host headers; set gateway.mcp_allowed_hosts",
                    );
                }
                vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
            }
        }
    }

    /// A per-principal budget: a count of at least one (a zero budget would lock every
    /// principal out), at most [`MAX_BUDGET`].
    fn budget(&mut self, name: &str, value: Option<i64>, default: u32) -> u32 {
        let v = value.unwrap_or(i64::from(default));
        match u32::try_from(v) {
            Ok(v) if (1..=MAX_BUDGET).contains(&v) => v,
            _ => {
                self.err(
                    &[k("gateway"), k(name)],
                    format!("{name} = {v} is out of range"),
                    Some(&format!("use 1 to {MAX_BUDGET} (default {default})")),
                );
                default
            }
        }
    }

    fn limits(&mut self, raw: &RawGateway) -> crate::limits::Limits {
        use crate::limits::{Limits, MAX_CONFIGURABLE_DEPTH};
        let defaults = Limits::default();
        // Arguments arrive inside a request body, which is refused over 256 KiB anyway.
        const BODY_LIMIT: usize = 256 * 1024;
        let mut field = |name: &str, value: Option<usize>, default: usize, max: usize| {
            let v = value.unwrap_or(default);
            if v == 0 || v > max {
                self.err(
                    &[k("gateway"), k(name)],
                    format!("{name} = {v} is out of range"),
                    Some(&format!("use 1 to {max} (default {default})")),
                );
                return default;
            }
            v
        };
        Limits {
            max_argument_bytes: field(
                "max_argument_bytes",
                raw.max_argument_bytes,
                defaults.max_argument_bytes,
                BODY_LIMIT,
            ),
            max_argument_depth: field(
                "max_argument_depth",
                raw.max_argument_depth,
                defaults.max_argument_depth,
                MAX_CONFIGURABLE_DEPTH,
            ),
            max_answer_bytes: field(
                "max_answer_bytes",
                raw.max_answer_bytes,
                defaults.max_answer_bytes,
                64 * 1024 * 1024,
            ),
            max_answer_depth: field(
                "max_answer_depth",
                raw.max_answer_depth,
                defaults.max_answer_depth,
                MAX_CONFIGURABLE_DEPTH,
            ),
        }
    }
}
