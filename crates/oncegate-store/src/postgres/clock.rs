//! The shared store's clock: the database's, as each replica reads it.
//!
//! A replica samples `clock_timestamp()` at open (the tightest of three round trips),
//! again every second, and on every commit (whose transaction reads `now()` anyway), and
//! runs its estimate on the kernel's boot clock in between ([`StoreClock`]). So a
//! replica whose own clock is wrong or stepped decides by the database's time, within
//! half a round trip; the commit itself writes and judges leases, attempt ends and limit
//! windows by `now()`. A sample that cannot agree with the estimate means the database's
//! clock stepped: the store decides, the replica follows it and says so in its log.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{PgPool, Row};

use super::util::{db_error, from_micros, unavailable};
use crate::StoreError;
use crate::clock::{Observed, StoreClock, Ticks};

/// Who keeps the shared store's time (`/readyz`, logs).
pub const AUTHORITY: &str = "postgresql now() (sampled by each replica)";

/// How often an idle replica samples the database's clock.
const EVERY: Duration = Duration::from_secs(1);

/// The database's `clock_timestamp()` in microseconds: the statement that samples it.
const SAMPLE: &str = "SELECT (extract(epoch from clock_timestamp()) * 1000000)::int8";

/// The tightest of three samples: the replica's first estimate of the database's time.
pub(crate) async fn first(pool: &PgPool) -> Result<StoreClock, StoreError> {
    let ticks = clock_ticks();
    let (before, at, after) = sample(pool, ticks).await?;
    let clock = StoreClock::sampled(AUTHORITY, ticks, before, at, after);
    for _ in 0..2 {
        let (before, at, after) = sample(pool, ticks).await?;
        clock.observe(before, at, after);
    }
    Ok(clock)
}

async fn sample(
    pool: &PgPool,
    ticks: Ticks,
) -> Result<(Duration, jiff::Timestamp, Duration), StoreError> {
    let mut conn = pool.acquire().await.map_err(unavailable)?;
    let before = ticks.read();
    let us: i64 = sqlx::query(SAMPLE)
        .fetch_one(&mut *conn)
        .await
        .map_err(db_error)?
        .get(0);
    let after = ticks.read();
    Ok((before, from_micros(us)?, after))
}

/// Takes a sample into `clock`, saying so when the database's clock stepped.
pub(crate) fn observe(clock: &StoreClock, before: Duration, at: jiff::Timestamp, after: Duration) {
    if let Observed::Stepped(by) = clock.observe(before, at, after) {
        tracing::warn!(
            stepped_by = %format!("{by:#}"),
            "the database's clock stepped: this replica follows it (the store's clock decides); a clock that steps moves every lease, settle horizon and approval expiry by as much"
        );
    }
}

/// Samples the database's clock every [`EVERY`] while the store is open (a dropped
/// store ends the task). A failed sample is skipped: the estimate runs on meanwhile, and
/// the next commit or sample corrects it.
/// `current` answers the open store's pool and clock, None once the store is dropped.
pub(crate) fn keep_sampling(
    current: impl Fn() -> Option<(PgPool, Arc<StoreClock>)> + Send + 'static,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        loop {
            tokio::time::sleep(EVERY).await;
            let Some((pool, clock)) = current() else {
                return;
            };
            if pool.is_closed() {
                return;
            }
            if let Ok((before, at, after)) = sample(&pool, clock_ticks()).await {
                observe(&clock, before, at, after);
            }
        }
    });
}

/// The ticks every PostgreSQL store clock runs on.
pub(crate) fn clock_ticks() -> Ticks {
    Ticks::Boot
}
