//! The registry's second line of defence, per capability: a duplicate rule the
//! detection job runs over the effects ledger (and, optionally, the upstream's own
//! listing of its effects), and spend and action limits the claim reserves against.

use std::collections::BTreeMap;
use std::time::Duration;

use iso_currency::Currency;
use jiff::SignedDuration;
use serde_json::Value;

use super::UpstreamKind;
use crate::template::Template;

/// What a duplicate rule compares: the business reference or a significant argument
/// (its normalised value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchOn {
    /// The normalised business reference.
    BusinessRef,
    /// A significant argument, by its declared path.
    Arg(String),
}

impl MatchOn {
    /// As written in the config (`business_ref`, or the argument's path).
    pub fn name(&self) -> &str {
        match self {
            MatchOn::BusinessRef => "business_ref",
            MatchOn::Arg(a) => a,
        }
    }
}

/// What a finding does beyond being recorded and sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Escalation {
    /// Record, count, log and send it.
    Alert,
    /// All that, and refuse further calls on what the finding names until an admin
    /// clears the hold.
    Hold,
}

/// What a hold stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HoldOn {
    /// Calls with the finding's business reference.
    BusinessRef,
    /// Calls whose significant argument has the finding's value (the recipient).
    Arg(String),
    /// Every call of the capability.
    Capability,
}

impl HoldOn {
    /// As written in the config.
    pub fn name(&self) -> &str {
        match self {
            HoldOn::BusinessRef => "business_ref",
            HoldOn::Arg(a) => a,
            HoldOn::Capability => "capability",
        }
    }
}

/// `[capabilities.duplicates]`: applied effects of this capability that agree on
/// every `on` value within `within` of each other are one intent carried out twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateRule {
    /// The rule's name (the capability's): findings and `detect --rule` name it.
    pub name: String,
    /// The values that must agree.
    pub on: Vec<MatchOn>,
    /// How close in time two effects must be.
    pub within: SignedDuration,
    /// How often the scheduler runs it.
    pub every: SignedDuration,
    /// Alert only, or hold too.
    pub escalation: Escalation,
    /// What a hold stops.
    pub hold: HoldOn,
}

/// `[capabilities.listing]`: a read of the upstream's own effects since a time, in
/// pages, so detection also sees effects that never passed through oncegate.
#[derive(Clone, Debug)]
pub struct Listing {
    /// HTTP GET or a read-only MCP tool.
    pub kind: UpstreamKind,
    /// The URL (literals and `{env.*}`); the gateway appends the since and cursor
    /// parameters (HTTP) or passes them as tool arguments (MCP).
    pub url: Template,
    /// Extra headers (credentials).
    pub headers: BTreeMap<String, Template>,
    /// The MCP tool.
    pub tool: Option<String>,
    /// Timeout of one page.
    pub timeout: Duration,
    /// The parameter carrying the start time (RFC 3339).
    pub since_param: String,
    /// The parameter carrying the cursor of the next page.
    pub cursor_param: String,
    /// The parameter carrying the page size, and the size asked for.
    pub limit_param: String,
    /// Effects asked for per page.
    pub page_size: u32,
    /// Static parameters (HTTP query / tool arguments), e.g. `kind = "charge"`.
    pub params: BTreeMap<String, String>,
    /// JSON pointer to the array of effects in an answer.
    pub items: String,
    /// JSON pointer to the next page's cursor (absent or null: the last page).
    pub next: String,
    /// JSON pointer (in an effect) to its reference.
    pub effect_ref: String,
    /// JSON pointer to the idempotency key the upstream saw, if it records it.
    pub key: Option<String>,
    /// JSON pointer to when it happened (RFC 3339).
    pub at: String,
    /// The call arguments an effect corresponds to: the same shape as a call's, with
    /// JSON pointers into the effect as leaves. They are normalised by the key recipe,
    /// so an upstream effect compares with an intent exactly as two calls would.
    pub arguments: Value,
}

/// What a limit counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Executions.
    Count,
    /// The sum of a money argument, in minor units of one currency.
    Money {
        /// The significant money argument.
        arg: String,
        /// The limit's currency: a call in another one is refused.
        currency: Currency,
    },
}

/// Whom a limit's budget belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitPer {
    /// One budget for the capability.
    Capability,
    /// One budget per principal.
    Principal,
}

/// What a call over the limit gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OverLimit {
    /// Refused with `OG-0027`.
    Refuse,
    /// Held for an approver, who may let it through over the limit.
    RequireApproval,
}

/// `[[capabilities.limits]]`: at most `max` (executions, or minor units) per rolling
/// `window`, reserved atomically with the claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Unique in the registry: `GET /v1/limits` and refusals name it.
    pub name: String,
    /// Counted or summed.
    pub measure: Measure,
    /// The budget (a count, or minor units).
    pub max: i64,
    /// The rolling window.
    pub window: SignedDuration,
    /// Per capability or per principal.
    pub per: LimitPer,
    /// Refuse or ask a human.
    pub over: OverLimit,
}

impl Limit {
    /// The budget's scope: the limit alone, or the limit and the principal.
    pub fn scope(&self, principal: &str) -> String {
        match self.per {
            LimitPer::Capability => self.name.clone(),
            LimitPer::Principal => format!("{}@{principal}", self.name),
        }
    }

    /// What one call reserves, from its normalised significant arguments: 1, or the
    /// amount in minor units. `Err` says why a call cannot be counted (another
    /// currency, a missing amount): such a call is refused, never let through.
    pub fn amount_of(&self, normalised: &Value) -> Result<i64, String> {
        match &self.measure {
            Measure::Count => Ok(1),
            Measure::Money { arg, currency } => {
                let value = normalised.get(arg).ok_or_else(|| {
                    format!("the call has no `{arg}`, which limit `{}` sums", self.name)
                })?;
                let code = value.get("currency").and_then(Value::as_str);
                if code != Some(currency.code()) {
                    return Err(format!(
                        "limit `{}` counts {} and this call is in {}",
                        self.name,
                        currency.code(),
                        code.unwrap_or("no currency")
                    ));
                }
                value
                    .get("minor")
                    .and_then(Value::as_str)
                    .and_then(|m| m.parse::<i64>().ok())
                    .ok_or_else(|| format!("`{arg}` has no amount limit `{}` can sum", self.name))
            }
        }
    }

    /// A count or minor units as people read it (`12`, `5000.00 USD`).
    pub fn show(&self, amount: i64) -> String {
        match &self.measure {
            Measure::Count => amount.to_string(),
            Measure::Money { currency, .. } => {
                let exp = currency.exponent().unwrap_or(0);
                let d = rust_decimal::Decimal::new(amount, exp.into());
                format!("{d} {}", currency.code())
            }
        }
    }
}
