//! The simulated upstreams `oncegate verify` runs its scenarios against (no real effect
//! is ever sent): a provider that can commit then time out, or time out and commit
//! later, and one that answers every call with 429.

use std::sync::Mutex;

use oncegate_core::decide::{EffectResult, ReconcileResult};
use oncegate_engine::{Executor, IntentHandle};
use serde_json::json;

/// A simulated provider: it honours the idempotency key for `keyed` capabilities,
/// ignores it otherwise, and can commit then time out, or time out and commit later.
#[derive(Default)]
pub(super) struct Simulated {
    honours_key: bool,
    /// Every execute() call, deduped or not.
    executions: std::sync::atomic::AtomicUsize,
    effects: Mutex<Vec<String>>,
    pub(super) stall_next: Mutex<bool>,
    /// The next execution times out before the provider commits; it commits on `land`.
    pub(super) late_next: Mutex<bool>,
    late: Mutex<Vec<String>>,
    /// The keys every execution was sent, in order.
    pub(super) keys: Mutex<Vec<String>>,
    /// The last intent executed (to render its request).
    pub(super) last: Mutex<Option<IntentHandle>>,
}

pub(super) fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Simulated {
    /// A provider with nothing committed yet, honouring the key or not.
    pub(super) fn new(honours_key: bool) -> Self {
        Self {
            honours_key,
            ..Self::default()
        }
    }

    pub(super) fn executions(&self) -> usize {
        self.executions.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(super) fn count(&self) -> usize {
        locked(&self.effects).len()
    }

    /// The provider commits what it was still processing, as a provider that honours
    /// the key (or not) does.
    pub(super) fn land(&self) {
        let late = std::mem::take(&mut *locked(&self.late));
        let mut effects = locked(&self.effects);
        for key in late {
            if !(self.honours_key && effects.contains(&key)) {
                effects.push(key);
            }
        }
    }
}

impl Executor for Simulated {
    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        self.executions
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        locked(&self.keys).push(intent.key.clone());
        *locked(&self.last) = Some(intent.clone());
        if std::mem::take(&mut *locked(&self.late_next)) {
            locked(&self.late).push(intent.key.clone());
            return EffectResult::Unknown {
                message: "simulated: timed out; the provider is still processing it".into(),
            };
        }
        let mut effects = self.effects.lock().unwrap_or_else(|e| e.into_inner());
        if !(self.honours_key && effects.contains(&intent.key)) {
            effects.push(intent.key.clone());
        }
        let id = format!("sim_{}", effects.len());
        drop(effects);
        let stalled =
            std::mem::take(&mut *self.stall_next.lock().unwrap_or_else(|e| e.into_inner()));
        if stalled {
            EffectResult::Unknown {
                message: "simulated: committed, then the answer timed out".into(),
            }
        } else {
            EffectResult::Applied {
                effect_ref: Some(id.clone()),
                result: json!({"id": id}),
            }
        }
    }

    async fn reconcile(&self, intent: IntentHandle) -> ReconcileResult {
        let effects = self.effects.lock().unwrap_or_else(|e| e.into_inner());
        match effects.iter().position(|k| *k == intent.key) {
            Some(i) => ReconcileResult::Found {
                effect_ref: Some(format!("sim_{}", i + 1)),
                result: json!({}),
            },
            None => ReconcileResult::NotFound,
        }
    }
}

/// A provider that answers every call with 429: nothing happens, so each repeat executes
/// again and the attempt ceiling is what stops the loop.
#[derive(Default)]
pub(super) struct RateLimited(pub(super) std::sync::atomic::AtomicUsize);

impl Executor for RateLimited {
    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        EffectResult::NotSent {
            message: "simulated: 429, nothing was done".into(),
        }
    }
}
