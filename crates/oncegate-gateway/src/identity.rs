//! Principals from JWT access tokens (`[identity]`): oncegate as an OAuth 2.0 resource
//! server.
//!
//! A token is routed to its issuer by its (unverified) `iss`, then verified with that
//! issuer's keys only: the header's `alg` must be one the issuer accepts and, when the
//! key names one, the key's own; `exp` is required, `iss` and `aud` must match, `nbf` is
//! honoured, all within the issuer's clock skew. Keys come from a JWKS URL or file and
//! are cached; a token whose `kid` is unknown triggers one refetch (single-flight, at
//! most every `jwks_min_refetch`), so a rotation at the identity provider needs no
//! restart. Keys older than `jwks_max_age` are never used: when they cannot be
//! refreshed, the issuer's tokens are refused with 503 (fail closed), never accepted on
//! stale keys. The static tokens are checked first and keep working beside all this.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use oncegate_core::codes::Code;
use oncegate_core::config::{IdentitySettings, IssuerConfig, JwksSource, Role, normal_typ};
use oncegate_core::redact;
use serde_json::Value;
use tokio::sync::{Mutex, RwLock};

use crate::error::ApiError;

/// The most a JWKS document may weigh.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// How long one JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// A principal a token proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// `principal_prefix` + the principal claim.
    pub name: String,
    /// From the role claim (or the issuer's default role).
    pub role: Role,
    /// The issuer that vouched.
    pub issuer: String,
    /// When the token expires (`exp`, required): a console session it opens ends then.
    pub expires: Option<jiff::Timestamp>,
}

/// The issuers and their key caches.
pub struct Identity {
    settings: IdentitySettings,
    issuers: Vec<Issuer>,
    /// Static principals' names: a token may not speak for one of them.
    static_names: HashSet<String>,
    http: reqwest::Client,
}

struct Issuer {
    config: IssuerConfig,
    algorithms: Vec<Algorithm>,
    /// The keys in use (read on every token).
    keys: RwLock<Keys>,
    /// Held while fetching, so concurrent unknown `kid`s cause one fetch.
    fetching: Mutex<()>,
}

#[derive(Default)]
struct Keys {
    set: Vec<Key>,
    /// When `set` was fetched (`None`: never).
    fetched: Option<Instant>,
    /// When the last fetch was tried, successful or not.
    tried: Option<Instant>,
    /// Why the last fetch failed, if it did.
    failure: Option<String>,
}

struct Key {
    kid: Option<String>,
    /// The key's own `alg`, when it names one.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

/// Why a token is not accepted.
fn invalid(why: impl Into<String>) -> ApiError {
    ApiError::InvalidToken(why.into())
}

impl Identity {
    /// Builds the verifier of `[identity]`; `static_names` are the registry's principals.
    pub fn new(
        settings: &IdentitySettings,
        static_names: impl IntoIterator<Item = String>,
        http: reqwest::Client,
    ) -> Self {
        let issuers = settings
            .issuers
            .iter()
            .map(|c| Issuer {
                algorithms: c
                    .algorithms
                    .iter()
                    .filter_map(|a| a.parse::<Algorithm>().ok())
                    .collect(),
                config: c.clone(),
                keys: RwLock::new(Keys::default()),
                fetching: Mutex::new(()),
            })
            .collect();
        Self {
            settings: settings.clone(),
            issuers,
            static_names: static_names.into_iter().collect(),
            http,
        }
    }

    /// The settings (for the metadata document and `WWW-Authenticate`).
    pub fn settings(&self) -> &IdentitySettings {
        &self.settings
    }

    /// Whether a token of some issuer could name this principal (its prefix matches),
    /// so a kill switch may be set for it before its first call.
    pub fn may_name(&self, name: &str) -> bool {
        !self.static_names.contains(name)
            && self.issuers.iter().any(|i| {
                name.len() > i.config.principal_prefix.len()
                    && name.starts_with(&i.config.principal_prefix)
            })
    }

    /// Whether a bearer token looks like a JWT (three base64url parts), so a wrong
    /// static token is not reported as a bad JWT.
    pub fn looks_like_jwt(token: &str) -> bool {
        let parts: Vec<&str> = token.split('.').collect();
        parts.len() == 3
            && parts[..2].iter().all(|p| {
                !p.is_empty()
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
    }

    /// The principal a JWT names, unverified: what a failed attempt is counted against
    /// (never trusted for anything else).
    pub fn claimed_name(&self, token: &str) -> Option<String> {
        let claims: Value = jsonwebtoken::dangerous::insecure_decode_claims(token).ok()?;
        let iss = claims.get("iss")?.as_str()?;
        let issuer = self.issuers.iter().find(|i| i.config.issuer == iss)?;
        let name = match claim(&claims, &issuer.config.principal_claim)? {
            Value::String(s) if !s.is_empty() => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        Some(format!("{}{name}", issuer.config.principal_prefix))
    }

    /// Verifies a JWT and maps it to a principal.
    pub async fn verify(&self, token: &str) -> Result<Verified, ApiError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| invalid(format!("the token's header does not parse ({e})")))?;
        // Routing only: the issuer's keys and `iss` check below are what prove it.
        let unverified: Value = jsonwebtoken::dangerous::insecure_decode_claims(token)
            .map_err(|e| invalid(format!("the token's claims do not parse ({e})")))?;
        let iss = unverified
            .get("iss")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("the token has no `iss`"))?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.config.issuer == iss)
            .ok_or_else(|| invalid(format!("the issuer `{iss}` is not trusted here")))?;
        if let Some(want) = &issuer.config.token_type {
            // RFC 9068 2.1 / RFC 8725 3.11: an issuer that types its access tokens lets
            // us refuse its other JWTs (ID tokens, logout tokens) sent as bearer tokens.
            match header.typ.as_deref().map(normal_typ) {
                Some(typ) if &typ == want => {}
                Some(typ) => {
                    return Err(invalid(format!(
                        "the token's typ is `{typ}`; `{iss}` issues `{want}` access tokens"
                    )));
                }
                None => {
                    return Err(invalid(format!(
                        "the token has no typ; `{iss}` issues `{want}` access tokens"
                    )));
                }
            }
        }
        if !issuer.algorithms.contains(&header.alg) {
            return Err(invalid(format!(
                "the algorithm {:?} is not accepted for `{iss}`",
                header.alg
            )));
        }
        let claims = issuer.verified_claims(token, &header, &self.http).await?;
        issuer.check_issued_at(&claims)?;
        let name = claim(&claims, &issuer.config.principal_claim)
            .and_then(|v| match v {
                Value::String(s) if !s.is_empty() => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .ok_or_else(|| {
                invalid(format!(
                    "the token has no principal claim `{}`",
                    issuer.config.principal_claim
                ))
            })?;
        let name = format!("{}{name}", issuer.config.principal_prefix);
        if self.static_names.contains(&name) {
            tracing::warn!(principal = %name, issuer = %iss, "a token names a static principal; refused (set principal_prefix)");
            return Err(invalid(format!(
                "the token names `{name}`, a principal with a static token; it cannot speak for it"
            )));
        }
        let role = issuer.role(&claims).ok_or_else(|| {
            invalid("the token's role claim names no oncegate role (agent, approver or admin)")
        })?;
        let expires = claims
            .get("exp")
            .and_then(Value::as_i64)
            .and_then(|t| jiff::Timestamp::from_second(t).ok());
        Ok(Verified {
            name,
            role,
            issuer: iss.to_owned(),
            expires,
        })
    }
}

/// A claim by dotted path (`realm_access.roles`): nested objects only. A top-level
/// claim literally named `realm_access.roles` is not read for it, so a claim the token's
/// issuer does not structure that way cannot stand in for the nested one. A
/// collision-resistant name (a URL or a URN, as Auth0 and others namespace custom
/// claims: `https://app.example.com/roles`) is one top-level claim, dots and all: it is
/// never a path (no issuer nests claims under a host name's labels).
fn claim<'v>(claims: &'v Value, path: &str) -> Option<&'v Value> {
    if path.contains("://") || path.starts_with("urn:") {
        return claims.get(path);
    }
    path.split('.').try_fold(claims, |v, seg| v.get(seg))
}

impl Issuer {
    /// A token issued in the future (beyond the clock skew) was minted by a clock that
    /// is wrong or by someone preparing tokens ahead: either way not this moment's proof
    /// (jsonwebtoken checks `exp` and `nbf`, not `iat`).
    fn check_issued_at(&self, claims: &Value) -> Result<(), ApiError> {
        let Some(iat) = claims.get("iat") else {
            return Ok(());
        };
        let Some(iat) = iat.as_f64() else {
            return Err(invalid("the token's `iat` is not a number"));
        };
        let now = jsonwebtoken::get_current_timestamp() as f64;
        let skew = self.config.clock_skew.as_secs_f64();
        if iat > now + skew {
            return Err(invalid(format!(
                "the token was issued {:.0} s in the future (iat), beyond the clock skew of {skew:.0} s",
                iat - now
            )));
        }
        Ok(())
    }

    /// The role the claims give: the role claim's values (a space-separated string or
    /// an array of strings) mapped, else the default role.
    fn role(&self, claims: &Value) -> Option<Role> {
        let named = self
            .config
            .role_claim
            .as_deref()
            .and_then(|path| claim(claims, path))
            .and_then(|v| match v {
                // RFC 6749 `scope` syntax: values separated by ASCII spaces only (a
                // no-break space is part of a value, not a separator).
                Value::String(s) => self
                    .config
                    .roles
                    .role_of(s.split(' ').filter(|v| !v.is_empty())),
                Value::Array(items) => self
                    .config
                    .roles
                    .role_of(items.iter().filter_map(Value::as_str)),
                _ => None,
            });
        named.or(self.config.default_role)
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.algorithms = vec![alg];
        v.leeway = self.config.clock_skew.as_secs();
        v.validate_nbf = true;
        v.set_issuer(&[&self.config.issuer]);
        v.set_audience(&self.config.audience);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v
    }

    async fn verified_claims(
        &self,
        token: &str,
        header: &jsonwebtoken::Header,
        http: &reqwest::Client,
    ) -> Result<Value, ApiError> {
        let kid = header.kid.as_deref();
        let mut refreshed = false;
        loop {
            {
                let keys = self.keys.read().await;
                let fresh = keys
                    .fetched
                    .is_some_and(|at| at.elapsed() < self.config.jwks_max_age);
                let candidates: Vec<&Key> = keys
                    .set
                    .iter()
                    .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
                    .filter(|k| k.alg.is_none_or(|a| a == header.alg))
                    .collect();
                if fresh && !candidates.is_empty() {
                    let validation = self.validation(header.alg);
                    let mut last = None;
                    for k in candidates {
                        match jsonwebtoken::decode::<Value>(token, &k.key, &validation) {
                            Ok(data) => return Ok(data.claims),
                            Err(e) => last = Some(e),
                        }
                    }
                    return Err(invalid(describe(last.as_ref())));
                }
                if refreshed {
                    // The keys could not be loaded (now, or at the last try within the
                    // refetch spacing): nothing can be said about the token.
                    if !fresh || keys.failure.is_some() {
                        return Err(unavailable(&self.config.issuer, keys.failure.as_deref()));
                    }
                    return Err(invalid(match kid {
                        Some(kid) => {
                            format!("no key `{kid}` of `{}` verifies it", self.config.issuer)
                        }
                        None => format!("no key of `{}` verifies it", self.config.issuer),
                    }));
                }
            }
            self.refresh(http).await;
            refreshed = true;
        }
    }

    /// Fetches the keys unless another task just did (single-flight) or the last try
    /// is more recent than `jwks_min_refetch`.
    async fn refresh(&self, http: &reqwest::Client) {
        let _one = self.fetching.lock().await;
        {
            let keys = self.keys.read().await;
            if keys
                .tried
                .is_some_and(|at| at.elapsed() < self.config.jwks_min_refetch)
            {
                return;
            }
        }
        let result = self.fetch(http).await;
        let mut keys = self.keys.write().await;
        keys.tried = Some(Instant::now());
        match result {
            Ok(set) => {
                tracing::info!(issuer = %self.config.issuer, keys = set.len(), "identity keys loaded");
                keys.set = set;
                keys.fetched = Some(Instant::now());
                keys.failure = None;
            }
            Err(why) => {
                tracing::error!(issuer = %self.config.issuer, error = %why, "the identity provider's keys cannot be loaded; its tokens are refused until they can");
                keys.failure = Some(why);
            }
        }
    }

    async fn fetch(&self, http: &reqwest::Client) -> Result<Vec<Key>, String> {
        let text = match &self.config.jwks {
            JwksSource::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
            JwksSource::Url(url) => {
                // The failure reaches an unauthenticated client (503) and the log: the
                // URL's userinfo and query (a provider's key) are never in it, neither
                // from the URL nor from reqwest's error naming it.
                let failed = |why: &dyn std::fmt::Display| {
                    redact::urls_in(&format!("GET {}: {why}", redact::url(url)))
                };
                let response = http
                    .get(url)
                    .timeout(FETCH_TIMEOUT)
                    .header(reqwest::header::ACCEPT, "application/json")
                    .send()
                    .await
                    .map_err(|e| failed(&e))?;
                if !response.status().is_success() {
                    return Err(failed(&format_args!("HTTP {}", response.status())));
                }
                let bytes = response.bytes().await.map_err(|e| failed(&e))?;
                if bytes.len() > MAX_JWKS_BYTES {
                    return Err(failed(&format_args!(
                        "the key set exceeds {MAX_JWKS_BYTES} bytes"
                    )));
                }
                String::from_utf8(bytes.to_vec()).map_err(|_| failed(&"not UTF-8"))?
            }
        };
        let set: JwkSet = serde_json::from_str(&text).map_err(|e| format!("not a JWKS: {e}"))?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            // Only signing keys; a key for encryption never verifies a token.
            if matches!(
                jwk.common.public_key_use,
                Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
            ) {
                continue;
            }
            let alg = match jwk.common.key_algorithm {
                None => None,
                Some(a) => match a.to_string().parse::<Algorithm>() {
                    Ok(alg) => Some(alg),
                    // An encryption algorithm or one this crate does not verify.
                    Err(_) => continue,
                },
            };
            if alg.is_some_and(|a| a.family() == jsonwebtoken::AlgorithmFamily::Hmac) {
                continue;
            }
            match DecodingKey::from_jwk(jwk) {
                Ok(key) if key.family() != jsonwebtoken::AlgorithmFamily::Hmac => {
                    keys.push(Key {
                        kid: jwk.common.key_id.clone(),
                        alg,
                        key,
                    });
                }
                // A symmetric key in a public set, or one that does not parse: skipped.
                _ => continue,
            }
        }
        if keys.is_empty() {
            return Err("the key set holds no usable signing key".into());
        }
        Ok(keys)
    }
}

fn unavailable(issuer: &str, why: Option<&str>) -> ApiError {
    ApiError::Coded(
        StatusCode::SERVICE_UNAVAILABLE,
        Code::IdentityUnavailable,
        format!(
            "the keys of `{issuer}` cannot be loaded, so its tokens cannot be checked now{}",
            why.map(|w| format!(" ({w})")).unwrap_or_default()
        ),
    )
}

/// A verification failure in words a client can act on.
fn describe(e: Option<&jsonwebtoken::errors::Error>) -> String {
    use jsonwebtoken::errors::ErrorKind;
    let Some(e) = e else {
        return "the token is not accepted".into();
    };
    match e.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => "the token is meant for another audience".into(),
        ErrorKind::InvalidIssuer => "the token's issuer does not match".into(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(c) => format!("the token has no `{c}` claim"),
        ErrorKind::InvalidAlgorithm => "the token's algorithm does not match its key".into(),
        _ => format!("the token is not accepted ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_three_part_base64url_tokens_are_taken_for_jwts() {
        assert!(Identity::looks_like_jwt(
            "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln"
        ));
        assert!(Identity::looks_like_jwt(
            "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0."
        ));
        assert!(!Identity::looks_like_jwt("og_live_0123456789"));
        assert!(!Identity::looks_like_jwt("a.b"));
        assert!(!Identity::looks_like_jwt("a b.c.d"));
    }

    #[test]
    fn a_dotted_claim_path_reaches_nested_claims() {
        let claims = serde_json::json!({"realm_access": {"roles": ["agent"]}, "a.b": 1});
        assert_eq!(
            claim(&claims, "realm_access.roles"),
            Some(&serde_json::json!(["agent"]))
        );
        assert_eq!(
            claim(&claims, "a.b"),
            None,
            "a literal dotted name is not a path"
        );
        assert_eq!(claim(&claims, "missing.x"), None);
        let flat = serde_json::json!({"realm_access.roles": ["admin"], "realm_access": {"roles": ["agent"]}});
        assert_eq!(
            claim(&flat, "realm_access.roles"),
            Some(&serde_json::json!(["agent"]))
        );
        // Namespaced claims (Auth0's rule) are names, not paths.
        let namespaced = serde_json::json!({
            "https://app.example.com/roles": ["admin"],
            "urn:example:roles": "agent",
            "https://app": {"example": {"com/roles": ["forged"]}},
        });
        assert_eq!(
            claim(&namespaced, "https://app.example.com/roles"),
            Some(&serde_json::json!(["admin"]))
        );
        assert_eq!(
            claim(&namespaced, "urn:example:roles"),
            Some(&serde_json::json!("agent"))
        );
    }
}
