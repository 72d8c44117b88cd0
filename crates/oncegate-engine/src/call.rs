//! What a caller hands the gate (`Call`) and what an effect receives (`IntentHandle`).

use oncegate_core::intent::IntentRecord;
use oncegate_core::key::IntentKey;
use serde_json::Value;

/// A call as the agent made it.
#[derive(Clone, Debug)]
pub struct Call {
    /// The capability (tool) name.
    pub capability: String,
    /// The arguments.
    pub arguments: Value,
    /// The orchestrator's run id (never from the arguments).
    pub run_id: Option<String>,
    /// The orchestrator's step id.
    pub step_id: Option<String>,
    /// A coded orchestrator's own idempotency key (`Idempotency-Key`): bound to the
    /// intent it first names, for this principal and capability. Required by
    /// capabilities with `require_client_key`.
    pub client_key: Option<String>,
}

impl Call {
    /// A call without run or step ids.
    pub fn new(capability: impl Into<String>, arguments: Value) -> Self {
        Self {
            capability: capability.into(),
            arguments,
            run_id: None,
            step_id: None,
            client_key: None,
        }
    }

    /// Sets the client's own idempotency key.
    pub fn client_key(mut self, key: impl Into<String>) -> Self {
        self.client_key = Some(key.into());
        self
    }

    /// Sets the run id.
    pub fn run(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Sets the step id.
    pub fn step(mut self, step_id: impl Into<String>) -> Self {
        self.step_id = Some(step_id.into());
        self
    }
}

/// What an effect receives: the key to thread upstream and the call to make.
#[derive(Clone, Debug)]
pub struct IntentHandle {
    /// Thread this upstream (`Idempotency-Key`).
    pub key: String,
    /// The intent key.
    pub intent_key: IntentKey,
    /// The generation.
    pub generation: u32,
    /// The capability.
    pub capability: String,
    /// The arguments of the call that created this generation.
    pub arguments: Value,
    /// The normalised significant arguments.
    pub normalised: Value,
    /// The business reference.
    pub business_ref: Option<String>,
    /// The run id.
    pub run_id: Option<String>,
    /// The step id.
    pub step_id: Option<String>,
}

impl IntentHandle {
    pub(crate) fn of(record: &IntentRecord) -> Self {
        Self {
            key: record.upstream_key(),
            intent_key: record.key.clone(),
            generation: record.generation,
            capability: record.capability.clone(),
            arguments: record.arguments.clone(),
            normalised: record.normalised.clone(),
            business_ref: record.business_ref.clone(),
            run_id: record.run_id.clone(),
            step_id: record.step_id.clone(),
        }
    }
}
