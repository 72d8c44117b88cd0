//! `[identity]`: the resource URI, the issuers, their keys, algorithms and claim mapping.
//! Every mistake that would accept a token it should not (an HS* or `none` algorithm, a
//! key source fetched in the clear, two issuers with one name, a role nobody can get)
//! is an error here, located, before the gateway starts.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use jiff::SignedDuration;

use super::super::locate::Seg;
use super::super::raw::{RawIdentity, RawIssuer, RawRoles};
use super::builder::{Builder, k};
use crate::config::{
    ACCEPTABLE_ALGORITHMS, DEFAULT_ALGORITHMS, IdentitySettings, IssuerConfig, JwksSource,
    PrincipalConfig, RoleValues,
};

const MAX_CLOCK_SKEW: SignedDuration = SignedDuration::from_mins(5);

/// Whether a URL may be fetched in the clear: only on this machine.
fn loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

impl Builder<'_> {
    pub(super) fn identity(
        &mut self,
        raw: Option<RawIdentity>,
        principals: &[PrincipalConfig],
    ) -> Option<IdentitySettings> {
        let raw = raw?;
        let base = [k("identity")];
        let Some(resource) = raw.resource else {
            self.err(
                &base,
                "`[identity]` needs `resource`, this gateway's resource URI",
                Some("the URL agents use for /mcp, e.g. resource = \"https://gateway.example.com/mcp\"; tokens must name it as their audience"),
            );
            return None;
        };
        self.url(
            &[k("identity"), k("resource")],
            &resource,
            "the resource URI",
        );
        let mut issuers = Vec::new();
        let mut seen = BTreeSet::new();
        // (prefix, issuer) of the issuers before: a principal named by two issuers
        // would be one principal (its sessions, its approvals, its console sign-in).
        let mut prefixes: Vec<(String, String)> = Vec::new();
        for (i, ri) in raw.issuers.into_iter().enumerate() {
            let path = vec![k("identity"), k("issuers"), Seg::Index(i)];
            if !seen.insert(ri.issuer.clone()) {
                self.err(
                    &[path.clone(), vec![k("issuer")]].concat(),
                    format!("issuer `{}` is declared twice", ri.issuer),
                    Some("one entry per issuer: a token's `iss` picks exactly one"),
                );
            }
            let prefix = ri.principal_prefix.clone().unwrap_or_default();
            if let Some((other, other_issuer)) = prefixes
                .iter()
                .find(|(p, _)| p.starts_with(&prefix) || prefix.starts_with(p.as_str()))
            {
                let field = if ri.principal_prefix.is_some() {
                    [path.clone(), vec![k("principal_prefix")]].concat()
                } else {
                    path.clone()
                };
                self.err(
                    &field,
                    format!(
                        "issuers `{other_issuer}` and `{}` name principals with overlapping prefixes (`{other}` and `{prefix}`): a token from one could act as the other's principal of the same name",
                        ri.issuer
                    ),
                    Some("give each issuer a principal_prefix of its own that neither begins nor is begun by another's (e.g. \"idp:\" and \"partner:\")"),
                );
            }
            prefixes.push((prefix, ri.issuer.clone()));
            if let Some(issuer) = self.issuer(&path, ri, &resource, principals) {
                issuers.push(issuer);
            }
        }
        if issuers.is_empty() {
            self.warn(
                &[k("identity"), k("issuers")],
                "`[identity]` declares no issuers: no token from an identity provider is accepted",
            );
        }
        let authorization_servers = raw
            .authorization_servers
            .unwrap_or_else(|| issuers.iter().map(|i| i.issuer.clone()).collect());
        for (i, a) in authorization_servers.iter().enumerate() {
            self.url(
                &[k("identity"), k("authorization_servers"), Seg::Index(i)],
                a,
                "an authorization server",
            );
        }
        Some(IdentitySettings {
            resource,
            resource_name: raw.resource_name.unwrap_or_else(|| "oncegate".to_owned()),
            authorization_servers,
            scopes_supported: raw.scopes_supported.unwrap_or_default(),
            issuers,
        })
    }

    /// Checks an http(s) URL that others fetch or trust: https, or http on loopback.
    fn url(&mut self, path: &[Seg], text: &str, what: &str) -> Option<url::Url> {
        match url::Url::parse(text) {
            Ok(u) if u.scheme() == "https" || (u.scheme() == "http" && loopback(&u)) => {
                if u.fragment().is_some() {
                    self.err(
                        path,
                        format!("{what} `{text}` has a fragment"),
                        Some("drop the `#...` part"),
                    );
                }
                Some(u)
            }
            Ok(u) if u.scheme() == "http" => {
                self.err(
                    path,
                    format!("{what} `{text}` is plain http beyond this machine"),
                    Some(
                        "use https (http is accepted only for localhost and 127.0.0.1, for tests)",
                    ),
                );
                None
            }
            _ => {
                self.err(
                    path,
                    format!("{what} `{text}` is not an http(s) URL"),
                    Some("write a full URL, e.g. \"https://idp.example.com\""),
                );
                None
            }
        }
    }

    fn issuer(
        &mut self,
        path: &[Seg],
        ri: RawIssuer,
        resource: &str,
        principals: &[PrincipalConfig],
    ) -> Option<IssuerConfig> {
        let at = |field: &str| [path, &[k(field)]].concat();
        if ri.issuer.trim().is_empty() {
            self.err(
                &at("issuer"),
                "the issuer is empty",
                Some("the exact `iss` its tokens carry"),
            );
        }
        let jwks = self.jwks(path, ri.jwks_url, ri.jwks_file)?;
        let algorithms = self.algorithms(path, ri.algorithms);
        let audience = ri.audience.unwrap_or_else(|| vec![resource.to_owned()]);
        if audience.is_empty() || audience.iter().any(|a| a.is_empty()) {
            self.err(&at("audience"), "the audience is empty", Some("tokens must be meant for this gateway: leave it out to require the resource URI"));
        }
        let skew = self.duration(
            &at("clock_skew"),
            ri.clock_skew.as_deref(),
            SignedDuration::from_secs(60),
        );
        if skew > MAX_CLOCK_SKEW {
            self.err(
                &at("clock_skew"),
                format!("a clock skew of {skew:#} would accept tokens long expired"),
                Some("at most 5m; fix the clocks instead"),
            );
        }
        let (max_age, min_refetch) = self.jwks_refresh(
            path,
            ri.jwks_max_age.as_deref(),
            ri.jwks_min_refetch.as_deref(),
        );
        let principal_claim = ri.principal_claim.unwrap_or_else(|| "sub".to_owned());
        if principal_claim.is_empty() {
            self.err(
                &at("principal_claim"),
                "the principal claim is empty",
                Some("e.g. \"sub\" (the default) or \"client_id\""),
            );
        }
        let principal_prefix = ri.principal_prefix.unwrap_or_default();
        if principal_prefix.is_empty() && !principals.is_empty() {
            self.warn(&at("principal_prefix"), "without principal_prefix, a token whose principal is named like a static principal is refused; a prefix (e.g. \"idp:\") keeps the two apart");
        }
        let roles = self.roles(path, ri.roles);
        let token_type = ri.token_type.map(|t| {
            let bare = crate::config::normal_typ(&t);
            if bare.is_empty() || !bare.bytes().all(|b| b.is_ascii_graphic()) {
                self.err(
                    &at("token_type"),
                    format!("`{t}` is not a media type"),
                    Some("e.g. \"at+jwt\" (RFC 9068 access tokens)"),
                );
            }
            bare
        });
        if ri.role_claim.is_none() && ri.default_role.is_none() {
            self.err(path, "no token could get a role: neither role_claim nor default_role is set", Some("set role_claim (e.g. \"roles\" or \"scope\") with [identity.issuers.roles], or default_role = \"agent\""));
        }
        Some(IssuerConfig {
            issuer: ri.issuer,
            jwks,
            algorithms,
            audience,
            clock_skew: Duration::from_secs(skew.as_secs().unsigned_abs()),
            principal_claim,
            principal_prefix,
            role_claim: ri.role_claim,
            roles,
            default_role: ri.default_role,
            jwks_max_age: Duration::from_secs(max_age.as_secs().unsigned_abs()),
            jwks_min_refetch: Duration::from_secs(min_refetch.as_secs().unsigned_abs()),
            token_type,
        })
    }

    /// Where the issuer's keys come from: a JWKS URL (fetched, rotated on an unknown
    /// kid) or a JWKS file read now; exactly one. `None`: neither or both.
    fn jwks(
        &mut self,
        path: &[Seg],
        jwks_url: Option<String>,
        jwks_file: Option<String>,
    ) -> Option<JwksSource> {
        let at = |field: &str| [path, &[k(field)]].concat();
        Some(match (jwks_url, jwks_file) {
            (Some(url), None) => {
                self.url(&at("jwks_url"), &url, "the JWKS URL");
                JwksSource::Url(url)
            }
            (None, Some(file)) => {
                let dir = self
                    .loc
                    .file
                    .parent()
                    .map(Path::to_owned)
                    .unwrap_or_default();
                let full = dir.join(&file);
                match self.env.read_file(&full) {
                    Ok(text) => {
                        if let Err(why) = jwks_problem(&text) {
                            self.err(&at("jwks_file"), format!("`{}` is not a JWKS: {why}", full.display()), Some("a JSON object {\"keys\": [...]} of public JWKs, as an identity provider publishes"));
                        }
                    }
                    Err(e) => self.err(
                        &at("jwks_file"),
                        format!("cannot read `{}`: {e}", full.display()),
                        Some("paths are relative to the config file"),
                    ),
                }
                JwksSource::File(full)
            }
            (Some(_), Some(_)) => {
                self.err(
                    &at("jwks_file"),
                    "both jwks_url and jwks_file are set",
                    Some("keys come from one place: keep one"),
                );
                return None;
            }
            (None, None) => {
                self.err(
                    path,
                    "the issuer names no keys",
                    Some("set jwks_url (fetched, rotated on an unknown kid) or jwks_file"),
                );
                return None;
            }
        })
    }

    /// The accepted signature algorithms (default: the asymmetric ones); `none` and
    /// shared-secret algorithms are refused.
    fn algorithms(&mut self, path: &[Seg], raw: Option<Vec<String>>) -> Vec<String> {
        let at = |field: &str| [path, &[k(field)]].concat();
        let algorithms =
            raw.unwrap_or_else(|| DEFAULT_ALGORITHMS.iter().map(|a| (*a).to_owned()).collect());
        if algorithms.is_empty() {
            self.err(
                &at("algorithms"),
                "no algorithm is accepted",
                Some("e.g. algorithms = [\"RS256\"]"),
            );
        }
        for (i, a) in algorithms.iter().enumerate() {
            if !ACCEPTABLE_ALGORITHMS.contains(&a.as_str()) {
                let why = if a.eq_ignore_ascii_case("none") {
                    "`none` means unsigned: anyone could write the token".to_owned()
                } else if a.to_ascii_uppercase().starts_with("HS") {
                    format!(
                        "`{a}` is a shared-secret algorithm: with a published key, anyone who reads the JWKS could sign"
                    )
                } else {
                    format!("`{a}` is not a known signature algorithm")
                };
                self.err(
                    &[path, &[k("algorithms"), Seg::Index(i)]].concat(),
                    why,
                    Some(&format!("accepted: {}", ACCEPTABLE_ALGORITHMS.join(", "))),
                );
            }
        }
        algorithms
    }

    /// How long fetched keys stay fresh, and the least time between two fetches.
    fn jwks_refresh(
        &mut self,
        path: &[Seg],
        max_age: Option<&str>,
        min_refetch: Option<&str>,
    ) -> (SignedDuration, SignedDuration) {
        let at = |field: &str| [path, &[k(field)]].concat();
        let max_age = self.duration(&at("jwks_max_age"), max_age, SignedDuration::from_mins(10));
        let min_refetch = self.duration(
            &at("jwks_min_refetch"),
            min_refetch,
            SignedDuration::from_secs(10),
        );
        if max_age.is_zero() {
            self.err(
                &at("jwks_max_age"),
                "keys that are never fresh would be fetched on every call",
                Some("e.g. \"10m\" (the default)"),
            );
        }
        if min_refetch > max_age {
            self.err(&at("jwks_min_refetch"), "jwks_min_refetch is longer than jwks_max_age", Some("keys are refetched when older than jwks_max_age, so the minimum spacing must be shorter"));
        }
        (max_age, min_refetch)
    }

    /// The claim values that name each role; one value names one role.
    fn roles(&mut self, path: &[Seg], raw: Option<RawRoles>) -> RoleValues {
        let at = |field: &str| [path, &[k(field)]].concat();
        let roles = match raw {
            None => RoleValues::default(),
            Some(r) => RoleValues {
                agent: r.agent.unwrap_or_default(),
                approver: r.approver.unwrap_or_default(),
                admin: r.admin.unwrap_or_default(),
            },
        };
        let mut values = BTreeSet::new();
        for v in roles
            .agent
            .iter()
            .chain(&roles.approver)
            .chain(&roles.admin)
        {
            if !values.insert(v) {
                self.err(
                    &at("roles"),
                    format!("the value `{v}` names two roles"),
                    Some("each claim value means one role"),
                );
            }
        }
        roles
    }
}

/// Why a text is not a JWKS (`{"keys": [...]}` with at least one key).
fn jwks_problem(text: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    match v.get("keys").and_then(serde_json::Value::as_array) {
        Some(keys) if !keys.is_empty() => Ok(()),
        Some(_) => Err("it holds no keys".into()),
        None => Err("it has no `keys` array".into()),
    }
}
