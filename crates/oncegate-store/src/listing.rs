//! The intent listing's SQL, one statement per filter shape.
//!
//! A single statement with `(?1 IS NULL OR state = ?1)` in it serves every filter, and
//! no index serves it: the planner cannot know at prepare time which terms apply, so it
//! scans the table. Each shape gets its own statement instead, built only from the
//! constant fragments below (never from input), and migrations give each shape an index
//! that ends in `(updated_at, key, generation)`, so `ORDER BY updated_at, key,
//! generation LIMIT n` stops after n rows, and a page's cursor (`after`) is a range on
//! that index, not an OFFSET that reads every skipped row. The backends' tests check
//! the plans with `EXPLAIN`.
//!
//! Each statement asks for one row more than the page, so the backend knows whether a
//! next page exists; the approvals' and findings' pages are built here too.

use sqlx::query::Query;
use sqlx::{Database, Encode, Type};

use crate::IntentFilter;

/// The SQL spelling a backend needs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    fn placeholder(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }

    /// A time column as the integer a page's cursor is made from (`AS sort_at`).
    fn sort_at(self, column: &str) -> String {
        match self {
            Dialect::Sqlite => format!("{column} AS sort_at"),
            Dialect::Postgres => {
                format!("(extract(epoch from {column}) * 1000000)::int8 AS sort_at")
            }
        }
    }

    /// The time `sort_at` read back.
    pub(crate) fn sort_time(self, sort_at: i64) -> Option<jiff::Timestamp> {
        match self {
            Dialect::Sqlite => jiff::Timestamp::from_millisecond(sort_at).ok(),
            Dialect::Postgres => jiff::Timestamp::from_microsecond(sort_at).ok(),
        }
    }
}

/// The approval listing: oldest (or newest) first, `(created_at, id)` from the index
/// `approvals_by_state_created` / `approvals_by_created`. Parameters: the state (if
/// filtered), the cursor's time and id (if paged), the limit (if any).
pub(crate) fn approvals_sql(
    dialect: Dialect,
    state: bool,
    after: bool,
    limit: bool,
    newest_first: bool,
) -> String {
    let (op, order) = if newest_first {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    let mut terms = Vec::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        dialect.placeholder(n)
    };
    if state {
        terms.push(format!("state = {}", next()));
    }
    if after {
        let (at, id) = (next(), next());
        terms.push(match dialect {
            Dialect::Sqlite => format!("(created_at, id) {op} ({at}, {id})"),
            Dialect::Postgres => format!("(created_at, id) {op} ({at}::timestamptz, {id})"),
        });
    }
    let filter_sql = if terms.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", terms.join(" AND "))
    };
    let limit_sql = if limit {
        format!(" LIMIT {}", next())
    } else {
        String::new()
    };
    let sort_at = dialect.sort_at("created_at");
    format!(
        "SELECT id, generation, version, body, audit_shard, audit_seq, row_hash, {sort_at} FROM approvals{filter_sql} ORDER BY created_at {order}, id {order}{limit_sql}"
    )
}

/// The approval listing for `filter`, parameters bound.
pub(crate) fn approvals_query<DB>(
    dialect: Dialect,
    filter: &crate::ApprovalFilter,
) -> Query<'static, DB, DB::Arguments>
where
    DB: Database,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> String: Encode<'t, DB> + Type<DB>,
{
    let sql = approvals_sql(
        dialect,
        filter.state.is_some(),
        filter.after.is_some(),
        filter.limit > 0,
        filter.newest_first,
    );
    let mut query = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql));
    if let Some(state) = filter.state {
        query = query.bind(state.as_str());
    }
    if let Some(after) = &filter.after {
        query = bind_time(dialect, query, after.at).bind(after.id.clone());
    }
    if filter.limit > 0 {
        query = query.bind(fetch_count(filter.limit));
    }
    query
}

/// How many of `expiries` (pending approvals' `expires_at`, as stored text) are still
/// live at `now`. One that does not parse counts: the budget errs on the side of the
/// approvers.
pub(crate) fn live_count(
    expiries: impl Iterator<Item = Option<String>>,
    now: jiff::Timestamp,
) -> u32 {
    let live = expiries
        .filter(|e| {
            e.as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_none_or(|t| t > now)
        })
        .count();
    u32::try_from(live).unwrap_or(u32::MAX)
}

/// Binds a time as the backend stores it: SQLite as epoch milliseconds, PostgreSQL as
/// text cast to timestamptz (rounded to the microsecond as the stored value was).
fn bind_time<DB>(
    dialect: Dialect,
    query: Query<'static, DB, DB::Arguments>,
    at: jiff::Timestamp,
) -> Query<'static, DB, DB::Arguments>
where
    DB: Database,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> String: Encode<'t, DB> + Type<DB>,
{
    match dialect {
        Dialect::Sqlite => query.bind(at.as_millisecond()),
        Dialect::Postgres => query.bind(at.to_string()),
    }
}

/// Splits `rows` fetched for a page of `limit` (one more than the page when another
/// follows; `None`: no limit, every row) into the page and where the next one starts:
/// `position` gives a row's `(sort_at, id, generation)`.
pub(crate) fn page_of<R>(
    dialect: Dialect,
    mut rows: Vec<R>,
    limit: Option<u32>,
    position: impl Fn(&R) -> (i64, String, u32),
) -> (Vec<R>, Option<crate::PageAfter>) {
    let Some(limit) = limit else {
        return (rows, None);
    };
    let page = usize::try_from(fetch_count(limit) - 1).unwrap_or(usize::MAX);
    if rows.len() <= page {
        return (rows, None);
    }
    rows.truncate(page);
    let next = rows.last().and_then(|last| {
        let (sort_at, id, generation) = position(last);
        Some(crate::PageAfter {
            at: dialect.sort_time(sort_at)?,
            id,
            generation,
        })
    });
    (rows, next)
}

/// The rows a page of `limit` fetches: one more, to know whether another page follows.
/// A limit of 0 is 100.
pub(crate) fn fetch_count(limit: u32) -> i64 {
    let limit = if limit == 0 { 100 } else { limit };
    i64::from(limit) + 1
}

/// `SELECT ... FROM intents WHERE ... ORDER BY updated_at ... LIMIT ...` for `filter`.
/// Parameters, in order: the state, the capability, the time, the run and the business
/// reference (each if filtered), the cursor's time, key and generation (if paged), then
/// the limit. The rows carry their sort time as `sort_at` (SQLite: milliseconds,
/// PostgreSQL: microseconds).
pub(crate) fn intents_sql(dialect: Dialect, filter: &IntentFilter) -> String {
    let mut terms = Vec::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        dialect.placeholder(n)
    };
    if filter.state.is_some() {
        terms.push(format!("state = {}", next()));
    }
    if filter.capability.is_some() {
        terms.push(format!("capability = {}", next()));
    }
    if filter.breaker_tripped {
        terms.push(
            match dialect {
                Dialect::Sqlite => "breaker_tripped = 1",
                Dialect::Postgres => "breaker_tripped",
            }
            .to_owned(),
        );
    }
    if filter.updated_since.is_some() {
        terms.push(match dialect {
            Dialect::Sqlite => format!("updated_at >= {}", next()),
            Dialect::Postgres => format!("updated_at >= {}::timestamptz", next()),
        });
    }
    if filter.run_id.is_some() {
        terms.push(format!("run_id = {}", next()));
    }
    if filter.business_ref.is_some() {
        terms.push(format!("business_ref = {}", next()));
    }
    if filter.after.is_some() {
        let op = if filter.oldest_first { ">" } else { "<" };
        let (at, key, generation) = (next(), next(), next());
        terms.push(match dialect {
            Dialect::Sqlite => {
                format!("(updated_at, key, generation) {op} ({at}, {key}, {generation})")
            }
            Dialect::Postgres => format!(
                "(updated_at, key, generation) {op} ({at}::timestamptz, {key}, {generation})"
            ),
        });
    }
    let limit = next();
    let filter_sql = if terms.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", terms.join(" AND "))
    };
    let order = if filter.oldest_first { "ASC" } else { "DESC" };
    let sort_at = dialect.sort_at("updated_at");
    format!(
        "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash, {sort_at} FROM intents{filter_sql} ORDER BY updated_at {order}, key {order}, generation {order} LIMIT {limit}"
    )
}

/// The listing statement for `filter` with its parameters bound.
pub(crate) fn intents_query<DB>(
    dialect: Dialect,
    filter: &IntentFilter,
) -> Query<'static, DB, DB::Arguments>
where
    DB: Database,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> String: Encode<'t, DB> + Type<DB>,
{
    bind_filter(
        dialect,
        sqlx::query::<DB>(sqlx::AssertSqlSafe(intents_sql(dialect, filter))),
        filter,
    )
}

/// Binds [`intents_sql`]'s parameters.
fn bind_filter<DB>(
    dialect: Dialect,
    mut query: Query<'static, DB, DB::Arguments>,
    filter: &IntentFilter,
) -> Query<'static, DB, DB::Arguments>
where
    DB: Database,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> String: Encode<'t, DB> + Type<DB>,
{
    if let Some(state) = filter.state {
        query = query.bind(state.as_str());
    }
    if let Some(capability) = filter.capability.as_deref() {
        query = query.bind(capability);
    }
    if let Some(since) = filter.updated_since {
        // SQLite keeps times as epoch milliseconds, PostgreSQL as timestamptz.
        query = match dialect {
            Dialect::Sqlite => query.bind(since.as_millisecond()),
            Dialect::Postgres => query.bind(since.to_string().as_str()),
        };
    }
    if let Some(run) = filter.run_id.as_deref() {
        query = query.bind(run);
    }
    if let Some(reference) = filter.business_ref.as_deref() {
        query = query.bind(reference);
    }
    if let Some(after) = &filter.after {
        query = bind_time(dialect, query, after.at)
            .bind(after.id.clone())
            .bind(i64::from(after.generation));
    }
    query.bind(fetch_count(filter.limit))
}

/// Every filter shape the listing has, for the plan tests: each combination of state,
/// capability and breaker, in both orders.
#[cfg(test)]
pub(crate) fn every_shape() -> Vec<IntentFilter> {
    use oncegate_core::intent::IntentState;
    let mut shapes = Vec::new();
    for state in [None, Some(IntentState::Unknown)] {
        for capability in [None, Some("charge_card".to_owned())] {
            for breaker_tripped in [false, true] {
                for oldest_first in [false, true] {
                    for updated_since in [None, Some(jiff::Timestamp::UNIX_EPOCH)] {
                        for after in [None, Some(some_page())] {
                            shapes.push(IntentFilter {
                                state,
                                capability: capability.clone(),
                                breaker_tripped,
                                limit: 100,
                                oldest_first,
                                updated_since,
                                after,
                                ..IntentFilter::default()
                            });
                        }
                    }
                }
            }
        }
    }
    for run_id in [None, Some("run-1".to_owned())] {
        for business_ref in [None, Some("inv-1".to_owned())] {
            if run_id.is_some() == business_ref.is_some() {
                continue;
            }
            for after in [None, Some(some_page())] {
                shapes.push(IntentFilter {
                    run_id: run_id.clone(),
                    business_ref: business_ref.clone(),
                    after,
                    ..IntentFilter::default()
                });
            }
        }
    }
    shapes
}

/// A cursor for the plan tests.
#[cfg(test)]
fn some_page() -> crate::PageAfter {
    crate::PageAfter {
        at: jiff::Timestamp::UNIX_EPOCH,
        id: "00".into(),
        generation: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncegate_core::intent::IntentState;
    use sqlx::{Connection, Row};

    use crate::{OpenMode, SqliteStore, StoreOptions};

    /// `EXPLAIN`-prefixed listing statements for every shape, parameters bound.
    fn explained<DB>(
        dialect: Dialect,
        explain: &str,
    ) -> Vec<(String, Query<'static, DB, DB::Arguments>)>
    where
        DB: Database,
        for<'t> &'t str: Encode<'t, DB> + Type<DB>,
        for<'t> i64: Encode<'t, DB> + Type<DB>,
        for<'t> String: Encode<'t, DB> + Type<DB>,
    {
        every_shape()
            .iter()
            .map(|filter| {
                let sql = intents_sql(dialect, filter);
                let query = sqlx::query::<DB>(sqlx::AssertSqlSafe(format!("{explain} {sql}")));
                (sql, bind_filter(dialect, query, filter))
            })
            .collect()
    }

    #[tokio::test]
    async fn sqlite_serves_every_listing_shape_from_an_index_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plans.db");
        SqliteStore::open_with(&path, OpenMode::CreateIfMissing, StoreOptions::default())
            .await
            .unwrap();
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        for (sql, query) in explained::<sqlx::Sqlite>(Dialect::Sqlite, "EXPLAIN QUERY PLAN") {
            let rows = query.fetch_all(&mut conn).await.unwrap();
            let steps: Vec<String> = rows.iter().map(|r| r.get::<String, _>(3)).collect();
            // "SCAN intents USING INDEX i" walks an index in order and stops at the
            // LIMIT; a bare "SCAN intents" reads the table, a TEMP B-TREE sorts it.
            assert!(
                steps
                    .iter()
                    .all(|s| s.contains("USING INDEX") && !s.contains("TEMP B-TREE")),
                "{sql}\n  is planned as: {}",
                steps.join(" | ")
            );
        }
    }

    #[tokio::test]
    async fn postgres_serves_every_listing_shape_from_an_index_in_order() {
        let server = std::env::var("ONCEGATE_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
        let name = format!("og_plans_{:016x}", rand::random::<u64>());
        // Dropped on every path, a failed assertion included.
        let scratch = crate::postgres::ScratchDatabase::create(&server, &name)
            .await
            .expect("the test PostgreSQL server answers (ONCEGATE_TEST_POSTGRES_URL)");
        let url = scratch.url();
        let store = crate::PgStore::open(&url, OpenMode::CreateIfMissing, StoreOptions::default())
            .await
            .unwrap();
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        // An empty table is cheapest to scan; forbid the scan and the sort, so either
        // shows up in a plan only where no index can replace it.
        sqlx::raw_sql("SET enable_seqscan = off; SET enable_sort = off")
            .execute(&mut conn)
            .await
            .unwrap();
        let mut plans = Vec::new();
        for (sql, query) in explained::<sqlx::Postgres>(Dialect::Postgres, "EXPLAIN") {
            let rows = query.fetch_all(&mut conn).await.unwrap();
            let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>(0)).collect();
            plans.push((sql, plan.join(" | ")));
        }
        let _ = conn.close().await;
        store.close().await;
        scratch.drop_now().await.unwrap();
        for (sql, plan) in plans {
            // A state or capability filter must narrow the index (an Index Cond), not
            // filter rows of a walk over all of it.
            let narrowed = !(sql.contains("state =") || sql.contains("capability ="))
                || plan.contains("Index Cond");
            assert!(
                plan.contains("Index")
                    && narrowed
                    && !plan.contains("Seq Scan")
                    && !plan.contains("Sort"),
                "{sql}\n  is planned as: {plan}"
            );
        }
    }

    #[test]
    fn each_shape_names_only_the_terms_it_filters_on() {
        let sweep = IntentFilter {
            state: Some(IntentState::Unknown),
            limit: 50,
            oldest_first: true,
            ..Default::default()
        };
        assert_eq!(
            intents_sql(Dialect::Sqlite, &sweep),
            "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash, updated_at AS sort_at FROM intents WHERE state = ?1 ORDER BY updated_at ASC, key ASC, generation ASC LIMIT ?2"
        );
        let all = IntentFilter {
            capability: Some("x".into()),
            breaker_tripped: true,
            ..Default::default()
        };
        assert_eq!(
            intents_sql(Dialect::Postgres, &all),
            "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash, (extract(epoch from updated_at) * 1000000)::int8 AS sort_at FROM intents WHERE capability = $1 AND breaker_tripped ORDER BY updated_at DESC, key DESC, generation DESC LIMIT $2"
        );
        assert!(
            intents_sql(Dialect::Sqlite, &IntentFilter::default()).ends_with(
                "FROM intents ORDER BY updated_at DESC, key DESC, generation DESC LIMIT ?1"
            )
        );
        let paged = IntentFilter {
            state: Some(IntentState::Unknown),
            after: Some(some_page()),
            ..Default::default()
        };
        assert!(
            intents_sql(Dialect::Postgres, &paged).contains(
                "WHERE state = $1 AND (updated_at, key, generation) < ($2::timestamptz, $3, $4) ORDER BY"
            )
        );
    }
}
