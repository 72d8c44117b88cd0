//! In-band approvals: MCP 2026-07-28 multi round-trip requests for a call held for a
//! human approver.
//!
//! A 2026-07-28 client that declared URL-mode elicitation is not told "HELD FOR HUMAN
//! APPROVAL" and left there: its `tools/call` is answered `resultType: "input_required"`
//! with one URL-mode elicitation (the console's page of that approval, and a message
//! saying what it is for) and a `requestState` sealed by [`crate::state::RequestSeal`]:
//! the approval and intent, bound to the principal, the tool and the arguments' digest,
//! good for [`STATE_TTL`]. The client shows the link, then retries the same call with
//! the state; the retry is decided like any repeat of the call (the intent's outcome:
//! executed once by the approval, denied with the approver's reason, or still pending,
//! which is answered with a fresh state). Each state answers one retry: its nonce is
//! claimed in the store ([`oncegate_store::SharedWrite::claim_work`], each use a new
//! owner), so a second use is refused (`OG-0061`) on every replica.
//!
//! Older clients, and 2026 clients without URL-mode elicitation, keep the held tool
//! result they always had.

use jiff::{SignedDuration, Timestamp};
use oncegate_core::canonical::canonical_json;
use oncegate_core::codes::Code;
use oncegate_core::intent::Outcome;
use oncegate_store::SharedWrite;
use rmcp::model::{
    CallToolRequestParams, ElicitRequest, ElicitRequestParams, InputRequest, InputRequests,
    InputRequiredResult, JsonObject, MetaObject,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::state::{AppState, Principal, StateClaims, secret};
use crate::wire::{Envelope, OUTCOME_META_KEY};

/// How long a `requestState` is good for: a held call's retry comes later than this
/// only after the client gave up, and then it calls again and is answered a fresh one.
pub const STATE_TTL: SignedDuration = SignedDuration::from_mins(15);

/// The key of the one input request (the approval page) in `inputRequests`.
pub const APPROVAL_INPUT: &str = "oncegate_approval";

/// Where a held call's approval page is, if this request may be answered in-band: a
/// 2026-07-28 (or later) request whose client declared URL-mode elicitation, over HTTP
/// with a `Host` (which `/mcp` already checked against `gateway.mcp_allowed_hosts`).
pub fn console_base(ctx: &RequestContext<RoleServer>) -> Option<String> {
    let modern = ctx.protocol_version().is_some_and(|v| !v.has_initialize());
    let url_mode = ctx
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.url.is_some());
    if !(modern && url_mode) {
        return None;
    }
    let parts = ctx.extensions.get::<axum::http::request::Parts>()?;
    let host = parts
        .headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))?;
    // Behind a proxy that ends TLS, the link the human opens is https.
    let https = parts
        .headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    Some(format!("{}://{host}", if https { "https" } else { "http" }))
}

/// The principal as a state binds it: a JWT's issuer with its name, else the name.
fn bound_principal(p: &Principal) -> String {
    match &p.issuer {
        Some(issuer) => format!("{issuer}#{}", p.name),
        None => p.name.clone(),
    }
}

/// SHA-256 (hex) of the call: the tool and its arguments' canonical JSON.
fn call_digest(tool: &str, arguments: &JsonObject) -> String {
    let call = json!({"tool": tool, "arguments": Value::Object(arguments.clone())});
    hex::encode(Sha256::digest(canonical_json(&call).as_bytes()))
}

/// The answer to a held call, in-band: the approval page as a URL-mode elicitation, and
/// a fresh sealed state. `None` when the outcome names no approval or intent.
pub fn held(
    state: &AppState,
    base: &str,
    principal: &Principal,
    request: &CallToolRequestParams,
    outcome: &Outcome,
    now: Timestamp,
) -> Option<InputRequiredResult> {
    let approval = outcome.approval_id.clone()?;
    let key = outcome.key.as_ref()?.as_str().to_owned();
    let tool = request.name.to_string();
    let claims = StateClaims {
        approval: approval.clone(),
        key,
        principal: bound_principal(principal),
        digest: call_digest(&tool, &request.arguments.clone().unwrap_or_default()),
        tool: tool.clone(),
        expires: (now + STATE_TTL).as_second(),
        nonce: secret(),
    };
    let url = format!("{base}/console/approvals/{approval}");
    let message = format!(
        "oncegate holds this call to {tool} for a human approver (approval {approval}). \
         Open {url} to review it; once it is approved or denied, retrying the call answers its outcome. \
         Nothing has been executed."
    );
    let elicitation = ElicitRequest::new(ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message,
        url,
        elicitation_id: String::new(),
    });
    let mut requests = InputRequests::new();
    requests.insert(
        APPROVAL_INPUT.to_owned(),
        InputRequest::Elicitation(elicitation),
    );
    // The outcome as every oncegate answer reports it, for clients that read `_meta`.
    let mut meta = MetaObject::new();
    meta.insert(OUTCOME_META_KEY.into(), Envelope::from(outcome).mcp_meta());
    Some(
        InputRequiredResult::new(Some(requests), Some(state.request_seal().seal(&claims)))
            .with_meta(meta),
    )
}

/// A retry's `requestState`, checked and used up: sealed by this gateway for this
/// principal and this very call, not past its time, and not used before (claimed once
/// in the store). Anything else is refused before the call is decided.
pub async fn resume(
    state: &AppState,
    principal: &Principal,
    request: &CallToolRequestParams,
    sealed: &str,
    now: Timestamp,
) -> Result<(), ApiError> {
    let invalid = |why: &str| {
        ApiError::Coded(
            axum::http::StatusCode::BAD_REQUEST,
            Code::RequestStateInvalid,
            format!("requestState refused: {why}; call the tool again without it"),
        )
    };
    let claims = state
        .request_seal()
        .open(sealed)
        .ok_or_else(|| invalid("it is not one this gateway sealed"))?;
    bound_to(&claims, principal, request, now).map_err(invalid)?;
    // Used once: the nonce's claim outlives the state itself on any replica's clock.
    let ttl =
        SignedDuration::from_secs(claims.expires - now.as_second()) + SignedDuration::from_hours(1);
    let first = state
        .gate()
        .store()
        .claim_work(
            &format!("request-state:{}", claims.nonce),
            &secret(),
            now,
            ttl,
        )
        .await
        .map_err(ApiError::from)?;
    if !first {
        return Err(ApiError::Coded(
            axum::http::StatusCode::CONFLICT,
            Code::RequestStateUsed,
            "requestState refused: it was already used; retry with the latest one, or call the tool again without it".into(),
        ));
    }
    Ok(())
}

/// Whether an opened state is good for this call now: not past its deadline, issued to
/// this principal, for this tool and these arguments. Why not, if not.
fn bound_to(
    claims: &StateClaims,
    principal: &Principal,
    request: &CallToolRequestParams,
    now: Timestamp,
) -> Result<(), &'static str> {
    if claims.expires <= now.as_second() {
        return Err("it has expired");
    }
    if claims.principal != bound_principal(principal) {
        return Err("it was issued to another principal");
    }
    let tool = request.name.to_string();
    let digest = call_digest(&tool, &request.arguments.clone().unwrap_or_default());
    if claims.tool != tool || claims.digest != digest {
        return Err("it was issued for another call (tool or arguments)");
    }
    Ok(())
}

/// Whether the client answered the approval page with `decline` or `cancel` (the user
/// would not open it): the call stays held, and is answered as held.
pub fn declined(request: &CallToolRequestParams) -> bool {
    request
        .input_responses
        .as_ref()
        .and_then(|r| r.get(APPROVAL_INPUT))
        .and_then(|r| r.get("action"))
        .and_then(Value::as_str)
        .is_some_and(|a| a == "decline" || a == "cancel")
}

#[cfg(test)]
mod tests {
    use oncegate_core::config::Role;

    use super::*;

    fn planner() -> Principal {
        Principal {
            name: "planner".into(),
            role: Role::Agent,
            issuer: None,
        }
    }

    fn refund(amount: &str) -> CallToolRequestParams {
        let arguments = json!({"order_id": "R-1", "amount": amount});
        CallToolRequestParams::new("refund").with_arguments(arguments.as_object().unwrap().clone())
    }

    #[test]
    fn a_state_is_bound_to_its_deadline_principal_tool_and_arguments() {
        let now = Timestamp::from_second(1_900_000_000).unwrap();
        let request = refund("250.00");
        let claims = StateClaims {
            approval: "ap_1".into(),
            key: "k".into(),
            principal: "planner".into(),
            tool: "refund".into(),
            digest: call_digest("refund", request.arguments.as_ref().unwrap()),
            expires: (now + STATE_TTL).as_second(),
            nonce: "n".into(),
        };
        assert_eq!(bound_to(&claims, &planner(), &request, now), Ok(()));
        let later = now + STATE_TTL;
        assert_eq!(
            bound_to(&claims, &planner(), &request, later),
            Err("it has expired")
        );
        let other = Principal {
            name: "subagent".into(),
            ..planner()
        };
        assert_eq!(
            bound_to(&claims, &other, &request, now),
            Err("it was issued to another principal")
        );
        // The same name proved by an issuer's JWT is another principal.
        let jwt = Principal {
            issuer: Some("https://idp".into()),
            ..planner()
        };
        assert_eq!(
            bound_to(&claims, &jwt, &request, now),
            Err("it was issued to another principal")
        );
        let drifted = refund("260.00");
        assert_eq!(
            bound_to(&claims, &planner(), &drifted, now),
            Err("it was issued for another call (tool or arguments)")
        );
        let mut renamed = request.clone();
        renamed.name = "charge_card".into();
        assert!(bound_to(&claims, &planner(), &renamed, now).is_err());
    }

    #[test]
    fn declining_the_page_is_read_from_the_input_responses() {
        let mut request = refund("250.00");
        assert!(!declined(&request));
        for (action, no) in [("accept", false), ("decline", true), ("cancel", true)] {
            let mut responses = rmcp::model::InputResponses::new();
            responses.insert(APPROVAL_INPUT.into(), json!({"action": action}));
            request.input_responses = Some(responses);
            assert_eq!(declined(&request), no, "{action}");
        }
    }
}
