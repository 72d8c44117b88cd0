//! `[identity]`: principals an identity provider vouches for, beside the static tokens.
//!
//! oncegate is an OAuth 2.0 resource server: it verifies JWT access tokens against each
//! issuer's published keys (JWKS) and maps their claims to a principal name and role. It
//! never issues tokens. The model here is what the gateway's verifier needs and what
//! RFC 9728 metadata announces; `build::identity` validates it from the TOML.

use std::path::PathBuf;
use std::time::Duration;

use super::Role;

/// Signature algorithms an issuer may accept: asymmetric only. `none` proves nothing,
/// and an HS* algorithm with a published key would let anyone who reads the JWKS sign.
pub const ACCEPTABLE_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// The algorithms accepted when an issuer names none.
pub const DEFAULT_ALGORITHMS: &[&str] = &["RS256", "ES256"];

/// `[identity]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentitySettings {
    /// This gateway's resource identifier (the canonical URI of its `/mcp` endpoint, e.g.
    /// `https://gateway.example.com/mcp`): tokens must name it as their audience unless
    /// an issuer says otherwise.
    pub resource: String,
    /// A human-readable name for the metadata document.
    pub resource_name: String,
    /// The authorization servers the metadata names (default: the issuers).
    pub authorization_servers: Vec<String>,
    /// Scopes the metadata lists as supported (informative).
    pub scopes_supported: Vec<String>,
    /// The issuers whose tokens are accepted.
    pub issuers: Vec<IssuerConfig>,
}

impl IdentitySettings {
    /// The path of the resource URI (`/mcp` for `https://h/mcp`; empty for `https://h`).
    pub fn resource_path(&self) -> &str {
        let after_scheme = self
            .resource
            .split_once("://")
            .map_or(self.resource.as_str(), |(_, rest)| rest);
        let path = after_scheme.find('/').map_or("", |i| &after_scheme[i..]);
        let path = path.split(['?', '#']).next().unwrap_or("");
        path.trim_end_matches('/')
    }

    /// The URL of this resource's RFC 9728 metadata: the well-known path inserted
    /// between the host and the resource's path
    /// (`https://h/mcp` → `https://h/.well-known/oauth-protected-resource/mcp`).
    pub fn metadata_url(&self) -> String {
        let (scheme, rest) = self
            .resource
            .split_once("://")
            .unwrap_or(("https", self.resource.as_str()));
        let host = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        format!(
            "{scheme}://{host}/.well-known/oauth-protected-resource{}",
            self.resource_path()
        )
    }
}

/// Where an issuer's public keys come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    /// Fetched (and refetched on an unknown `kid`, at most every `jwks_min_refetch`).
    Url(String),
    /// Read from a file (resolved against the config file; reread on an unknown `kid`).
    File(PathBuf),
}

/// A JOSE `typ` as compared: lower case, without `application/` (RFC 7515 4.1.9 lets a
/// token omit it).
pub fn normal_typ(typ: &str) -> String {
    let t = typ.trim().to_ascii_lowercase();
    t.strip_prefix("application/")
        .map(str::to_owned)
        .unwrap_or(t)
}

/// `[[identity.issuers]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuerConfig {
    /// The `iss` a token must carry, exactly.
    pub issuer: String,
    /// Its keys.
    pub jwks: JwksSource,
    /// Accepted `alg` values (from [`ACCEPTABLE_ALGORITHMS`]).
    pub algorithms: Vec<String>,
    /// Accepted `aud` values (default: the identity's resource).
    pub audience: Vec<String>,
    /// Leeway on `exp` and `nbf`.
    pub clock_skew: Duration,
    /// The claim holding the principal's name (dotted for nested claims); default `sub`.
    pub principal_claim: String,
    /// Prepended to that claim's value (e.g. `okta:`), so names from different issuers,
    /// and the static principals, cannot meet.
    pub principal_prefix: String,
    /// The claim holding roles (a string, space-separated values such as `scope`, or an
    /// array of strings); dotted for nested claims (`realm_access.roles`).
    pub role_claim: Option<String>,
    /// Which claim values mean which role.
    pub roles: RoleValues,
    /// The role of a token whose role claim names none of the values (`None`: refused).
    pub default_role: Option<Role>,
    /// Keys are not used longer than this without being refetched.
    pub jwks_max_age: Duration,
    /// The least time between two fetches (an unknown `kid` cannot make oncegate hammer
    /// the identity provider).
    pub jwks_min_refetch: Duration,
    /// The JOSE `typ` every token must carry (compared without case and without an
    /// `application/` prefix, RFC 7515 4.1.9), e.g. `at+jwt` (RFC 9068). `None`: any.
    pub token_type: Option<String>,
}

/// Claim values per role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleValues {
    /// Values meaning agent.
    pub agent: Vec<String>,
    /// Values meaning approver.
    pub approver: Vec<String>,
    /// Values meaning admin.
    pub admin: Vec<String>,
}

impl Default for RoleValues {
    /// The role names themselves.
    fn default() -> Self {
        Self {
            agent: vec!["agent".into()],
            approver: vec!["approver".into()],
            admin: vec!["admin".into()],
        }
    }
}

impl RoleValues {
    /// The role the claim values give: the most privileged one named (admin, then
    /// approver, then agent), `None` when none is.
    pub fn role_of<'v>(&self, values: impl IntoIterator<Item = &'v str>) -> Option<Role> {
        let mut best = None;
        for v in values {
            let role = if self.admin.iter().any(|a| a == v) {
                Role::Admin
            } else if self.approver.iter().any(|a| a == v) {
                Role::Approver
            } else if self.agent.iter().any(|a| a == v) {
                Role::Agent
            } else {
                continue;
            };
            best = Some(match (best, role) {
                (Some(Role::Admin), _) | (_, Role::Admin) => Role::Admin,
                (Some(Role::Approver), _) | (_, Role::Approver) => Role::Approver,
                _ => Role::Agent,
            });
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(resource: &str) -> IdentitySettings {
        IdentitySettings {
            resource: resource.into(),
            resource_name: "oncegate".into(),
            authorization_servers: vec![],
            scopes_supported: vec![],
            issuers: vec![],
        }
    }

    #[test]
    fn the_metadata_url_inserts_the_well_known_path_before_the_resource_path() {
        assert_eq!(
            settings("https://gw.example.com/mcp").metadata_url(),
            "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            settings("https://gw.example.com").metadata_url(),
            "https://gw.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            settings("http://127.0.0.1:7878/mcp/").metadata_url(),
            "http://127.0.0.1:7878/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(settings("https://h/a/b?x=1").resource_path(), "/a/b");
    }

    #[test]
    fn the_most_privileged_role_named_wins_and_unknown_values_name_none() {
        let roles = RoleValues {
            agent: vec!["og.agent".into()],
            approver: vec!["og.approver".into()],
            admin: vec!["og.admin".into()],
        };
        assert_eq!(roles.role_of(["x", "og.agent"]), Some(Role::Agent));
        assert_eq!(
            roles.role_of(["og.agent", "og.approver"]),
            Some(Role::Approver)
        );
        assert_eq!(
            roles.role_of(["og.admin", "og.agent", "og.approver"]),
            Some(Role::Admin)
        );
        assert_eq!(roles.role_of(["agent", "openid"]), None);
        assert_eq!(RoleValues::default().role_of(["agent"]), Some(Role::Agent));
    }
}
