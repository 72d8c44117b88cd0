//! Listings and their pages, shared by every table that lists rows (intents,
//! approvals, findings): the rows that decode, the ones that do not, and where the
//! next page starts.

use oncegate_core::intent::{Approval, IntentRecord};

/// A listing: the rows that decode, and every row that does not, by key, so one
/// unreadable row never hides the others.
#[derive(Clone, Debug)]
pub struct Listing<T> {
    /// The rows that decoded (and match their seal).
    pub items: Vec<T>,
    /// The rows that did not, in listing order.
    pub unreadable: Vec<UnreadableRow>,
    /// Where the next page starts, when rows remain past this one's limit; `None` on
    /// the last page.
    pub next: Option<PageAfter>,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            unreadable: Vec::new(),
            next: None,
        }
    }
}

/// Where a page of a listing ends: the sort position of its last row. The next page is
/// the rows strictly after it in the listing's order (keyset paging, never OFFSET: a
/// row written meanwhile neither shifts a later page nor is listed twice).
///
/// `at` is the row's sort time (an intent's `updated_at`, an approval's `created_at`, a
/// finding's `raised_at`), `id` its key or id, `generation` an intent's generation (0
/// otherwise); ties in time are ordered by id, then generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageAfter {
    /// The row's sort time.
    pub at: jiff::Timestamp,
    /// The intent key, approval id or finding id.
    pub id: String,
    /// The intent's generation; 0 for approvals and findings.
    pub generation: u32,
}

impl PageAfter {
    /// The position of an intent record in the intent listing.
    pub fn of_intent(r: &IntentRecord) -> Self {
        Self {
            at: r.updated_at,
            id: r.key.as_str().to_owned(),
            generation: r.generation,
        }
    }

    /// The position of an approval in the approval listing.
    pub fn of_approval(a: &Approval) -> Self {
        Self {
            at: a.created_at,
            id: a.id.clone(),
            generation: 0,
        }
    }
}

/// A row a listing could not return.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UnreadableRow {
    /// Intent key or approval id.
    pub key: String,
    /// The generation (intents).
    pub generation: Option<u32>,
    /// Why it cannot be returned.
    pub problem: String,
}
