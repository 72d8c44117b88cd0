//! The alerts this process raised lately, kept in memory for the console's "needs
//! attention" page: the durable record of each is its audit record, the log line, the
//! metric and the webhook. Below [`super::AppState`], which holds them, the front door,
//! which records them, and the console, which shows them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use oncegate_core::intent::{Alert, Outcome};

/// How many recent alerts are kept.
const KEPT: usize = 200;

/// One alert as raised.
#[derive(Clone, Debug)]
pub(crate) struct Raised {
    pub(crate) at: Timestamp,
    pub(crate) capability: String,
    pub(crate) principal: String,
    pub(crate) key: Option<String>,
    pub(crate) alert: Alert,
}

/// The alerts this process raised, newest last.
#[derive(Clone, Default)]
pub struct RecentAlerts {
    inner: Arc<Mutex<VecDeque<Raised>>>,
}

impl RecentAlerts {
    /// Keeps the alerts of `outcome`.
    pub(crate) fn record(
        &self,
        outcome: &Outcome,
        capability: &str,
        principal: &str,
        at: Timestamp,
    ) {
        if outcome.alerts.is_empty() {
            return;
        }
        let mut kept = self.inner.lock().expect("console alerts");
        for alert in &outcome.alerts {
            if kept.len() >= KEPT {
                kept.pop_front();
            }
            kept.push_back(Raised {
                at,
                capability: capability.to_owned(),
                principal: principal.to_owned(),
                key: outcome.key.as_ref().map(|k| k.as_str().to_owned()),
                alert: alert.clone(),
            });
        }
    }

    pub(crate) fn newest_first(&self) -> Vec<Raised> {
        let kept = self.inner.lock().expect("console alerts");
        kept.iter().rev().cloned().collect()
    }
}
