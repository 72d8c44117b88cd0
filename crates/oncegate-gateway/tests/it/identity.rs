//! Principals from JWT access tokens: an identity provider inside the test (a real HTTP
//! server on loopback publishing a JWKS it can rotate or break) signs RS256 and ES256
//! tokens, and a gateway with `[identity]` accepts exactly the ones it should, beside
//! its static tokens; RFC 9728 metadata and the 401 challenge name the issuer.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use oncegate_gateway::server::http_client;
use serde_json::{Value, json};

use crate::support::{start_gateway, start_sandbox};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/identity")
            .join(name),
    )
    .unwrap()
}

/// A signing key of the test identity provider.
struct SigningKey {
    kid: &'static str,
    alg: Algorithm,
    key: EncodingKey,
}

impl SigningKey {
    fn rsa(kid: &'static str, file: &str) -> Self {
        Self {
            kid,
            alg: Algorithm::RS256,
            key: EncodingKey::from_rsa_pem(&fixture(file)).unwrap(),
        }
    }

    fn ec(kid: &'static str, file: &str) -> Self {
        Self {
            kid,
            alg: Algorithm::ES256,
            key: EncodingKey::from_ec_pem(&fixture(file)).unwrap(),
        }
    }

    /// Its public half, as the provider publishes it.
    fn jwk(&self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.key, self.alg).unwrap();
        jwk.common.key_id = Some(self.kid.into());
        jwk
    }

    fn sign(&self, claims: &Value) -> String {
        self.sign_typed(Some("JWT"), claims)
    }

    /// Signed with the header's `typ` set to `typ` (or left out).
    fn sign_typed(&self, typ: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.into());
        header.typ = typ.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &self.key).unwrap()
    }
}

/// The identity provider: serves `/jwks` (what `published` holds), counts fetches,
/// and answers 500 while `broken`.
#[derive(Clone)]
struct Provider {
    url: String,
    published: Arc<Mutex<JwkSet>>,
    fetches: Arc<AtomicUsize>,
    broken: Arc<AtomicBool>,
}

impl Provider {
    async fn start(keys: &[&SigningKey]) -> Self {
        let published = Arc::new(Mutex::new(JwkSet {
            keys: keys.iter().map(|k| k.jwk()).collect(),
        }));
        let fetches = Arc::new(AtomicUsize::new(0));
        let broken = Arc::new(AtomicBool::new(false));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (p, f, b) = (published.clone(), fetches.clone(), broken.clone());
        let router = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (p, f, b) = (p.clone(), f.clone(), b.clone());
                async move {
                    f.fetch_add(1, Ordering::SeqCst);
                    if b.load(Ordering::SeqCst) {
                        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
                    }
                    let set = serde_json::to_value(&*p.lock().unwrap()).unwrap();
                    Json(set).into_response()
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self {
            url,
            published,
            fetches,
            broken,
        }
    }

    fn publish(&self, keys: &[&SigningKey]) {
        *self.published.lock().unwrap() = JwkSet {
            keys: keys.iter().map(|k| k.jwk()).collect(),
        };
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

const RESOURCE: &str = "http://127.0.0.1:1/mcp";

struct Gw {
    url: String,
    sandbox: String,
    _dir: tempfile::TempDir,
}

/// A gateway trusting `provider` (roles from `roles`, `idp:` before `sub`), with a
/// static agent `agent` (token `tok`) and admin `admin` (token `adm`), and a `pay`
/// capability whose payouts over 10.00 need an approval.
async fn gateway(provider: &Provider, min_refetch: &str) -> Gw {
    let issuer = format!(
        r#"
[[identity.issuers]]
issuer = "{idp}"
jwks_url = "{idp}/jwks"
algorithms = ["RS256", "ES256"]
principal_prefix = "idp:"
role_claim = "roles"
roles = {{ agent = ["og.agent"], approver = ["og.approver"], admin = ["og.admin"] }}
jwks_min_refetch = "{min_refetch}"
"#,
        idp = provider.url
    );
    gateway_trusting(&issuer).await
}

/// [`gateway`] with `issuers` (TOML `[[identity.issuers]]` tables) as its issuers.
async fn gateway_trusting(issuers: &str) -> Gw {
    let sandbox = start_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[store]
url = "sqlite://gw.db"

[identity]
resource = "{RESOURCE}"
scopes_supported = ["oncegate.agent"]

{issuers}

[[principals]]
name = "agent"
role = "agent"
token_env = "UNUSED_TOKEN_AGENT"

[[principals]]
name = "admin"
role = "admin"
token_env = "UNUSED_TOKEN_ADMIN"

[[capabilities]]
name = "pay"
category = "keyed"
key = {{ business_ref = "order_id", significant = [{{ arg = "amount", type = "money", default_currency = "USD" }}] }}

[[capabilities.limits]]
name = "pay_budget"
argument = "amount"
max = "10.00"
currency = "USD"
window = "24h"
over = "require_approval"

[capabilities.upstream]
kind = "http"
url = "{sandbox}/v1/charges"
effect_ref = "/id"
body = {{ order_id = "{{arg.order_id}}", amount_minor = 1250, currency = "USD" }}
"#,
    );
    let url = start_gateway(dir.path(), &text, &[("agent", "tok"), ("admin", "adm")]).await;
    Gw {
        url,
        sandbox,
        _dir: dir,
    }
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// Claims of a valid agent token for `sub`.
fn claims(provider: &Provider, sub: &str, roles: &[&str]) -> Value {
    json!({
        "iss": provider.url,
        "sub": sub,
        "aud": RESOURCE,
        "iat": now(),
        "exp": now() + 300,
        "roles": roles,
    })
}

struct Answer {
    status: u16,
    challenge: Option<String>,
    body: Value,
}

async fn pay(gw: &Gw, token: &str, order: &str, amount: &str) -> Answer {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth(token)
        .json(&json!({"capability": "pay", "arguments": {"order_id": order, "amount": amount}}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    Answer {
        status,
        challenge,
        body: r.json().await.unwrap_or(Value::Null),
    }
}

async fn charges(gw: &Gw) -> usize {
    let body: Value = reqwest::get(format!("{}/v1/effects", gw.sandbox))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["effects"].as_array().unwrap().len()
}

fn refused(a: &Answer, needle: &str) {
    assert_eq!(a.status, 401, "{needle}: {}", a.body);
    assert_eq!(a.body["error"]["code"], "OG-0054", "{}", a.body);
    let message = a.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
    let challenge = a.challenge.as_deref().unwrap_or_default();
    assert!(
        challenge.contains("error=\"invalid_token\"")
            && challenge.contains(
                "resource_metadata=\"http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp\""
            ),
        "{challenge}"
    );
}

#[tokio::test]
async fn rs256_and_es256_tokens_name_their_principal_and_every_forgery_or_mismatch_is_refused() {
    let rsa = SigningKey::rsa("rsa-a", "rsa-a.pem");
    let ec = SigningKey::ec("ec-a", "ec-a.pem");
    let idp = Provider::start(&[&rsa, &ec]).await;
    let gw = gateway(&idp, "10s").await;

    // Valid, both algorithms: the principal is `idp:` + sub, and it pays once.
    let token = rsa.sign(&claims(&idp, "alice", &["og.agent"]));
    let first = pay(&gw, &token, "o-1", "1.00").await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["status"], "applied", "{}", first.body);
    let again = pay(&gw, &token, "o-1", "1.00").await;
    assert_eq!(again.body["status"], "replayed", "{}", again.body);
    let es = ec.sign(&claims(&idp, "bob", &["og.agent"]));
    let by_ec = pay(&gw, &es, "o-2", "1.00").await;
    assert_eq!(by_ec.body["status"], "applied", "{}", by_ec.body);
    assert_eq!(charges(&gw).await, 2);
    // The static token still works beside the issuer.
    assert_eq!(pay(&gw, "tok", "o-3", "1.00").await.status, 200);

    // Expired (beyond the default 60 s skew).
    let mut c = claims(&idp, "alice", &["og.agent"]);
    c["exp"] = json!(now() - 120);
    refused(&pay(&gw, &rsa.sign(&c), "o-x", "1.00").await, "expired");
    // No `exp` at all.
    let mut c = claims(&idp, "alice", &["og.agent"]);
    c.as_object_mut().unwrap().remove("exp");
    refused(&pay(&gw, &rsa.sign(&c), "o-x", "1.00").await, "`exp`");
    // Another audience.
    let mut c = claims(&idp, "alice", &["og.agent"]);
    c["aud"] = json!("https://other.example.com/mcp");
    refused(&pay(&gw, &rsa.sign(&c), "o-x", "1.00").await, "audience");
    // Not valid yet.
    let mut c = claims(&idp, "alice", &["og.agent"]);
    c["nbf"] = json!(now() + 600);
    refused(
        &pay(&gw, &rsa.sign(&c), "o-x", "1.00").await,
        "not valid yet",
    );
    // An issuer this gateway does not trust, even signed by a key it knows.
    let mut c = claims(&idp, "alice", &["og.agent"]);
    c["iss"] = json!("https://evil.example.com");
    refused(&pay(&gw, &rsa.sign(&c), "o-x", "1.00").await, "not trusted");
    // A tampered payload keeps the old signature.
    let (head, rest) = token.split_once('.').unwrap();
    let (_, sig) = rest.split_once('.').unwrap();
    let forged_claims = claims(&idp, "mallory", &["og.admin"]);
    let forged = format!(
        "{head}.{}.{sig}",
        base64url(forged_claims.to_string().as_bytes())
    );
    refused(&pay(&gw, &forged, "o-x", "1.00").await, "signature");
    // `alg: none`, and HS256 keyed with the public key's bytes (algorithm confusion).
    let none = format!(
        "{}.{}.",
        base64url(br#"{"alg":"none","typ":"JWT"}"#),
        base64url(forged_claims.to_string().as_bytes())
    );
    refused(
        &pay(&gw, &none, "o-x", "1.00").await,
        "header does not parse",
    );
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = Some("rsa-a".into());
    let confused = jsonwebtoken::encode(
        &hs,
        &forged_claims,
        &EncodingKey::from_secret(serde_json::to_string(&rsa.jwk()).unwrap().as_bytes()).unwrap(),
    )
    .unwrap();
    refused(&pay(&gw, &confused, "o-x", "1.00").await, "HS256");
    // A token naming no role oncegate knows.
    refused(
        &pay(
            &gw,
            &rsa.sign(&claims(&idp, "carol", &["openid"])),
            "o-x",
            "1.00",
        )
        .await,
        "no oncegate role",
    );
    // Garbage that is not a JWT reads as a wrong static token.
    let wrong = pay(&gw, "not-a-token", "o-x", "1.00").await;
    assert_eq!(wrong.status, 401);
    assert!(
        wrong
            .challenge
            .as_deref()
            .unwrap()
            .contains("resource_metadata="),
        "{:?}",
        wrong.challenge
    );
    assert!(!wrong.challenge.unwrap().contains("invalid_token"));
    // Nothing of any refused token reached the provider.
    assert_eq!(charges(&gw).await, 3);

    // The audit chain names the principal and the role its token proved.
    let audit = reqwest::Client::new()
        .get(format!("{}/v1/audit", gw.url))
        .bearer_auth("adm")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = audit
        .lines()
        .find(|l| l.contains("\"actor\":\"idp:alice\""))
        .unwrap_or_else(|| panic!("no record names idp:alice:\n{audit}"));
    assert!(line.contains("\"role\":\"agent\""), "{line}");
}

async fn audit_status(gw: &Gw, token: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{}/v1/audit", gw.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn nested_role_paths_ascii_space_roles_future_iat_and_typ_are_held_to_the_letter() {
    let rsa = SigningKey::rsa("rsa-a", "rsa-a.pem");
    let idp = Provider::start(&[&rsa]).await;
    let gw = gateway_trusting(&format!(
        r#"
[[identity.issuers]]
issuer = "{idp}"
jwks_url = "{idp}/jwks"
algorithms = ["RS256"]
principal_prefix = "idp:"
role_claim = "realm_access.roles"
roles = {{ agent = ["og.agent"], approver = ["og.approver"], admin = ["og.admin"] }}
token_type = "at+jwt"

[[identity.issuers]]
issuer = "{idp}/scoped"
jwks_url = "{idp}/jwks"
algorithms = ["RS256"]
principal_prefix = "scoped:"
role_claim = "scope"
roles = {{ agent = ["og.agent"], admin = ["og.admin"] }}
"#,
        idp = idp.url
    ))
    .await;
    let nested = |roles: Value| {
        let mut c = claims(&idp, "alice", &[]);
        c.as_object_mut().unwrap().remove("roles");
        c["realm_access"] = json!({ "roles": roles });
        c
    };
    let agent = nested(json!(["og.agent"]));

    // RFC 9068 access tokens: `at+jwt`, also spelled `application/at+jwt`, in any case.
    let token = rsa.sign_typed(Some("at+jwt"), &agent);
    assert_eq!(
        pay(&gw, &token, "n-1", "1.00").await.body["status"],
        "applied"
    );
    let token = rsa.sign_typed(Some("application/AT+JWT"), &agent);
    assert_eq!(
        pay(&gw, &token, "n-2", "1.00").await.body["status"],
        "applied"
    );
    // An ID token (`JWT`) or an untyped token of that issuer is not an access token.
    refused(
        &pay(&gw, &rsa.sign_typed(Some("JWT"), &agent), "n-x", "1.00").await,
        "typ is `jwt`",
    );
    refused(
        &pay(&gw, &rsa.sign_typed(None, &agent), "n-x", "1.00").await,
        "no typ",
    );

    // `realm_access.roles` is the nested claim: a top-level claim literally named so
    // (which the issuer would never set, so anyone minting one is suspect) is not read.
    let mut shadowed = agent.clone();
    shadowed["realm_access.roles"] = json!(["og.admin"]);
    let token = rsa.sign_typed(Some("at+jwt"), &shadowed);
    assert_eq!(audit_status(&gw, &token).await, 403, "read as an agent");
    let mut flat = claims(&idp, "alice", &[]);
    flat.as_object_mut().unwrap().remove("roles");
    flat["realm_access.roles"] = json!(["og.admin"]);
    refused(
        &pay(&gw, &rsa.sign_typed(Some("at+jwt"), &flat), "n-x", "1.00").await,
        "no oncegate role",
    );
    let admin = rsa.sign_typed(Some("at+jwt"), &nested(json!(["og.admin"])));
    assert_eq!(audit_status(&gw, &admin).await, 200);

    // Issued in the future beyond the 60 s skew: refused; within it: accepted.
    let mut early = agent.clone();
    early["iat"] = json!(now() + 600);
    refused(
        &pay(&gw, &rsa.sign_typed(Some("at+jwt"), &early), "n-x", "1.00").await,
        "in the future",
    );
    early["iat"] = json!(now() + 30);
    let token = rsa.sign_typed(Some("at+jwt"), &early);
    assert_eq!(pay(&gw, &token, "n-3", "1.00").await.status, 200);

    // A space-separated role string splits on ASCII spaces only: a no-break space or a
    // tab is part of a value (which then names no role).
    let scoped = |scope: &str| {
        let mut c = claims(&idp, "sam", &[]);
        c.as_object_mut().unwrap().remove("roles");
        c["iss"] = json!(format!("{}/scoped", idp.url));
        c["scope"] = json!(scope);
        rsa.sign(&c)
    };
    assert_eq!(audit_status(&gw, &scoped("openid  og.admin")).await, 200);
    for bent in [
        "og.agent\u{a0}og.admin",
        "og.agent\tog.admin",
        "og.admin\u{2003}x",
    ] {
        refused(
            &pay(&gw, &scoped(bent), "n-x", "1.00").await,
            "no oncegate role",
        );
    }
    assert_eq!(charges(&gw).await, 3, "only the accepted tokens paid");
}

#[tokio::test]
async fn failed_tokens_naming_one_principal_are_throttled_but_its_real_tokens_still_pass() {
    let rsa = SigningKey::rsa("rsa-a", "rsa-a.pem");
    let other = SigningKey::rsa("rsa-a", "rsa-b.pem");
    let idp = Provider::start(&[&rsa]).await;
    let gw = gateway(&idp, "10s").await;
    // A key the provider never published, under its `kid`: every signature fails.
    let forged = |sub: &str| other.sign(&claims(&idp, sub, &["og.agent"]));
    let mut answers = Vec::new();
    for i in 0..32 {
        let a = pay(&gw, &forged("victim"), &format!("t-{i}"), "1.00").await;
        answers.push((a.status, a.body["error"]["code"].clone()));
    }
    assert!(
        answers[..30].iter().all(|(s, _)| *s == 401),
        "the first 30 (the default budget) are answered 401: {answers:?}"
    );
    assert!(
        answers[30..]
            .iter()
            .all(|(s, c)| *s == 429 && c == "OG-0057"),
        "past the budget, 429: {answers:?}"
    );
    // The principal is never locked out: a token its issuer really signed passes, and
    // another principal's failures are counted apart.
    let real = rsa.sign(&claims(&idp, "victim", &["og.agent"]));
    let a = pay(&gw, &real, "t-real", "1.00").await;
    assert_eq!(
        (a.status, &a.body["status"]),
        (200, &json!("applied")),
        "{}",
        a.body
    );
    assert_eq!(
        pay(&gw, &forged("bystander"), "t-x", "1.00").await.status,
        401
    );
    assert_eq!(charges(&gw).await, 1);
}

#[tokio::test]
async fn an_agents_token_cannot_approve_and_an_approvers_token_approves_once() {
    let rsa = SigningKey::rsa("rsa-a", "rsa-a.pem");
    let idp = Provider::start(&[&rsa]).await;
    let gw = gateway(&idp, "10s").await;
    let agent = rsa.sign(&claims(&idp, "alice", &["og.agent"]));
    let held = pay(&gw, &agent, "o-big", "50.00").await;
    assert_eq!(held.body["status"], "pending_approval", "{}", held.body);
    let approval = held.body["approval_id"].as_str().unwrap().to_owned();
    let approve = |token: String| {
        let url = format!("{}/v1/approvals/{approval}/approve", gw.url);
        async move {
            let r = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    // The agent's own token, and another agent's: both forbidden.
    let (status, body) = approve(agent.clone()).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (403, &json!("OG-0013")),
        "{body}"
    );
    let other = rsa.sign(&claims(&idp, "dave", &["og.agent"]));
    assert_eq!(approve(other).await.0, 403);
    assert_eq!(charges(&gw).await, 0);
    // An approver's token (no registry entry) approves; the payout executes once.
    let approver = rsa.sign(&claims(&idp, "erin", &["og.agent", "og.approver"]));
    let (status, body) = approve(approver.clone()).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("applied")),
        "{body}"
    );
    let (_, twice) = approve(approver).await;
    assert!(
        matches!(twice["status"].as_str(), Some("applied" | "replayed")),
        "{twice}"
    );
    assert_eq!(charges(&gw).await, 1);
    // An approver's token cannot call.
    let approver_call = pay(
        &gw,
        &rsa.sign(&claims(&idp, "erin", &["og.approver"])),
        "o-z",
        "1.00",
    )
    .await;
    assert_eq!(approver_call.status, 403, "{}", approver_call.body);
}

#[tokio::test]
async fn an_unknown_kid_refetches_once_a_rotation_is_picked_up_and_a_broken_provider_fails_closed()
{
    let a = SigningKey::rsa("rsa-a", "rsa-a.pem");
    let b = SigningKey::rsa("rsa-b", "rsa-b.pem");
    let idp = Provider::start(&[&a]).await;
    let gw = gateway(&idp, "1s").await;
    let with_a = a.sign(&claims(&idp, "alice", &["og.agent"]));
    assert_eq!(pay(&gw, &with_a, "o-1", "1.00").await.status, 200);
    assert_eq!(idp.fetches(), 1, "keys are fetched once, then cached");
    assert_eq!(pay(&gw, &with_a, "o-1", "1.00").await.status, 200);
    assert_eq!(idp.fetches(), 1);

    // A token signed by a key the provider has not published yet: one refetch (past the
    // refetch spacing), refused.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let with_b = b.sign(&claims(&idp, "alice", &["og.agent"]));
    refused(&pay(&gw, &with_b, "o-2", "1.00").await, "no key `rsa-b`");
    assert_eq!(idp.fetches(), 2);
    // Many at once within jwks_min_refetch: no more fetches (no hammering).
    let storm: Vec<_> = (0..20).map(|_| pay(&gw, &with_b, "o-2", "1.00")).collect();
    for a in futures::future::join_all(storm).await {
        assert_eq!(a.status, 401);
    }
    assert_eq!(idp.fetches(), 2);

    // The provider rotates to b: after the refetch spacing, b's tokens are accepted
    // without a restart, and a's are refused once a is gone.
    idp.publish(&[&b]);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let rotated = pay(&gw, &with_b, "o-2", "1.00").await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    assert_eq!(idp.fetches(), 3);
    refused(&pay(&gw, &with_a, "o-1", "1.00").await, "no key `rsa-a`");
    assert_eq!(idp.fetches(), 3, "within the refetch spacing");

    // The provider breaks: cached keys still verify while fresh (no fetch needed)...
    idp.broken.store(true, Ordering::SeqCst);
    assert_eq!(pay(&gw, &with_b, "o-2", "1.00").await.status, 200);
    // ...but a key that needs a fetch cannot be checked: 503, never accepted.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let c = SigningKey::ec("ec-a", "ec-a.pem");
    let with_c = c.sign(&claims(&idp, "alice", &["og.agent"]));
    let down = pay(&gw, &with_c, "o-3", "1.00").await;
    assert_eq!(down.status, 503, "{}", down.body);
    assert_eq!(down.body["error"]["code"], "OG-0056", "{}", down.body);
    // Static tokens are untouched by the provider's outage.
    assert_eq!(pay(&gw, "tok", "o-4", "1.00").await.status, 200);
    assert_eq!(charges(&gw).await, 3);
}

#[tokio::test]
async fn the_protected_resource_metadata_names_the_authorization_servers() {
    let rsa = SigningKey::rsa("rsa-a", "rsa-a.pem");
    let idp = Provider::start(&[&rsa]).await;
    let gw = gateway(&idp, "10s").await;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let r = reqwest::get(format!("{}{path}", gw.url)).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let doc: Value = r.json().await.unwrap();
        assert_eq!(doc["resource"], RESOURCE, "{doc}");
        assert_eq!(doc["authorization_servers"], json!([idp.url]), "{doc}");
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "{doc}");
        assert_eq!(doc["scopes_supported"], json!(["oncegate.agent"]), "{doc}");
    }
    let other = reqwest::get(format!(
        "{}/.well-known/oauth-protected-resource/other",
        gw.url
    ))
    .await
    .unwrap();
    assert_eq!(other.status(), 404);
    // /mcp without a token: 401 naming the metadata, as the MCP authorization spec asks.
    let r = reqwest::Client::new()
        .post(format!("{}/mcp", gw.url))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(
        challenge.starts_with("Bearer ") && challenge.contains("resource_metadata=\""),
        "{challenge}"
    );
}

fn base64url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[tokio::test]
async fn an_mcp_client_with_an_identity_providers_token_calls_once_and_an_expired_one_cannot_connect()
 {
    use rmcp::model::{CallToolRequestParams, CallToolResponse, ClientConfig, ProtocolVersion};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::{ClientLifecycleMode, ClientServiceExt};

    let rsa = SigningKey::rsa("rsa-a", "rsa-a.pem");
    let idp = Provider::start(&[&rsa]).await;
    let gw = gateway(&idp, "10s").await;
    let connect = |token: String| {
        let mut config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", gw.url));
        config.auth_header = Some(token);
        let transport = StreamableHttpClientTransport::with_client(http_client(), config);
        ClientConfig::default().serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
        )
    };
    let token = rsa.sign(&claims(&idp, "alice", &["og.agent"]));
    let client = connect(token).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "pay"), "{tools:?}");
    let mut statuses = Vec::new();
    for amount in ["2.00", "2"] {
        let mut params = CallToolRequestParams::new("pay");
        params.arguments = json!({"order_id": "o-mcp", "amount": amount})
            .as_object()
            .cloned();
        let CallToolResponse::Complete(result) = client.call_tool_once(params).await.unwrap()
        else {
            panic!("not a complete result");
        };
        statuses.push(result.meta.unwrap()["dev.oncegate/outcome"]["status"].clone());
    }
    assert_eq!(statuses, vec![json!("applied"), json!("replayed")]);
    assert_eq!(charges(&gw).await, 1);
    let _ = client.cancel().await;

    let mut expired = claims(&idp, "alice", &["og.agent"]);
    expired["exp"] = json!(now() - 600);
    assert!(connect(rsa.sign(&expired)).await.is_err());
    assert_eq!(charges(&gw).await, 1);
}
