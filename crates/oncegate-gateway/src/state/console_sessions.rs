//! The console's signed-in browsers, kept by this process (the cookie and CSRF checks
//! that use them are the console's, in `console::session`). Below [`super::AppState`],
//! which holds them, and the console, which opens, finds and closes them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum_extra::extract::CookieJar;
use jiff::{SignedDuration, Timestamp};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::principal::Principal;

/// The session cookie.
pub(crate) const SESSION_COOKIE: &str = "oncegate_console";
/// How long a session lasts from sign-in (a JWT's own expiry may end it sooner).
pub const SESSION_TTL: SignedDuration = SignedDuration::from_hours(8);
/// At most this many sessions at once; the oldest is dropped past it.
const MAX_SESSIONS: usize = 10_000;
/// At most this many sessions per principal (browsers, tabs signed in anew); the oldest
/// of that principal's is dropped past it, so nobody can push others out.
const MAX_PER_PRINCIPAL: usize = 16;

/// A signed-in person.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    /// Who, and their role.
    pub(crate) principal: Principal,
    /// What every form of this session carries.
    pub(crate) csrf: String,
    /// When it ends.
    pub(crate) expires: Timestamp,
}

/// The console's sessions, by the SHA-256 of their ids.
#[derive(Clone, Default)]
pub struct ConsoleSessions {
    inner: Arc<Mutex<HashMap<[u8; 32], Session>>>,
}

/// 32 random bytes as hex.
pub(crate) fn secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl ConsoleSessions {
    /// Opens a session for `principal` until `expires` (it is `now`): the new id (the
    /// cookie's value).
    pub(crate) fn open(&self, principal: Principal, expires: Timestamp, now: Timestamp) -> String {
        let id = secret();
        let mut sessions = self.inner.lock().expect("console sessions");
        sessions.retain(|_, s| s.expires > now);
        let oldest = |sessions: &HashMap<[u8; 32], Session>, name: Option<&str>| {
            sessions
                .iter()
                .filter(|(_, s)| name.is_none_or(|n| s.principal.name == n))
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| *k)
        };
        let theirs = sessions
            .values()
            .filter(|s| s.principal.name == principal.name)
            .count();
        if theirs >= MAX_PER_PRINCIPAL
            && let Some(k) = oldest(&sessions, Some(&principal.name))
        {
            sessions.remove(&k);
        }
        if sessions.len() >= MAX_SESSIONS
            && let Some(k) = oldest(&sessions, None)
        {
            sessions.remove(&k);
        }
        let session = Session {
            principal,
            csrf: secret(),
            expires,
        };
        sessions.insert(digest(&id), session);
        id
    }

    /// The session the browser's cookie names, if it is live at `now`.
    pub(crate) fn find(&self, jar: &CookieJar, now: Timestamp) -> Option<Session> {
        let id = jar.get(SESSION_COOKIE)?.value();
        let key = digest(id);
        let mut sessions = self.inner.lock().expect("console sessions");
        match sessions.get(&key) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                sessions.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session the browser's cookie names.
    pub(crate) fn close(&self, jar: &CookieJar) {
        if let Some(c) = jar.get(SESSION_COOKIE) {
            self.inner
                .lock()
                .expect("console sessions")
                .remove(&digest(c.value()));
        }
    }
}
