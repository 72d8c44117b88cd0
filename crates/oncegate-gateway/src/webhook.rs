//! Webhook delivery: one attempt to POST one JSON event to an alert receiver, signed so
//! the receiver can trust it and carrying a stable id so it can drop repeats
//! (docs/webhooks.md). What is delivered, when, and how often is the outbox's concern;
//! this module only knows the wire form of one attempt and the wait between two.

use std::time::Duration;

use hmac::{KeyInit, Mac};
use reqwest::header::CONTENT_TYPE;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::upstream::client::reqwest_error_text;

/// One event to deliver. `id` is stable across retries: the receiver dedupes on it.
///
/// `id` and `event` travel as header values, so they must be visible ASCII; an attempt
/// with any other byte in them fails as [`DeliveryError::Request`] without being sent.
pub struct Delivery {
    pub id: String,
    pub event: String,
    pub body: Vec<u8>,
}

/// Why an attempt did not deliver. Either way the receiver may or may not have acted on
/// it, so the same [`Delivery`] (same id) is sent again.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The receiver answered, with a status other than 2xx (redirects included: none is
    /// followed).
    #[error("the receiver answered {status}")]
    Status { status: reqwest::StatusCode },
    /// No answer: connection refused, timeout, reset, or the request could not be built.
    /// The text never holds the URL, which may carry a credential.
    #[error("the request failed: {text}")]
    Request { text: String },
}

/// `t=<unix seconds>,v1=<lowercase hex HMAC-SHA256(secret, "<t>.<body>")>`.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    format!("t={t},v1={}", mac_hex(secret, &t, body))
}

/// Checks a signature header against the body within `tolerance_secs` of `now` (what a
/// receiver does; docs/webhooks.md has the same check in Python and Node). The header is
/// comma-separated `key=value` fields with exactly one `t` (ASCII digits) and exactly one
/// `v1`; other keys are ignored so a later scheme can be added beside `v1`. The MAC is
/// compared in constant time.
pub fn verify(secret: &[u8], header: &str, body: &[u8], now: i64, tolerance_secs: i64) -> bool {
    let (mut t, mut v1) = (None, None);
    for field in header.split(',') {
        let Some((key, value)) = field.split_once('=') else {
            return false;
        };
        let slot = match key {
            "t" => &mut t,
            "v1" => &mut v1,
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return false;
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    // Digits only: `i64::from_str` also takes a sign, and the MAC covers `t` as written.
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let Ok(timestamp) = t.parse::<i64>() else {
        return false;
    };
    let fresh = u64::try_from(tolerance_secs).is_ok_and(|tol| now.abs_diff(timestamp) <= tol);
    // Compare the hex spellings, as the Python and Node snippets do, so all three accept
    // exactly the same headers (uppercase hex included: refused by all).
    let expected = mac_hex(secret, t, body);
    let matches: bool = expected.as_bytes().ct_eq(v1.as_bytes()).into();
    fresh && matches
}

/// One attempt: POSTs `delivery.body` to `url` with its id, event, the attempt's time
/// and, when `secret` is given, its signature. 2xx is delivered; anything else is an
/// error. The caller builds `client` (one that follows no redirect: a redirect would send
/// the event, and its signature, somewhere the operator did not configure).
pub async fn deliver(
    client: &reqwest::Client,
    url: &str,
    secret: Option<&[u8]>,
    delivery: &Delivery,
    now_unix: i64,
    timeout: Duration,
) -> Result<(), DeliveryError> {
    let mut request = client
        .post(url)
        .timeout(timeout)
        .header(CONTENT_TYPE, "application/json")
        .header("Oncegate-Delivery", &delivery.id)
        .header("Oncegate-Event", &delivery.event)
        .header("Oncegate-Timestamp", now_unix.to_string());
    if let Some(secret) = secret {
        request = request.header(
            "Oncegate-Signature",
            signature(secret, now_unix, &delivery.body),
        );
    }
    let response = request
        .body(delivery.body.clone())
        .send()
        .await
        .map_err(|e| DeliveryError::Request {
            text: reqwest_error_text(&e).text,
        })?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(DeliveryError::Status { status })
    }
}

/// The wait before attempt number `attempt` (1 = the first retry): `base * 2^(attempt-1)`,
/// capped at `cap` (attempt 0 waits as attempt 1). Saturates at `cap` instead of
/// overflowing, however large `attempt` is.
///
/// Deterministic, with no jitter: jitter exists to spread clients that would otherwise
/// retry in lockstep, and the outbox already spreads its deliveries by their own due
/// times (each finding's schedule starts when it was found). A fixed wait keeps that
/// schedule reproducible and testable.
pub fn backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    2u32.checked_pow(attempt.saturating_sub(1))
        .and_then(|factor| base.checked_mul(factor))
        .map_or(cap, |wait| wait.min(cap))
}

/// The lowercase hex HMAC-SHA256 of `<t>.<body>`.
fn mac_hex(secret: &[u8], t: &str, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"a":1}"#;
    const T: i64 = 1_700_000_000;

    #[test]
    fn signature_matches_python_hmac() {
        // python3 -c 'import hmac,hashlib; print(hmac.new(b"secret",
        //   b"1700000000.{\"a\":1}", hashlib.sha256).hexdigest())'
        assert_eq!(
            signature(b"secret", T, BODY),
            "t=1700000000,v1=49f24e537407743fa4a0242bb63b94b9a47ee99cbbe071ccd8a22550ae411686"
        );
    }

    #[test]
    fn verify_accepts_the_right_header_within_tolerance() {
        let header = signature(b"secret", T, BODY);
        assert!(verify(b"secret", &header, BODY, T, 300));
        assert!(verify(b"secret", &header, BODY, T + 300, 300));
        assert!(verify(b"secret", &header, BODY, T - 300, 300));
        // Fields in another order, and a key a later scheme might add, still verify.
        let (t, v1) = header.split_once(',').unwrap();
        assert!(verify(b"secret", &format!("{v1},v0=x,{t}"), BODY, T, 300));
    }

    #[test]
    fn verify_refuses_tampered_body_wrong_secret_and_stale_timestamp() {
        let header = signature(b"secret", T, BODY);
        assert!(!verify(b"secret", &header, br#"{"a":2}"#, T, 300));
        assert!(!verify(b"other", &header, BODY, T, 300));
        assert!(!verify(b"secret", &header, BODY, T + 301, 300));
        assert!(!verify(b"secret", &header, BODY, T - 301, 300));
        assert!(!verify(b"secret", &header, BODY, T, -1));
        // The timestamp is signed: moving it forward breaks the MAC.
        let moved = header.replace("t=1700000000", "t=1700000600");
        assert!(!verify(b"secret", &moved, BODY, T + 600, 300));
    }

    #[test]
    fn verify_refuses_garbage_headers() {
        let header = signature(b"secret", T, BODY);
        let v1 = header.split_once(',').unwrap().1;
        let mac = v1.strip_prefix("v1=").unwrap();
        for garbage in [
            String::new(),
            "garbage".to_owned(),
            ",".to_owned(),
            "t=1700000000".to_owned(),
            v1.to_owned(),
            format!("t=,{v1}"),
            format!("t=+1700000000,{v1}"),
            format!("t=-1,{v1}"),
            format!("t=99999999999999999999,{v1}"),
            format!("t=1700000000,t=1700000000,{v1}"),
            format!("t=1700000000,{v1},{v1}"),
            format!("t=1700000000,v1={}", mac.to_uppercase()),
            format!("t=1700000000,v1={}", &mac[..63]),
            format!("t=1700000000,v1={mac}0"),
            format!("t=1700000000,{v1},junk"),
            format!("t=1700000000, {v1}"),
        ] {
            assert!(!verify(b"secret", &garbage, BODY, T, 300), "{garbage:?}");
        }
    }

    #[test]
    fn backoff_doubles_then_caps() {
        let (base, cap) = (Duration::from_secs(1), Duration::from_secs(60));
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n, base, cap).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(0, base, cap), base);
        assert_eq!(backoff(1, Duration::from_secs(90), cap), cap);
    }

    #[test]
    fn backoff_never_overflows() {
        let cap = Duration::from_secs(3600);
        for attempt in [32, 33, 64, 1000, u32::MAX] {
            assert_eq!(backoff(attempt, Duration::from_millis(500), cap), cap);
        }
        assert_eq!(backoff(1000, Duration::MAX, Duration::MAX), Duration::MAX);
    }
}
