//! A capability, the unit policy is declared on: its retry-safety category, the recipe
//! of its intent key, what repeats, unknown outcomes and other runs do, its upstream and
//! its compiled policy.
//!
//! Below the key derivation and policy evaluation that read it: it holds the compiled
//! policy set ([`PolicyEngine`]) as data, and names nothing that evaluates it.

use std::sync::Arc;

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::detection::{DuplicateRule, Limit, Listing};
use super::upstream::{Reconcile, Upstream};
use crate::normalise::{ArgPath, Normaliser};
use crate::policy::PolicyEngine;
use crate::template::Template;

/// How long a provider may go on processing a request after its caller gave up, on top
/// of the upstream timeout, for the default settle horizon. Providers and the proxies
/// in front of them bound a request's processing by their own deadlines, commonly 60 s
/// (load balancers' idle timeouts, serverless and web-server request limits); twice
/// that leaves room for a queued request that started late.
pub const DEFAULT_LATE_PROCESSING: SignedDuration = SignedDuration::from_secs(120);

/// The retry-safety category of a capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Fetch, search, list: passes through, no claim.
    Read,
    /// Set a field, upsert by key: retried freely under an attempt cap.
    IdempotentWrite,
    /// The upstream honours an idempotency key: retried only with the same key.
    Keyed,
    /// Send email, append to a ledger: never auto-retried.
    NonIdempotent,
}

impl Category {
    /// The config spelling (`non_idempotent`), for output a user compares with the
    /// config.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Read => "read",
            Category::IdempotentWrite => "idempotent_write",
            Category::Keyed => "keyed",
            Category::NonIdempotent => "non_idempotent",
        }
    }

    /// Whether a call of this category changes the world (and so is claimed, and
    /// refused when the store is down).
    pub fn is_consequential(self) -> bool {
        !matches!(self, Category::Read)
    }
}

/// Whether the principal enters the key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyPrincipal {
    /// Tenant-wide (default): two subagents charging one order are one intent.
    #[default]
    Tenant,
    /// Each principal has its own intents.
    Principal,
}

/// The structural part of the key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The run id.
    Run,
    /// The run id and the step id: the structural key.
    Step,
    /// The calendar date in the configured time zone.
    Day,
    /// No structural part: the business reference and arguments alone (default).
    #[default]
    Global,
}

/// What happens when a repeat finds an intent whose outcome is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnknown {
    /// Ask the upstream's authoritative record (needs `[capabilities.reconcile]`);
    /// undecidable answers escalate to a human.
    Reconcile,
    /// Ask a human, saying the first attempt's status is unknown.
    Escalate,
    /// Refuse further calls on this intent.
    Refuse,
    /// Execute again with the same key (only `idempotent_write` and `keyed`, whose
    /// upstream dedupes on the key).
    Retry,
}

impl OnUnknown {
    /// The config spelling (`reconcile`).
    pub fn as_str(self) -> &'static str {
        match self {
            OnUnknown::Reconcile => "reconcile",
            OnUnknown::Escalate => "escalate",
            OnUnknown::Refuse => "refuse",
            OnUnknown::Retry => "retry",
        }
    }
}

/// What happens when the same intent arrives from another run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrossRun {
    /// Alert and go on.
    Allow,
    /// Alert and hold for a human.
    RequireApproval,
    /// Alert and refuse.
    Refuse,
}

/// What happens to a repeat after the replay window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterWindow {
    /// A new generation, held for a human who is told it repeats an old intent.
    RequireApproval,
    /// A new generation through policy, executed if policy allows.
    Execute,
}

/// A declared significant argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignificantArg {
    /// Where it is read from; also its name in the key.
    pub path: ArgPath,
    /// How it is normalised.
    pub normaliser: Normaliser,
    /// Absent is allowed (and distinct from any value).
    pub optional: bool,
}

/// Which inputs make an intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecipe {
    /// The business boundary (order id, invoice id).
    pub business_ref: Option<ArgPath>,
    /// The significant arguments, in declaration order.
    pub significant: Vec<SignificantArg>,
    /// The structural part.
    pub scope: Scope,
    /// Every other top-level argument enters the key too, exactly (canonical JSON): the
    /// recipe of a fronted server's undeclared tool, whose arguments oncegate knows
    /// only from the upstream's schema, so that no argument is silently ignored.
    pub every_argument: bool,
}

/// A capability: a tool as agents see it, with its policy.
#[derive(Clone, Debug)]
pub struct Capability {
    /// The tool name agents call.
    pub name: String,
    /// Shown to agents in tools/list.
    pub description: Option<String>,
    /// The retry-safety category.
    pub category: Category,
    /// Whether the principal enters the key.
    pub key_principal: KeyPrincipal,
    /// The key recipe.
    pub key: KeyRecipe,
    /// A repeat inside this window replays.
    pub replay_window: SignedDuration,
    /// Calls per key and generation before the breaker trips (`None`: no ceiling).
    pub attempt_ceiling: Option<u32>,
    /// How long an in-flight claim is trusted.
    pub lease: SignedDuration,
    /// How long after an attempt's own request ended (timed out, lost its connection,
    /// or its lease expired) the upstream may still carry it out. Until then a
    /// reconciliation read's "not found" is not proof of absence: the intent stays
    /// `unknown` (a `keyed` or `idempotent_write` repeat may still re-execute with the
    /// same key, whose dedupe is the proof).
    pub settle_horizon: SignedDuration,
    /// How long an approval request stays open.
    pub approval_ttl: SignedDuration,
    /// What a repeat of an unknown intent does.
    pub on_unknown: OnUnknown,
    /// What the same intent from another run does.
    pub cross_run: CrossRun,
    /// What a repeat after the window does.
    pub after_window: AfterWindow,
    /// Never execute: answer `dry_run`.
    pub dry_run: bool,
    /// Coded orchestrators must send their own `Idempotency-Key` (400 without one).
    pub require_client_key: bool,
    /// The effect may take longer than an agent should wait on one request: an MCP
    /// client that declares the Tasks extension is answered a task once the call has
    /// run a moment, and polls it.
    pub long_running: bool,
    /// The upstream, if the gateway executes it.
    pub upstream: Option<Upstream>,
    /// The reconciliation read.
    pub reconcile: Option<Reconcile>,
    /// The Cedar policies governing this capability (shared by reference).
    pub policy: Option<Arc<PolicyEngine>>,
    /// The policy file, as written in the config.
    pub policy_file: Option<String>,
    /// The JSON Schema of the tool's arguments shown to agents (`None`: the gateway
    /// derives one from the key recipe, or takes an MCP upstream's own).
    pub input_schema: Option<Value>,
    /// The duplicate rule the detection job runs over its applied effects.
    pub duplicates: Option<DuplicateRule>,
    /// The upstream's own listing of its effects (bypass detection).
    pub listing: Option<Listing>,
    /// Spend and action limits, reserved atomically with each claim.
    pub limits: Vec<Limit>,
    /// `traced_arguments`: the arguments whose values the decision's trace span may
    /// carry (none by default: arguments hold customers' data).
    pub traced_arguments: Vec<ArgPath>,
}

impl Capability {
    /// Executed by its callers through the two-phase API, never by the gateway: no
    /// upstream, and not a dry run (which executes nothing anyway).
    pub fn is_claim_only(&self) -> bool {
        self.upstream.is_none() && !self.dry_run
    }

    /// The policy hash approvals are bound to ("none" without policies).
    pub fn policy_hash(&self) -> &str {
        self.policy.as_deref().map_or("none", PolicyEngine::hash)
    }

    /// The templates this capability sends: its upstream's URL, headers and body, its
    /// reconciliation read's and its listing's URLs, headers and arguments.
    pub fn templates(&self) -> Vec<&Template> {
        let mut out = Vec::new();
        if let Some(up) = &self.upstream {
            out.push(&up.url);
            out.extend(up.headers.values());
            if let Some(body) = &up.body {
                body.templates(&mut out);
            }
        }
        if let Some(rec) = &self.reconcile {
            out.push(&rec.url);
            out.extend(rec.headers.values());
            if let Some(arguments) = &rec.arguments {
                arguments.templates(&mut out);
            }
        }
        if let Some(listing) = &self.listing {
            out.push(&listing.url);
            out.extend(listing.headers.values());
        }
        out
    }
}
