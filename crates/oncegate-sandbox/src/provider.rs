//! The provider itself: one sandbox's state (its ledger, its fault queue, what its MCP
//! tool list hides or rewords) and the one create, lookup and listing code that both
//! surfaces (`http`, `mcp`) call, so that an effect is the same whichever made it.

use std::{
    fmt,
    num::NonZeroUsize,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use jiff::Timestamp;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::faults::{Fault, FaultKind, FaultQueue};
use crate::ledger::{Commit, EffectFilter, KeyUse, Ledger, Lookup, NewEffect};
use crate::resource::Resource;

/// How a sandbox behaves; the defaults are a well-behaved provider without auth.
#[derive(Default, Clone)]
pub struct SandboxConfig {
    /// Resources whose creates (`POST` or MCP tool) ignore the idempotency key: every
    /// request is a new effect, and the key is not recorded, so a lookup by key finds
    /// nothing (`GET /v1/effects` still shows it as sent).
    pub ignore_idempotency_key: Vec<Resource>,
    /// When set, every `/v1` and `/mcp` request must carry `Authorization: Bearer <api_key>`.
    pub api_key: Option<String>,
}

// Written by hand so that logging a config never prints the API key.
impl fmt::Debug for SandboxConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxConfig")
            .field("ignore_idempotency_key", &self.ignore_idempotency_key)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Longest accepted idempotency key, as at the providers the sandbox imitates.
const MAX_KEY_LEN: usize = 255;

/// Whether `key` can be an idempotency key. An empty or overlong one is refused rather
/// than taken as no key, since that would turn a retry into a second effect.
pub(crate) fn acceptable_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN
}

/// One sandbox's state, shared by every request on either surface.
pub(crate) struct Sandbox {
    pub(crate) config: SandboxConfig,
    ledger: Mutex<Ledger>,
    faults: Mutex<FaultQueue>,
    /// MCP tools taken out of the list (`PUT /_sandbox/mcp/hidden`).
    mcp_hidden: Mutex<std::collections::BTreeSet<String>>,
    /// MCP tools' descriptions replaced (`PUT /_sandbox/mcp/descriptions`).
    mcp_descriptions: Mutex<std::collections::BTreeMap<String, String>>,
    /// Told when the MCP tool list changes; every listening client hears it.
    pub(crate) tools_changed: tokio::sync::broadcast::Sender<()>,
}

/// A create that committed, or that replayed the commit of an earlier one.
#[derive(Debug)]
pub(crate) struct Created {
    /// What the provider answers: the new object, or the first one for a replay.
    pub(crate) object: Value,
    pub(crate) replayed: bool,
    /// What the request's fault still asks for once the effect is committed; each
    /// surface acts it out its own way.
    pub(crate) after_commit: AfterCommit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterCommit {
    Answer,
    /// `stall_after_commit`: wait this long, then answer.
    Stall(Duration),
    /// `drop_after_commit`: never answer.
    Drop,
}

/// Why a create committed nothing. Each surface maps it to its wire once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `fail_before_commit`, or a commit task that died: the same to the caller.
    Internal,
    /// `decline`.
    CardDeclined,
    /// `rate_limit`.
    RateLimited,
    /// The key was used before with another body.
    KeyReused,
}

/// What a lookup asks for (`GET /v1/charges?..`, `find_charge`); every given criterion
/// must match.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LookupParams {
    pub(crate) idempotency_key: Option<String>,
    pub(crate) order_id: Option<String>,
    pub(crate) dedupe_ref: Option<String>,
}

/// What an effect listing asks for (`GET /v1/effects?..`, `list_effects`); every given
/// criterion must match. `after` and `limit` page it (see [`Sandbox::effects`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EffectsParams {
    pub(crate) kind: Option<String>,
    pub(crate) order_id: Option<String>,
    pub(crate) idempotency_key: Option<String>,
    /// RFC 3339; parsed here rather than by serde, so that the caller is told what a
    /// timestamp looks like.
    pub(crate) since: Option<String>,
    pub(crate) after: Option<u64>,
    pub(crate) limit: Option<u64>,
}

/// The largest page an effect listing answers, and the page size once `after` is given
/// without a `limit`.
pub(crate) const MAX_EFFECTS_PAGE: usize = 1000;

/// Why an effect listing cannot be made; the text is shown to the caller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct InvalidListing(pub(crate) String);

/// Why a lookup cannot be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LookupError {
    /// No criterion at all: a lookup would match everything.
    NoCriterion,
    /// `dedupe_ref` on a resource other than emails.
    DedupeRefNotEmails,
}

impl Sandbox {
    pub(crate) fn new(config: SandboxConfig) -> Sandbox {
        Sandbox {
            config,
            ledger: Mutex::default(),
            faults: Mutex::default(),
            mcp_hidden: Mutex::default(),
            mcp_descriptions: Mutex::default(),
            tools_changed: tokio::sync::broadcast::channel(16).0,
        }
    }

    // A handler that panicked under a lock cannot leave the ledger half-written (every
    // mutation is a single push/insert), so a poisoned lock is still safe to use.
    pub(crate) fn hidden(&self) -> MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.mcp_hidden
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn descriptions(
        &self,
    ) -> MutexGuard<'_, std::collections::BTreeMap<String, String>> {
        self.mcp_descriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn faults(&self) -> MutexGuard<'_, FaultQueue> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates `effect` as the provider does, from either surface: applies `fault` (the
    /// one the request asked for itself, else the next queued for the resource), then
    /// commits unless `key` says it already happened.
    ///
    /// Call it only for a request that is otherwise valid, so that a test's queued fault
    /// is not used up by some malformed call.
    pub(crate) async fn create(
        self: &Arc<Self>,
        effect: NewEffect,
        key: Option<String>,
        fault: Option<Fault>,
    ) -> Result<Created, Refusal> {
        let resource = effect.resource();
        let fault = fault.or_else(|| self.faults().take(resource));
        if let Some(fault) = fault {
            tracing::debug!(
                %resource,
                fault = fault.kind.as_str(),
                delay_ms = u64::try_from(fault.delay.as_millis()).unwrap_or(u64::MAX),
                "sandbox fault applied"
            );
        }
        match fault.map(|f| f.kind) {
            Some(FaultKind::FailBeforeCommit) => return Err(Refusal::Internal),
            Some(FaultKind::Decline) => return Err(Refusal::CardDeclined),
            Some(FaultKind::RateLimit) => return Err(Refusal::RateLimited),
            _ => {}
        }

        // The commit runs on its own task: a provider finishes a request whose caller hung
        // up, and a slow request that commits after the caller's timeout is exactly the
        // ambiguity the gateway has to survive. Dropping this future (an HTTP client that
        // disconnects, an MCP call that is cancelled) detaches the task; it never aborts
        // an effect half-way.
        let slow = fault
            .filter(|f| matches!(f.kind, FaultKind::Slow | FaultKind::SlowThenDrop))
            .map(|f| f.delay);
        let honoured = !self.config.ignore_idempotency_key.contains(&resource);
        let commit = tokio::spawn({
            let sandbox = Arc::clone(self);
            async move {
                if let Some(delay) = slow {
                    tokio::time::sleep(delay).await;
                }
                let key = KeyUse {
                    key: key.as_deref(),
                    honoured,
                };
                sandbox.ledger().commit(effect, key, Timestamp::now())
            }
        })
        .await
        .map_err(|_| Refusal::Internal)?;

        let (object, replayed) = match commit {
            Commit::Created(object) => (object, false),
            Commit::Replayed(object) => (object, true),
            Commit::KeyReused => return Err(Refusal::KeyReused),
        };
        let after_commit = match fault {
            Some(Fault {
                kind: FaultKind::StallAfterCommit,
                delay,
            }) => AfterCommit::Stall(delay),
            Some(Fault {
                kind: FaultKind::DropAfterCommit | FaultKind::SlowThenDrop,
                ..
            }) => AfterCommit::Drop,
            _ => AfterCommit::Answer,
        };
        Ok(Created {
            object,
            replayed,
            after_commit,
        })
    }

    /// `{"found":true,"charge":{..}}` with the first object of `resource` that matches
    /// `params`, or `{"found":false}`.
    pub(crate) fn lookup(
        &self,
        resource: Resource,
        params: &LookupParams,
    ) -> Result<Value, LookupError> {
        if params.dedupe_ref.is_some() && resource != Resource::Emails {
            return Err(LookupError::DedupeRefNotEmails);
        }
        let lookup = Lookup {
            idempotency_key: params.idempotency_key.as_deref(),
            order_id: params.order_id.as_deref(),
            dedupe_ref: params.dedupe_ref.as_deref(),
        };
        if lookup.idempotency_key.is_none()
            && lookup.order_id.is_none()
            && lookup.dedupe_ref.is_none()
        {
            return Err(LookupError::NoCriterion);
        }
        let found = self.ledger().find(resource, &lookup).cloned();
        Ok(match found {
            Some(object) => json!({ "found": true, resource.lookup_field(): object }),
            None => json!({ "found": false }),
        })
    }

    /// `{"effects":[..],"next":seq|null}`: the effects that match `params`, in commit
    /// order. With neither `after` nor `limit` that is every match (as callers from before
    /// paging expect); otherwise a page of `limit` (default and most
    /// [`MAX_EFFECTS_PAGE`]) after the `after` seq, whose `next` is the `after` of the
    /// following page when this one is full, else `null`.
    pub(crate) fn effects(&self, params: &EffectsParams) -> Result<Value, InvalidListing> {
        let resource = match params.kind.as_deref() {
            None => None,
            Some(kind) => Some(
                Resource::ALL
                    .into_iter()
                    .find(|r| r.effect_kind() == kind)
                    .ok_or_else(|| {
                        InvalidListing(format!(
                            "kind {kind:?} is not one of charge, refund, email, ledger"
                        ))
                    })?,
            ),
        };
        let since = match params.since.as_deref() {
            None => None,
            Some(text) => Some(text.parse::<Timestamp>().map_err(|e| {
                // A `+` in a query string arrives as a space: say so, it is the usual
                // reason a correct-looking offset is refused.
                let plus = if text.contains(' ') {
                    " (send a '+' offset as %2B in a query string)"
                } else {
                    ""
                };
                InvalidListing(format!(
                    "since must be an RFC 3339 timestamp such as 2026-01-31T09:30:00Z, \
                     not {text:?}{plus}: {e}"
                ))
            })?),
        };
        let limit = match (params.limit, params.after) {
            (None, None) => None,
            (None, Some(_)) => NonZeroUsize::new(MAX_EFFECTS_PAGE),
            (Some(limit), _) => Some(
                usize::try_from(limit)
                    .ok()
                    .filter(|limit| *limit <= MAX_EFFECTS_PAGE)
                    .and_then(NonZeroUsize::new)
                    .ok_or_else(|| {
                        InvalidListing(format!(
                            "limit must be from 1 to {MAX_EFFECTS_PAGE}, not {limit}"
                        ))
                    })?,
            ),
        };
        let filter = EffectFilter {
            resource,
            order_id: params.order_id.as_deref(),
            idempotency_key: params.idempotency_key.as_deref(),
            since,
            // A cursor past any `seq` there can be is an empty page, not an error.
            after: params
                .after
                .map_or(0, |after| usize::try_from(after).unwrap_or(usize::MAX)),
        };
        let page = self.ledger().effects(&filter, limit);
        Ok(json!({ "effects": page.effects, "next": page.next }))
    }

    /// `{"order_id","charges":[..],"refunds":[..]}`. The sandbox has no order catalogue:
    /// any order exists, with whatever was done to it.
    pub(crate) fn order(&self, order_id: &str) -> Value {
        let ledger = self.ledger();
        json!({
            "order_id": order_id,
            "charges": ledger.for_order(Resource::Charges, order_id),
            "refunds": ledger.for_order(Resource::Refunds, order_id),
        })
    }
}
