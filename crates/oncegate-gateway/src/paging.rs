//! Cursor paging for the listings (`GET /v1/intents`, `/v1/approvals`, `/v1/findings`,
//! the console's approval queue): the page size is clamped to [`MAX_LIMIT`], a page's
//! answer names where the next one starts (`next_cursor`, null on the last page), and a
//! request passes it back as `?cursor=`.
//!
//! A cursor is opaque to clients: base64url (no padding) of `v1:<listing>:<time in
//! nanoseconds>:<generation>:<id>`, the store's keyset position
//! ([`oncegate_store::PageAfter`]) of the page's last row. It is stable (the same row
//! always gives the same cursor, on every replica) and names its listing, so an intent
//! cursor is refused on the approvals. A cursor that does not decode is a 422
//! (`OG-0009`), never a panic or a silently restarted listing.
//!
//! A page is also bounded in bytes: the intents carry agent-written arguments, so a
//! page of 500 could be 500 times the largest argument. [`Page`] stops a page once its
//! JSON passes [`PAGE_BYTES`] (after at least one row) and its cursor continues after
//! the last row it kept; the store is read in chunks of [`CHUNK`] rows, so one listing
//! holds at most a chunk and a page in memory, whatever `limit` says.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use oncegate_core::codes::Code;
use oncegate_store::PageAfter;
use serde::Serialize;

use crate::error::ApiError;

/// The most rows one page holds, whatever `limit` asks.
pub const MAX_LIMIT: u32 = 500;

/// The page size when `limit` is absent.
pub const DEFAULT_LIMIT: u32 = 100;

/// A page stops growing once its rows' JSON passes this many bytes (2 MiB).
pub const PAGE_BYTES: usize = 2 << 20;

/// Rows read from the store at a time while a page is built.
pub const CHUNK: u32 = 50;

/// The longest cursor accepted (a key or an id is at most a few hundred bytes).
const MAX_CURSOR: usize = 1024;

/// Which listing a cursor belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// `GET /v1/intents`.
    Intents,
    /// `GET /v1/approvals` and the console's approval queue.
    Approvals,
    /// `GET /v1/findings`.
    Findings,
}

impl Listing {
    fn tag(self) -> &'static str {
        match self {
            Listing::Intents => "i",
            Listing::Approvals => "a",
            Listing::Findings => "f",
        }
    }
}

/// The page size a request gets: `requested` clamped to 1..=[`MAX_LIMIT`].
pub fn limit(requested: Option<u32>) -> u32 {
    requested.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT)
}

/// The cursor that continues `listing` after `at`.
pub fn encode(listing: Listing, at: &PageAfter) -> String {
    let raw = format!(
        "v1:{}:{}:{}:{}",
        listing.tag(),
        at.at.as_nanosecond(),
        at.generation,
        at.id
    );
    URL_SAFE_NO_PAD.encode(raw)
}

/// The position a `?cursor=` names in `listing` (none: the first page).
pub fn decode(listing: Listing, cursor: Option<&str>) -> Result<Option<PageAfter>, ApiError> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    parse(listing, cursor).map(Some).ok_or_else(|| {
        ApiError::Coded(
            StatusCode::UNPROCESSABLE_ENTITY,
            Code::InvalidArguments,
            "malformed cursor: pass back a next_cursor this listing returned, unchanged".into(),
        )
    })
}

fn parse(listing: Listing, cursor: &str) -> Option<PageAfter> {
    if cursor.is_empty() || cursor.len() > MAX_CURSOR {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut parts = text.splitn(5, ':');
    let (version, tag, nanos, generation, id) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if version != "v1" || tag != listing.tag() {
        return None;
    }
    let at = jiff::Timestamp::from_nanosecond(nanos.parse::<i128>().ok()?).ok()?;
    let generation = generation.parse::<u32>().ok()?;
    let plausible = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if !plausible {
        return None;
    }
    Some(PageAfter {
        at,
        id: id.to_owned(),
        generation,
    })
}

/// One page being built: each row's JSON as it is added, until the limit or the byte
/// budget is reached.
pub struct Page {
    limit: usize,
    rows: Vec<Vec<u8>>,
    bytes: usize,
    last: Option<PageAfter>,
}

impl Page {
    /// An empty page of at most `limit` rows.
    pub fn new(limit: u32) -> Self {
        Self {
            limit: limit as usize,
            rows: Vec::new(),
            bytes: 0,
            last: None,
        }
    }

    /// Whether the page takes no more rows.
    pub fn is_full(&self) -> bool {
        self.rows.len() >= self.limit || self.bytes >= PAGE_BYTES
    }

    /// How many more rows it may take.
    pub fn room(&self) -> u32 {
        u32::try_from(self.limit.saturating_sub(self.rows.len())).unwrap_or(u32::MAX)
    }

    /// Adds `row` at `position`; false (and nothing added) when the page is full.
    /// An unreadable row of a chunk a page stopped inside is reported again on the
    /// next page (it has no position of its own to continue after).
    pub fn push<T: Serialize>(&mut self, row: &T, position: PageAfter) -> Result<bool, ApiError> {
        if self.is_full() {
            return Ok(false);
        }
        let json = serde_json::to_vec(row)
            .map_err(|e| ApiError::internal("a listed row could not be written".into(), &e))?;
        self.bytes += json.len();
        self.rows.push(json);
        self.last = Some(position);
        Ok(true)
    }

    /// Where the next page starts, given whether the store has rows past those read.
    pub fn next(&self, more_in_store: bool) -> Option<PageAfter> {
        if more_in_store {
            self.last.clone()
        } else {
            None
        }
    }

    /// The JSON answer `{"<field>": [rows], "unreadable": [...], "next_cursor": ...}`,
    /// written from the rows' bytes (no second copy of the page as a JSON value).
    pub fn respond<U: Serialize>(
        self,
        field: &str,
        unreadable: &U,
        next_cursor: Option<String>,
    ) -> Result<Response, ApiError> {
        let tail = serde_json::to_vec(&serde_json::json!({
            "unreadable": unreadable,
            "next_cursor": next_cursor,
        }))
        .map_err(|e| ApiError::internal("a listing could not be written".into(), &e))?;
        let mut body = Vec::with_capacity(self.bytes + self.rows.len() + tail.len() + 32);
        body.extend_from_slice(b"{\"");
        body.extend_from_slice(field.as_bytes());
        body.extend_from_slice(b"\":[");
        for (i, row) in self.rows.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(row);
        }
        body.extend_from_slice(b"],");
        // The tail is an object: splice its members after the rows.
        body.extend_from_slice(&tail[1..]);
        Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position() -> PageAfter {
        PageAfter {
            at: jiff::Timestamp::from_nanosecond(1_800_000_000_123_456_789).unwrap(),
            id: "9f86d081884c7d659a2feaa0c55ad015".into(),
            generation: 3,
        }
    }

    #[test]
    fn a_cursor_round_trips_and_is_stable() {
        let cursor = encode(Listing::Intents, &position());
        assert_eq!(cursor, encode(Listing::Intents, &position()));
        assert!(
            cursor
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "URL-safe: {cursor}"
        );
        assert_eq!(
            decode(Listing::Intents, Some(&cursor)).unwrap(),
            Some(position())
        );
        assert_eq!(decode(Listing::Intents, None).unwrap(), None);
        let approval = PageAfter {
            id: "ap_0011223344556677".into(),
            generation: 0,
            ..position()
        };
        let cursor = encode(Listing::Approvals, &approval);
        assert_eq!(
            decode(Listing::Approvals, Some(&cursor)).unwrap(),
            Some(approval)
        );
    }

    #[test]
    fn a_malformed_cursor_is_a_422_never_a_panic() {
        let other = encode(Listing::Approvals, &position());
        let bad = |raw: &str| URL_SAFE_NO_PAD.encode(raw);
        for cursor in [
            String::new(),
            "!!!".into(),
            "a".repeat(5000),
            other,
            bad("v2:i:1:1:abc"),
            bad("v1:i:x:1:abc"),
            bad("v1:i:1:-1:abc"),
            bad("v1:i:1:1:"),
            bad("v1:i:1:1:a b"),
            bad("v1:i:99999999999999999999999999999:1:abc"),
            bad("v1:i:1"),
            URL_SAFE_NO_PAD.encode([0xff, 0xfe]),
        ] {
            let e = decode(Listing::Intents, Some(&cursor)).unwrap_err();
            let response = e.into_response();
            assert_eq!(
                response.status(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "{cursor}"
            );
        }
    }

    #[test]
    fn limits_are_clamped() {
        assert_eq!(limit(None), DEFAULT_LIMIT);
        assert_eq!(limit(Some(0)), 1);
        assert_eq!(limit(Some(10)), 10);
        assert_eq!(limit(Some(u32::MAX)), MAX_LIMIT);
    }

    #[test]
    fn a_page_stops_at_its_byte_budget_after_one_row() {
        let big = "x".repeat(PAGE_BYTES / 3);
        let mut page = Page::new(MAX_LIMIT);
        let mut kept = 0;
        for i in 0..10u32 {
            let at = PageAfter {
                generation: i,
                ..position()
            };
            if !page.push(&big, at).unwrap() {
                break;
            }
            kept += 1;
        }
        assert_eq!(kept, 3, "a page passes its budget by at most one row");
        assert_eq!(page.next(true).map(|p| p.generation), Some(2));
        assert_eq!(page.next(false), None);
        let mut one = Page::new(MAX_LIMIT);
        assert!(one.push(&"y".repeat(PAGE_BYTES * 2), position()).unwrap());
        assert!(one.is_full(), "an oversized row is a page of its own");
    }
}
