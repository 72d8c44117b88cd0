//! The thief: a principal other than the claimer that learns real fencing tokens and
//! tries them on other principals' claims. Every attempt must be refused and change
//! nothing; the world's checks then prove the promise held all the same.
//!
//! What it learns, from the weakest model to the strongest:
//! - **What another principal can read.** The intents in flight, as the read API shows
//!   them to an approver (`GET /v1/intents?state=in_flight`: the record serialised as
//!   the gateway answers it). Their leases name the gate and the claim's seal, never
//!   its nonce, so the token the thief rebuilds from them carries the seal's digest in
//!   the nonce's place.
//! - **The worker's own token**, as if leaked from its memory or its logs: the real
//!   nonce, with only the principal it was issued to standing in the way.
//!
//! Its own moments are drawn by the plan (`Leak`, `Snoop`); which gateway answers it,
//! and whether the store is up, are the world's.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use oncegate_core::codes::Code;
use oncegate_core::intent::IntentState;
use oncegate_core::{EffectResult, IntentKey};
use oncegate_engine::{Claim, Fence, GateError};
use oncegate_store::{IntentFilter, IntentsRead};
use serde_json::json;

use super::{World, lock};
use crate::simulation::plan::{Leak, Snoop, Theft, Thief};

/// The stat that counts the thief's attempts (completions and heartbeats).
pub const STEALS: &str =
    "steals tried: another principal's claim completed or heartbeaten with a token it learnt";

/// The stat that counts the thief's attempts the gateway took (must stay 0).
pub const STEALS_ACCEPTED: &str = "steals accepted (must be 0)";

/// The stat that counts the attempts with a token rebuilt from reads that the gateway
/// took: 0 even without the principal check, since a read never shows the nonce.
pub fn read_steals_accepted() -> String {
    steal_stat(Source::Read, Ok(()))
}

/// Where the thief's token came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Rebuilt from an intent read through the read API.
    Read,
    /// The claimer's own token, leaked.
    Leaked,
}

/// One attempt and how the gateway answered it.
#[derive(Debug)]
pub struct Steal {
    pub at: Duration,
    pub thief: String,
    pub source: Source,
    pub theft: Theft,
    pub key: IntentKey,
    /// `Ok`: taken (a completion recorded or answered, a lease extended); `Err`: refused
    /// with this code.
    pub answer: Result<(), Code>,
}

impl World {
    /// The claim's token leaks to `leak.thief`, who tries it `leak.after` the claim,
    /// through the worker's gateway host. The thief is never the claimer, unless the
    /// plan hands it the claimer's identity too (the variant that shows what the
    /// principal check prevents).
    pub(super) fn leak(self: &Arc<Self>, claim: &Claim, leak: &Leak, host: usize) {
        let thief = if self.plan.thieves_hold_the_claimers_identity {
            claim.principal.clone()
        } else {
            match leak.thief {
                Thief::Mallory => "mallory".to_owned(),
                Thief::OtherAgent if claim.principal == "agent1" => "agent2".to_owned(),
                Thief::OtherAgent => "agent1".to_owned(),
            }
        };
        let (world, fence, leak) = (self.clone(), claim.fence(), leak.clone());
        tokio::spawn(async move {
            tokio::time::sleep(leak.after).await;
            world
                .steal(Source::Leaked, &thief, &fence, leak.theft, host)
                .await;
        });
    }

    /// `mallory` reads the intents in flight through `snoop.host`'s read API and tries
    /// `snoop.theft` on each with the token it rebuilds from what it read.
    pub(super) async fn snoop(&self, snoop: Snoop) {
        tokio::time::sleep_until(self.at(snoop.at)).await;
        let Some(instance) = self.instance(snoop.host) else {
            return;
        };
        let Ok(list) = instance
            .gate
            .store()
            .list_intents(&IntentFilter {
                state: Some(IntentState::InFlight),
                limit: 100,
                ..Default::default()
            })
            .await
        else {
            return;
        };
        for record in list.items {
            // What the gateway answers an approver: the record serialised.
            let read = serde_json::to_value(&record).expect("an intent serialises");
            if let Some(fence) = rebuilt_fence(&read) {
                self.steal(Source::Read, "mallory", &fence, snoop.theft, snoop.host)
                    .await;
            }
        }
    }

    /// One attempt, retried while no gateway or no store answers (as a client would);
    /// recorded with the gateway's answer.
    async fn steal(&self, source: Source, thief: &str, fence: &Fence, theft: Theft, host: usize) {
        for _ in 0..10 {
            let Some(instance) = self.instance(host) else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            let gate = &instance.gate;
            let answer = match theft {
                Theft::Heartbeat => gate.heartbeat_fenced(thief, fence).await.map(|_| ()),
                _ => gate
                    .complete_fenced(thief, fence, stolen_result(theft))
                    .await
                    .map(|_| ()),
            };
            let answer = match answer {
                Ok(()) => Ok(()),
                Err(GateError::Store(_)) => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(e) => Err(e.code()),
            };
            lock(&self.steals).push(Steal {
                at: self.now(),
                thief: thief.to_owned(),
                source,
                theft,
                key: fence.intent_key.clone(),
                answer,
            });
            return;
        }
        self.steals_unanswered.fetch_add(1, Ordering::SeqCst);
    }

    /// The violations: every attempt the gateway took.
    pub(super) fn stolen(&self) -> Vec<String> {
        lock(&self.steals)
            .iter()
            .filter(|s| s.answer.is_ok())
            .map(|s| {
                format!(
                    "STOLEN CLAIM ACCEPTED: {} took {:?} on {} with a {} token at {:?}",
                    s.thief,
                    s.theft,
                    s.key,
                    match s.source {
                        Source::Read => "rebuilt",
                        Source::Leaked => "leaked",
                    },
                    s.at
                )
            })
            .collect()
    }

    /// What the thief tried and how it was answered.
    pub(super) fn steal_stats(&self, stats: &mut super::Stats) {
        let steals = lock(&self.steals);
        *stats.entry(STEALS.into()).or_default() += steals.len() as u64;
        *stats.entry(STEALS_ACCEPTED.into()).or_default() +=
            steals.iter().filter(|s| s.answer.is_ok()).count() as u64;
        for s in steals.iter() {
            *stats.entry(steal_stat(s.source, s.answer)).or_default() += 1;
        }
        *stats
            .entry("steals no gateway answered".into())
            .or_default() += self.steals_unanswered.load(Ordering::SeqCst);
    }
}

/// The stat of the attempts with a token from `source` answered `answer`.
fn steal_stat(source: Source, answer: Result<(), Code>) -> String {
    let source = match source {
        Source::Read => "a token rebuilt from reads",
        Source::Leaked => "a leaked token",
    };
    match answer {
        Ok(()) => format!("steals with {source} accepted"),
        Err(code) => format!("steals with {source} refused {}", code.as_str()),
    }
}

/// The fence a reader rebuilds from an intent as the read API shows it: the key, the
/// generation, the execution, and for the nonce the best it can find in the lease's
/// owner (`<gate>/s<digest of the nonce>.<claimer digest>`): the digest.
fn rebuilt_fence(read: &serde_json::Value) -> Option<Fence> {
    let owner = read.pointer("/lease/owner")?.as_str()?;
    let sealed = owner.rsplit('/').next()?;
    let nonce = sealed
        .strip_prefix('s')
        .and_then(|s| s.split_once('.'))
        .map_or(sealed, |(digest, _)| digest);
    Some(Fence {
        intent_key: IntentKey::from_hex(read.get("key")?.as_str()?),
        generation: u32::try_from(read.get("generation")?.as_u64()?).ok()?,
        execution: u32::try_from(read.get("executions")?.as_u64()?).ok()?,
        nonce: nonce.to_owned(),
    })
}

/// The completion a thief sends.
fn stolen_result(theft: Theft) -> EffectResult {
    match theft {
        Theft::NotSent => EffectResult::NotSent {
            message: "connection refused (a thief: the claim is not its own)".into(),
        },
        Theft::Applied => EffectResult::Applied {
            result: json!({"id": "fx_stolen"}),
            effect_ref: Some("fx_stolen".into()),
        },
        Theft::Unknown | Theft::Heartbeat => EffectResult::Unknown {
            message: "no answer (a thief: the claim is not its own)".into(),
        },
    }
}
