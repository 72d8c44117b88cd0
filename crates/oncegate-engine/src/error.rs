//! `GateError`: why a call could not be decided at all (as opposed to an outcome such as
//! `denied`), each with its stable code.

use oncegate_core::codes::Code;
use oncegate_core::key::KeyError;
use oncegate_store::StoreError;

/// Why a call could not be decided at all (as opposed to an outcome such as `denied`).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// No such capability.
    #[error("unknown capability `{0}`")]
    UnknownCapability(String),
    /// No such principal, or the wrong role.
    #[error("{0}")]
    Forbidden(String),
    /// The arguments do not make a key.
    #[error("invalid arguments: {0}")]
    InvalidArguments(#[from] KeyError),
    /// The executor refused the call before anything was claimed (e.g. an argument
    /// would change the upstream URL's path).
    #[error("invalid arguments: {0}")]
    Inadmissible(String),
    /// The arguments exceed a configured limit (`gateway.max_argument_*`).
    #[error(transparent)]
    Limit(#[from] oncegate_core::limits::LimitError),
    /// No such approval.
    #[error("unknown approval `{0}`")]
    UnknownApproval(String),
    /// No such intent.
    #[error("unknown intent `{0}`")]
    UnknownIntent(String),
    /// The capability requires a client idempotency key and the call has none.
    #[error("{0}")]
    ClientKeyMissing(String),
    /// The client key was first used for another intent.
    #[error("{0}")]
    ClientKeyReused(String),
    /// The principal's read rate cap (`gateway.read_rate_per_second`) is used up.
    #[error("{0}")]
    RateLimited(String),
    /// A completion or heartbeat ([`crate::Gate::complete`], [`crate::Gate::heartbeat`])
    /// names a claim that no longer holds the intent (superseded, lease expired, intent
    /// no longer in flight for it): nothing was recorded (`OG-0024`; HTTP 409).
    #[error("{0}")]
    StaleClaim(String),
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl GateError {
    /// The stable code.
    pub fn code(&self) -> Code {
        match self {
            GateError::UnknownCapability(_) => Code::UnknownCapability,
            GateError::Forbidden(_) => Code::Forbidden,
            GateError::InvalidArguments(_) | GateError::Inadmissible(_) => Code::InvalidArguments,
            GateError::Limit(e) => e.code(),
            GateError::UnknownApproval(_) | GateError::UnknownIntent(_) => Code::NotFound,
            GateError::ClientKeyMissing(_) => Code::ClientKeyMissing,
            GateError::ClientKeyReused(_) => Code::ClientKeyReused,
            GateError::RateLimited(_) => Code::RateLimited,
            GateError::StaleClaim(_) => Code::StaleClaim,
            GateError::Store(e) => e.code(),
        }
    }
}
