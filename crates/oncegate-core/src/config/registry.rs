//! The assembled registry: every capability (with its compiled policy), principal,
//! fronted server and setting of one config file, looked up by name. `build` assembles
//! it ([`Registry::parse`]); everything else reads it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jiff::tz::TimeZone;

use super::capability::Capability;
use super::error::ConfigWarning;
use super::identity::IdentitySettings;
use super::servers::McpServer;
use super::settings::{GatewaySettings, PrincipalConfig, Role, StoreSettings};
use super::telemetry::TelemetrySettings;
use crate::template::Template;

/// The validated registry.
#[derive(Clone, Debug)]
pub struct Registry {
    /// The config file.
    pub source: PathBuf,
    /// Gateway settings.
    pub gateway: GatewaySettings,
    /// The store URL (`sqlite://...` or `postgres://...`; `ONCEGATE_STORE_URL`
    /// overrides it when the store is opened).
    pub store_url: String,
    /// The rest of `[store]`.
    pub store: StoreSettings,
    /// `[audit] chain_key_env`: the environment variable holding the audit chain key
    /// (HMAC-SHA256 over every record). Read by the shell, never stored.
    pub audit_chain_key_env: Option<String>,
    /// Principals in declaration order.
    pub principals: Vec<PrincipalConfig>,
    /// `[identity]`: issuers whose JWT access tokens name principals (none: static
    /// tokens only).
    pub identity: Option<IdentitySettings>,
    /// `[[mcp_servers]]`: MCP servers fronted whole, in declaration order.
    pub mcp_servers: Vec<McpServer>,
    /// `[telemetry]`: where traces are exported (none: nowhere).
    pub telemetry: TelemetrySettings,
    pub(super) capabilities: Vec<Arc<Capability>>,
    pub(super) by_name: HashMap<String, usize>,
    /// Things `check-config` prints but that do not stop the gateway.
    pub warnings: Vec<ConfigWarning>,
}

impl Registry {
    /// A capability by name.
    pub fn capability(&self, name: &str) -> Option<&Arc<Capability>> {
        self.by_name.get(name).map(|&i| &self.capabilities[i])
    }

    /// All capabilities, in declaration order.
    pub fn capabilities(&self) -> &[Arc<Capability>] {
        &self.capabilities
    }

    /// A principal by name.
    pub fn principal(&self, name: &str) -> Option<&PrincipalConfig> {
        self.principals.iter().find(|p| p.name == name)
    }

    /// The first principal with the agent role.
    pub fn first_agent(&self) -> Option<&PrincipalConfig> {
        self.principals.iter().find(|p| p.role == Role::Agent)
    }

    /// Every template whose rendering leaves the gateway: the capabilities' (see
    /// [`Capability::templates`]), the fronted servers' URLs and headers, the alert
    /// webhook's URL. What their `{env.NAME}` values are is what no error may show
    /// ([`crate::redact::Redactor`]).
    pub fn templates(&self) -> Vec<&Template> {
        let mut out: Vec<&Template> = self
            .capabilities
            .iter()
            .flat_map(|c| c.templates())
            .collect();
        for server in &self.mcp_servers {
            out.push(&server.url);
            out.extend(server.headers.values());
        }
        out.extend(self.gateway.alert_webhook.as_ref());
        out
    }
}

/// What the config parser needs from the outside world.
pub trait ConfigEnv {
    /// Reads a file referenced by the config (a policy file), resolved by the caller.
    fn read_file(&self, path: &Path) -> std::io::Result<String>;
    /// Resolves an IANA time zone name.
    fn time_zone(&self, name: &str) -> Option<TimeZone>;
}
