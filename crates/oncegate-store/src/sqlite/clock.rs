//! The embedded store's clock: one timeline per store, kept on the kernel's boot clock.
//!
//! The store's time is `origin + CLOCK_BOOTTIME`. The origin is kept in the store's
//! `meta` table beside the boot it belongs to (`/proc/sys/kernel/random/boot_id`), so
//! that every process opening the store within one boot (the gateway, a restarted
//! gateway, `oncegate approvals` beside it) reads the same timeline, and a wall-clock
//! step of any size, while the gateway runs or while it is stopped, changes no decision.
//!
//! After a reboot (or on another machine) the boot clock starts again from zero and the
//! elapsed time across the gap is unknown. The timeline then resumes at this host's
//! wall clock, and never earlier than the newest instant the store holds (its newest
//! audit record or intent write): time as the store judges it never runs backwards. The
//! resumption is kept with the origin ([`Resumption`]: where, and how far the timeline
//! jumped), and the engine judges what ran across the gap by it, so that a wall clock
//! wrong at boot ends no horizon early and lets no approval outlive its TTL
//! (`oncegate-engine/src/gap.rs`). The gateway logs the resumption.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use sqlx::{Row, SqliteConnection};

use crate::StoreError;
use crate::clock::{Resumption, StoreClock, Ticks, boot_id, boot_time};

/// The `meta` row that holds the origin.
const CLOCK_ROW: &str = "clock";

/// Who keeps the embedded store's time (`/readyz`, logs).
pub const AUTHORITY: &str = "sqlite store clock (kernel boot clock, origin kept in the store)";

/// The stored origin: the store's time when this boot's clock read zero.
#[derive(Debug, Deserialize, Serialize)]
struct Origin {
    boot_id: String,
    origin: Timestamp,
    /// Where this boot's timeline resumed over a gap (absent on a store's first boot).
    #[serde(default)]
    resumed: Option<Resumption>,
}

/// How the timeline was found at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Continuity {
    /// The store's timeline of this boot, as another process (or this one earlier) set it.
    Kept,
    /// A new boot (or no timeline yet): the timeline resumes at `at`, chosen from this
    /// host's wall clock `wall` and never earlier than `newest`, the newest instant the
    /// store held.
    Resumed {
        /// Where the timeline resumes.
        at: Timestamp,
        /// This host's wall clock at the time.
        wall: Timestamp,
        /// The newest instant the store held, if any.
        newest: Option<Timestamp>,
    },
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("the store's clock: {e}"))
}

/// Reads (or starts) the store's timeline on `conn`, in one immediate transaction so two
/// processes opening the store on a new boot agree on one origin. A store that cannot be
/// written (a read-only file) is read: its timeline, or one resumed for this process only.
pub(crate) async fn open(
    conn: &mut SqliteConnection,
) -> Result<(StoreClock, Continuity, Option<Resumption>), StoreError> {
    let writable = sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *conn)
        .await
        .is_ok();
    let result = read_or_start(conn, writable).await;
    if writable {
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        sqlx::query(end)
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
    }
    let (origin, continuity, resumed) = result?;
    let clock = StoreClock::anchored(AUTHORITY, Ticks::Boot, origin, Duration::ZERO);
    Ok((clock, continuity, resumed))
}

async fn read_or_start(
    conn: &mut SqliteConnection,
    keep: bool,
) -> Result<(Timestamp, Continuity, Option<Resumption>), StoreError> {
    let boot = boot_id();
    let stored: Option<String> = sqlx::query("SELECT value FROM meta WHERE name = ?1")
        .bind(CLOCK_ROW)
        .fetch_optional(&mut *conn)
        .await
        .map_err(unavailable)?
        .map(|row| row.get(0));
    let stored = stored.and_then(|text| serde_json::from_str::<Origin>(&text).ok());
    if let (Some(stored), Some(boot)) = (&stored, &boot)
        && &stored.boot_id == boot
    {
        return Ok((stored.origin, Continuity::Kept, stored.resumed));
    }
    let newest = newest_instant(conn).await?;
    let wall = Timestamp::now();
    let at = match newest {
        Some(newest) if newest > wall => newest,
        _ => wall,
    };
    let since_boot = SignedDuration::try_from(boot_time()).map_err(unavailable)?;
    let origin = at.checked_sub(since_boot).map_err(unavailable)?;
    // A store that held anything crossed a gap of unknown length.
    let resumed = newest.map(|newest| Resumption {
        at,
        gap: at.duration_since(newest),
    });
    if let (true, Some(boot_id)) = (keep, boot) {
        let text = serde_json::to_string(&Origin {
            boot_id,
            origin,
            resumed,
        })
        .map_err(unavailable)?;
        sqlx::query("INSERT INTO meta (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = excluded.value")
            .bind(CLOCK_ROW)
            .bind(text)
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
    }
    Ok((origin, Continuity::Resumed { at, wall, newest }, resumed))
}

/// The newest instant the store holds: its newest audit record's time, or its newest
/// intent write.
async fn newest_instant(conn: &mut SqliteConnection) -> Result<Option<Timestamp>, StoreError> {
    let audit: Option<String> =
        sqlx::query("SELECT json_extract(body, '$.at') FROM audit ORDER BY id DESC LIMIT 1")
            .fetch_optional(&mut *conn)
            .await
            .map_err(unavailable)?
            .and_then(|row| row.get(0));
    let audit = audit.and_then(|text| text.parse::<Timestamp>().ok());
    let intents: Option<i64> = sqlx::query("SELECT max(updated_at) FROM intents")
        .fetch_one(&mut *conn)
        .await
        .map_err(unavailable)?
        .get(0);
    let intents = intents.and_then(|ms| Timestamp::from_millisecond(ms).ok());
    Ok(audit.max(intents))
}
