//! The audit event every decision carries, and the decision around it: who acted, on
//! which intent, from which state to which, with what answer. Built once per transition
//! as an [`Event`], so each way a transition ends reads as one line.

use jiff::Timestamp;
use serde_json::Value;

use super::model::{Action, CallRequest, Decision};
use crate::audit::{AuditEvent, AuditKind};
use crate::config::Capability;
use crate::intent::{Approval, IntentRecord, Outcome};

/// What a decision's audit event says before the decision is known: what kind of
/// decision, when, by whom, about which capability, run and stored record.
#[derive(Clone, Copy, Debug)]
pub(super) struct Event<'a> {
    /// What kind of decision.
    pub(super) kind: AuditKind,
    /// When (the injected clock).
    pub(super) at: Timestamp,
    /// Who acted (agent, approver, admin or the sweep).
    pub(super) actor: &'a str,
    /// The capability's name.
    pub(super) capability: &'a str,
    /// The run the event belongs to.
    pub(super) run_id: Option<&'a str>,
    /// The record as it was stored (none: the store does not know the intent).
    pub(super) before: Option<&'a IntentRecord>,
}

impl<'a> Event<'a> {
    /// A call by `req`'s principal, in its run, on the stored record `before`.
    pub(super) fn call(
        req: &CallRequest<'a>,
        cap: &'a Capability,
        before: Option<&'a IntentRecord>,
        now: Timestamp,
    ) -> Self {
        Self {
            kind: AuditKind::Call,
            at: now,
            actor: req.principal,
            capability: &cap.name,
            run_id: req.run_id,
            before,
        }
    }

    /// A decision of `kind` by `actor` about the stored `record`, in the record's run.
    pub(super) fn about(
        kind: AuditKind,
        record: &'a IntentRecord,
        cap: &'a Capability,
        actor: &'a str,
        now: Timestamp,
    ) -> Self {
        Self {
            kind,
            at: now,
            actor,
            capability: &cap.name,
            run_id: record.run_id.as_deref(),
            before: Some(record),
        }
    }

    /// The audit event of a decision that answers `outcome` and leaves the intent as
    /// `after` (none: as it was stored).
    pub(super) fn audit(
        &self,
        after: Option<&IntentRecord>,
        outcome: &Outcome,
        detail: Value,
    ) -> AuditEvent {
        let before = self.before.map(|r| r.state);
        AuditEvent {
            at: self.at,
            kind: self.kind,
            key: outcome.key.clone(),
            generation: outcome.generation,
            capability: Some(self.capability.to_owned()),
            actor: self.actor.to_owned(),
            run_id: self.run_id.map(str::to_owned),
            from: before,
            to: after.map(|r| r.state).or(before),
            status: Some(outcome.status),
            code: outcome.reason.as_ref().map(|r| r.code),
            detail,
        }
    }

    /// A decision that writes no intent: `action`, the answer, and the audit event that
    /// explains it with `detail`.
    pub(super) fn nothing_written(
        &self,
        action: Action,
        outcome: Outcome,
        detail: Value,
    ) -> Decision {
        let event = self.audit(None, &outcome, detail);
        Decision {
            action,
            record: None,
            approval: None,
            outcome,
            event,
        }
    }

    /// A decision that writes `record` (and `approval`, when one is opened or settled):
    /// `action`, the answer, and the audit event that explains it with `detail`.
    pub(super) fn writing(
        &self,
        action: Action,
        record: IntentRecord,
        approval: Option<Approval>,
        outcome: Outcome,
        detail: Value,
    ) -> Decision {
        let event = self.audit(Some(&record), &outcome, detail);
        Decision {
            action,
            record: Some(record),
            approval,
            outcome,
            event,
        }
    }
}
