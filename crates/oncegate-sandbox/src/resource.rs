//! The resources the sandbox creates (charges, refunds, emails, ledger entries): their
//! names on the command line and in config, their paths and the ids they are given.
//! Below everything else in the crate: the ledger, the faults and both surfaces name them.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// A kind of resource the sandbox creates; each `POST` of one is an effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// `POST /v1/charges`.
    Charges,
    /// `POST /v1/refunds`.
    Refunds,
    /// `POST /v1/emails`.
    Emails,
    /// `POST /v1/ledger`.
    Ledger,
}

impl Resource {
    /// Every resource, in the order the API documents them.
    pub const ALL: [Resource; 4] = [
        Resource::Charges,
        Resource::Refunds,
        Resource::Emails,
        Resource::Ledger,
    ];

    /// The name used on the command line and in config (`charges`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Charges => "charges",
            Resource::Refunds => "refunds",
            Resource::Emails => "emails",
            Resource::Ledger => "ledger",
        }
    }

    /// The `POST` path that creates this resource.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Resource::Charges => "/v1/charges",
            Resource::Refunds => "/v1/refunds",
            Resource::Emails => "/v1/emails",
            Resource::Ledger => "/v1/ledger",
        }
    }

    /// The `kind` of the effect a `POST` of this resource commits.
    pub(crate) fn effect_kind(self) -> &'static str {
        match self {
            Resource::Charges => "charge",
            Resource::Refunds => "refund",
            Resource::Emails => "email",
            Resource::Ledger => "ledger",
        }
    }

    /// The field that holds the object in a lookup answer (`{"found":true,"charge":..}`).
    pub(crate) fn lookup_field(self) -> &'static str {
        match self {
            Resource::Charges => "charge",
            Resource::Refunds => "refund",
            Resource::Emails => "email",
            Resource::Ledger => "entry",
        }
    }

    /// The prefix of the ids this resource is given, as real providers do (`ch_...`).
    pub(crate) fn id_prefix(self) -> &'static str {
        match self {
            Resource::Charges => "ch",
            Resource::Refunds => "re",
            Resource::Emails => "em",
            Resource::Ledger => "le",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resource name that is none of `charges`, `refunds`, `emails`, `ledger`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sandbox resource {0:?}: expected one of charges, refunds, emails, ledger")]
pub struct ParseResourceError(String);

impl FromStr for Resource {
    type Err = ParseResourceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Resource::ALL
            .into_iter()
            .find(|resource| resource.as_str() == s)
            .ok_or_else(|| ParseResourceError(s.to_owned()))
    }
}
