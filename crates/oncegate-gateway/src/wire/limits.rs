//! Every limit's budget as `GET /v1/limits` shows it: the gateway's own type, converted
//! from the engine's [`LimitStatus`] field by field, so a rename there fails to compile
//! here instead of changing the JSON a client reads (pinned by the `wire_bytes`
//! snapshot test).

use oncegate_core::config::OverLimit;
use oncegate_engine::LimitStatus;
use serde::Serialize;

/// One budget on the wire.
#[derive(Debug, Serialize)]
pub struct Limit {
    pub limit: String,
    pub capability: String,
    pub principal: Option<String>,
    pub measure: &'static str,
    pub window: String,
    pub max: i64,
    pub used: i64,
    pub remaining: i64,
    pub currency: Option<String>,
    pub remaining_display: String,
    pub over: &'static str,
}

/// The wire spelling of what a call over a limit gets.
pub fn over_limit(over: OverLimit) -> &'static str {
    match over {
        OverLimit::Refuse => "refuse",
        OverLimit::RequireApproval => "require_approval",
    }
}

impl From<&LimitStatus> for Limit {
    fn from(l: &LimitStatus) -> Self {
        Self {
            limit: l.limit.clone(),
            capability: l.capability.clone(),
            principal: l.principal.clone(),
            measure: l.measure,
            window: l.window.clone(),
            max: l.max,
            used: l.used,
            remaining: l.remaining,
            currency: l.currency.clone(),
            remaining_display: l.remaining_display.clone(),
            over: over_limit(l.over),
        }
    }
}

/// `GET /v1/limits`.
#[derive(Debug, Serialize)]
pub struct Limits {
    pub limits: Vec<Limit>,
}
