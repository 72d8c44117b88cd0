//! A detection finding's row, on its own below both its readers and writers
//! ([`crate::LimitsRead`] / [`crate::LimitsWrite`]) and its storage form
//! ([`crate::storage`]), so neither depends on the other through it.

/// A detection finding as stored: its body is the engine's JSON; the columns are what
/// the outbox and listings query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FindingRow {
    /// Derived from what was found (rule and effects), so a rerun finds the same id.
    pub id: String,
    /// The rule that found it.
    pub rule: String,
    /// When it was raised.
    pub raised_at: jiff::Timestamp,
    /// The finding as JSON text.
    pub body: String,
    /// When the webhook took it (None: not yet, or no webhook).
    pub delivered_at: Option<jiff::Timestamp>,
    /// Deliveries tried.
    pub attempts: u32,
    /// When the next delivery is due.
    pub next_attempt_at: Option<jiff::Timestamp>,
    /// Why its stored row cannot be trusted (edited, not sealed by the audit chain), as
    /// read; None when written or when it checks.
    pub problem: Option<String>,
}
