//! Stable error codes.
//!
//! Every denial, refusal and store failure carries one of these codes. They appear in
//! responses, audit records and `docs/error-codes.md`; once published a code never
//! changes meaning, so clients and runbooks can match on it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A stable, documented reason code (`OG-0001` ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Code {
    /// A Cedar policy denied the call.
    #[serde(rename = "OG-0001")]
    PolicyDenied,
    /// A human approver denied the call.
    #[serde(rename = "OG-0002")]
    ApprovalDenied,
    /// The approval expired before anyone decided.
    #[serde(rename = "OG-0003")]
    ApprovalExpired,
    /// The attempt ceiling for this intent key was reached; the breaker is tripped.
    #[serde(rename = "OG-0004")]
    AttemptCeiling,
    /// The capability or the agent is switched off by an admin.
    #[serde(rename = "OG-0005")]
    KillSwitch,
    /// The outcome of an earlier attempt is unknown and the capability refuses repeats.
    #[serde(rename = "OG-0006")]
    UnknownRefused,
    /// The store is unreachable; consequential calls are refused (fail closed).
    #[serde(rename = "OG-0007")]
    StoreUnavailable,
    /// The same intent was already issued by another run, and policy refuses it.
    #[serde(rename = "OG-0008")]
    CrossRunRefused,
    /// The arguments cannot be normalised (bad money amount, missing business ref...).
    #[serde(rename = "OG-0009")]
    InvalidArguments,
    /// The upstream answered with a definite failure (4xx): nothing happened.
    #[serde(rename = "OG-0010")]
    UpstreamRejected,
    /// The upstream's outcome is unknown (timeout, reset after send, 5xx).
    #[serde(rename = "OG-0011")]
    UpstreamUnknown,
    /// The approval no longer matches the call (arguments or policy changed).
    #[serde(rename = "OG-0012")]
    ApprovalVoid,
    /// The caller may not do this (wrong role, self-approval).
    #[serde(rename = "OG-0013")]
    Forbidden,
    /// Another attempt holds the claim on this intent.
    #[serde(rename = "OG-0014")]
    InFlight,
    /// The store lost too many races in a row; the call was not decided.
    #[serde(rename = "OG-0015")]
    Contention,
    /// The capability is not declared in the registry.
    #[serde(rename = "OG-0016")]
    UnknownCapability,
    /// The capability requires the caller's own `Idempotency-Key` and none was sent.
    #[serde(rename = "OG-0017")]
    ClientKeyMissing,
    /// The caller's `Idempotency-Key` was first used with other significant arguments.
    #[serde(rename = "OG-0018")]
    ClientKeyReused,
    /// The caller's `Idempotency-Key` names an intent that is still in flight.
    #[serde(rename = "OG-0019")]
    ClientKeyInFlight,
    /// The principal exceeded its rate cap for read capabilities.
    #[serde(rename = "OG-0020")]
    RateLimited,
    /// No such intent, approval, route or kill-switch target.
    #[serde(rename = "OG-0021")]
    NotFound,
    /// The HTTP request itself was refused (too large, timed out, wrong method).
    #[serde(rename = "OG-0022")]
    RequestRejected,
    /// The reconciliation read found no effect yet, but the attempt may still land (its
    /// request may still be processed upstream until the settle horizon, or oncegate's
    /// own call is still running): the intent stays unknown.
    #[serde(rename = "OG-0023")]
    Settling,
    /// A completion or heartbeat names a claim that no longer holds the intent (a newer
    /// execution superseded it, its lease expired, or the intent was turned unknown or
    /// settled otherwise since): nothing was recorded.
    #[serde(rename = "OG-0024")]
    StaleClaim,
    /// The capability has no upstream in this gateway: its callers execute it through
    /// the two-phase API (claim, execute, complete); `POST /v1/calls` and MCP
    /// `tools/call` cannot.
    #[serde(rename = "OG-0025")]
    ClaimOnly,
    /// A stored intent or approval does not match the audit record that wrote it
    /// (edited, rolled back or deleted row): refused, never re-executed.
    /// A detection finding placed a hold on this business reference, recipient or
    /// capability; a human is reviewing it and an admin clears it.
    #[serde(rename = "OG-0026")]
    Held,
    /// A spend or action limit's budget for its window is used up.
    #[serde(rename = "OG-0027")]
    LimitReached,
    #[serde(rename = "OG-0030")]
    StoreIntegrity,
    /// The configured store is missing, empty or not an oncegate store (or, for
    /// `oncegate init`, already exists): nothing starts on it.
    #[serde(rename = "OG-0031")]
    StoreNotInitialised,
    /// An `Oncegate-Run-Id`, `Oncegate-Step-Id` or `Idempotency-Key` (or an MCP `_meta`
    /// run/step id) is not 1 to 255 visible ASCII characters, or was sent twice.
    #[serde(rename = "OG-0050")]
    InvalidHeader,
    /// The request carries more than one `Authorization` header.
    #[serde(rename = "OG-0051")]
    AmbiguousAuthorization,
    /// The arguments exceed `gateway.max_argument_bytes`.
    #[serde(rename = "OG-0052")]
    ArgumentsTooLarge,
    /// The arguments nest deeper than `gateway.max_argument_depth`.
    #[serde(rename = "OG-0053")]
    ArgumentsTooDeep,
    /// No bearer token, or one no principal holds (HTTP 401).
    #[serde(rename = "OG-0054")]
    Unauthenticated,
    /// The gateway failed itself (a call task panicked or was cancelled): HTTP 500.
    #[serde(rename = "OG-0055")]
    Internal,
    /// A JWT's issuer's keys cannot be fetched (or are older than `jwks_max_age` and
    /// cannot be refreshed), so no token of it can be checked: HTTP 503, fail closed.
    #[serde(rename = "OG-0056")]
    IdentityUnavailable,
    /// Too many failed authentications from this address (or naming this principal):
    /// HTTP 429, the token was not checked (an address) or not accepted (a principal).
    #[serde(rename = "OG-0057")]
    AuthThrottled,
    /// The agent already has `gateway.pending_approvals_per_agent` calls waiting for an
    /// approver: this one is refused, not queued (HTTP 429). Nothing was executed.
    #[serde(rename = "OG-0058")]
    ApprovalQueueFull,
    /// A fronted MCP server changed a tool's definition (description, input schema,
    /// annotations or output schema) since oncegate pinned it: the tool is held (not
    /// listed, calls refused, HTTP 409) until an admin accepts the new definition.
    #[serde(rename = "OG-0059")]
    ToolChanged,
    /// An MCP `tools/call` retried with a `requestState` this gateway did not issue for
    /// this call: altered, expired, another principal's, for other arguments or another
    /// tool, or sealed by another key (another gateway, or before a restart without a
    /// chain key). JSON-RPC invalid params; nothing was decided.
    #[serde(rename = "OG-0060")]
    RequestStateInvalid,
    /// An MCP `tools/call` retried with a `requestState` that was already used once:
    /// each one answers a single retry. JSON-RPC invalid params; nothing was decided.
    #[serde(rename = "OG-0061")]
    RequestStateUsed,
}

impl Code {
    /// Every code, in numeric order (used by the docs test).
    pub const ALL: [Code; 41] = [
        Code::PolicyDenied,
        Code::ApprovalDenied,
        Code::ApprovalExpired,
        Code::AttemptCeiling,
        Code::KillSwitch,
        Code::UnknownRefused,
        Code::StoreUnavailable,
        Code::CrossRunRefused,
        Code::InvalidArguments,
        Code::UpstreamRejected,
        Code::UpstreamUnknown,
        Code::ApprovalVoid,
        Code::Forbidden,
        Code::InFlight,
        Code::Contention,
        Code::UnknownCapability,
        Code::ClientKeyMissing,
        Code::ClientKeyReused,
        Code::ClientKeyInFlight,
        Code::RateLimited,
        Code::NotFound,
        Code::RequestRejected,
        Code::Settling,
        Code::StaleClaim,
        Code::ClaimOnly,
        Code::Held,
        Code::LimitReached,
        Code::StoreIntegrity,
        Code::StoreNotInitialised,
        Code::InvalidHeader,
        Code::AmbiguousAuthorization,
        Code::ArgumentsTooLarge,
        Code::ArgumentsTooDeep,
        Code::Unauthenticated,
        Code::Internal,
        Code::IdentityUnavailable,
        Code::AuthThrottled,
        Code::ApprovalQueueFull,
        Code::ToolChanged,
        Code::RequestStateInvalid,
        Code::RequestStateUsed,
    ];

    /// The wire spelling, e.g. `OG-0004`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::PolicyDenied => "OG-0001",
            Code::ApprovalDenied => "OG-0002",
            Code::ApprovalExpired => "OG-0003",
            Code::AttemptCeiling => "OG-0004",
            Code::KillSwitch => "OG-0005",
            Code::UnknownRefused => "OG-0006",
            Code::StoreUnavailable => "OG-0007",
            Code::CrossRunRefused => "OG-0008",
            Code::InvalidArguments => "OG-0009",
            Code::UpstreamRejected => "OG-0010",
            Code::UpstreamUnknown => "OG-0011",
            Code::ApprovalVoid => "OG-0012",
            Code::Forbidden => "OG-0013",
            Code::InFlight => "OG-0014",
            Code::Contention => "OG-0015",
            Code::UnknownCapability => "OG-0016",
            Code::ClientKeyMissing => "OG-0017",
            Code::ClientKeyReused => "OG-0018",
            Code::ClientKeyInFlight => "OG-0019",
            Code::RateLimited => "OG-0020",
            Code::NotFound => "OG-0021",
            Code::RequestRejected => "OG-0022",
            Code::Settling => "OG-0023",
            Code::StaleClaim => "OG-0024",
            Code::ClaimOnly => "OG-0025",
            Code::Held => "OG-0026",
            Code::LimitReached => "OG-0027",
            Code::StoreIntegrity => "OG-0030",
            Code::StoreNotInitialised => "OG-0031",
            Code::InvalidHeader => "OG-0050",
            Code::AmbiguousAuthorization => "OG-0051",
            Code::ArgumentsTooLarge => "OG-0052",
            Code::ArgumentsTooDeep => "OG-0053",
            Code::Unauthenticated => "OG-0054",
            Code::Internal => "OG-0055",
            Code::IdentityUnavailable => "OG-0056",
            Code::AuthThrottled => "OG-0057",
            Code::ApprovalQueueFull => "OG-0058",
            Code::ToolChanged => "OG-0059",
            Code::RequestStateInvalid => "OG-0060",
            Code::RequestStateUsed => "OG-0061",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_spelling_matches_as_str_and_codes_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::String(code.as_str().to_owned()));
            assert!(seen.insert(code.as_str()), "duplicate code {code}");
        }
    }

    #[test]
    fn every_code_is_documented() {
        let doc = include_str!("../../../docs/error-codes.md");
        for code in Code::ALL {
            assert!(
                doc.contains(code.as_str()),
                "{code} missing from docs/error-codes.md"
            );
        }
    }
}
