//! Reads, and the row lookups the commit shares with them.
//!
//! Every read here is one read method of the store API in PostgreSQL's dialect (limits
//! and findings in `limits.rs`), most in one REPEATABLE READ snapshot
//! (`PgStore::snapshot`) with the seal lookups (`newest_*_seal`) the commit path
//! reuses. The rules they apply are elsewhere (rows.rs, controls.rs, ledger.rs,
//! listing.rs, decode.rs); what remains is SQL text, in the order of `sqlite.rs`.

use oncegate_core::audit::{AuditRecord, ChainKey, RowKind, StoredRow};
use oncegate_core::intent::{Approval, IntentRecord};
use oncegate_core::key::IntentKey;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::util::{row_at, seal_at};
use super::{PgStore, corrupt, from_micros, ts, unavailable};
use crate::listing::{self, Dialect};
use crate::rows::{self, RowData, body_hash};
use crate::storage::{ApprovalRowV1, IntentRowV1};
use crate::{
    ApprovalFilter, AuditRead, Backend, IntentFilter, IntentsRead, KillSwitch, Listing, McpSession,
    SharedRead, StoreError,
};
use crate::{controls, decode};

fn row_data(row: &PgRow, kind: RowKind) -> RowData {
    let Ok(row) = decode::row_data(row, kind);
    row
}

pub(super) fn audit_row(row: &PgRow) -> Result<AuditRecord, StoreError> {
    decode::audit_record(row)
}

/// One intent generation; `lock` takes it FOR UPDATE (inside a commit).
pub(super) async fn fetch_intent(
    conn: &mut PgConnection,
    key: &str,
    generation: u32,
    lock: bool,
) -> Result<Option<RowData>, StoreError> {
    let sql = if lock {
        "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents WHERE key = $1 AND generation = $2 FOR UPDATE"
    } else {
        "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents WHERE key = $1 AND generation = $2"
    };
    let row = sqlx::query(sql)
        .bind(key)
        .bind(i64::from(generation))
        .fetch_optional(&mut *conn)
        .await
        .map_err(super::db_error)?;
    Ok(row.map(|r| row_data(&r, RowKind::Intent)))
}

/// One approval; `lock` as in [`fetch_intent`].
pub(super) async fn fetch_approval(
    conn: &mut PgConnection,
    id: &str,
    lock: bool,
) -> Result<Option<RowData>, StoreError> {
    let sql = if lock {
        "SELECT id, generation, version, body, audit_shard, audit_seq, row_hash FROM approvals WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT id, generation, version, body, audit_shard, audit_seq, row_hash FROM approvals WHERE id = $1"
    };
    let row = sqlx::query(sql)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(super::db_error)?;
    Ok(row.map(|r| row_data(&r, RowKind::Approval)))
}

/// The newest audit record that sealed intent (key, generation). `id` orders the seals
/// of one row: its writers hold the row's lock, so each appends after the last committed.
pub(super) async fn newest_intent_seal(
    conn: &mut PgConnection,
    key: &str,
    generation: u32,
) -> Result<Option<AuditRecord>, StoreError> {
    let row = sqlx::query(
        "SELECT shard, seq, prev_hash, hash, body FROM audit
         WHERE row_intent_key = $1 AND row_intent_generation = $2 ORDER BY id DESC LIMIT 1",
    )
    .bind(key)
    .bind(i64::from(generation))
    .fetch_optional(&mut *conn)
    .await
    .map_err(super::db_error)?;
    row.map(|r| audit_row(&r)).transpose()
}

/// The newest audit record that sealed approval `id`.
pub(super) async fn newest_approval_seal(
    conn: &mut PgConnection,
    id: &str,
) -> Result<Option<AuditRecord>, StoreError> {
    let row = sqlx::query(
        "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE row_approval_key = $1 ORDER BY id DESC LIMIT 1",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(super::db_error)?;
    row.map(|r| audit_row(&r)).transpose()
}

/// The newest audit record that sealed the kill switch or finding `id`.
pub(super) async fn newest_control_seal(
    conn: &mut PgConnection,
    kind: RowKind,
    id: &str,
) -> Result<Option<AuditRecord>, StoreError> {
    let sql = if kind == RowKind::Switch {
        "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE row_switch_key = $1 ORDER BY id DESC LIMIT 1"
    } else {
        "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE row_finding_key = $1 ORDER BY id DESC LIMIT 1"
    };
    let row = sqlx::query(sql)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(super::db_error)?;
    row.map(|r| audit_row(&r)).transpose()
}

/// Checks a row against the newest audit record that sealed it.
pub(super) async fn check_row(
    conn: &mut PgConnection,
    kind: RowKind,
    row: &RowData,
    key: Option<&ChainKey>,
) -> Result<serde_json::Value, StoreError> {
    let newest = match kind {
        RowKind::Intent => newest_intent_seal(conn, &row.id, row.generation).await?,
        RowKind::Approval => newest_approval_seal(conn, &row.id).await?,
        RowKind::Switch | RowKind::Finding => newest_control_seal(conn, kind, &row.id).await?,
        RowKind::Limit => {
            return Err(StoreError::Corrupt(
                "a limit's ledger is checked by its head, not as a row".into(),
            ));
        }
    };
    rows::check_sealed(kind, row, newest, key)
}

impl PgStore {
    /// The store's `controls_sealed_at` in milliseconds.
    pub(super) fn legacy_before_ms(&self) -> Option<i64> {
        self.inner.legacy_before.map(|us| us.div_euclid(1000))
    }

    /// Runs `read` in one REPEATABLE READ, READ ONLY transaction: the row and the
    /// chain's seals come from one snapshot.
    pub(super) async fn snapshot<T>(
        &self,
        read: impl AsyncFnOnce(&mut PgConnection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // A read dropped half-way (its caller gave up) closes the connection rather
        // than returning it inside this transaction (InTransaction).
        let mut tx = self
            .begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        let result = read(tx.conn()).await;
        let _ = tx.end("ROLLBACK").await;
        result
    }

    /// An intent row checked against `newest`, the newest record that sealed it (both
    /// read in one statement), and decoded.
    fn checked_at(
        &self,
        row: &RowData,
        newest: Option<AuditRecord>,
    ) -> Result<IntentRecord, StoreError> {
        let value = rows::check_sealed(RowKind::Intent, row, newest, self.chain_key())?;
        rows::intent_from(row, value)
    }
}

impl IntentsRead for PgStore {
    async fn load(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        // One statement, so one snapshot (one round trip, no transaction): the newest
        // row, the chain's newest generation of this key (on a miss it tells "never
        // written" from "deleted"; on a hit, a newer sealed generation means the newest
        // row is gone) and the newest audit record that sealed the row.
        let read = sqlx::query(
            "SELECT i.key, i.generation, i.version, i.body, i.audit_shard, i.audit_seq, i.row_hash,
                    (SELECT MAX(row_intent_generation) FROM audit WHERE row_intent_key = $1),
                    s.shard, s.seq, s.prev_hash, s.hash, s.body
               FROM (SELECT 1) AS one
               LEFT JOIN LATERAL (SELECT key, generation, version, body, audit_shard, audit_seq, row_hash
                                    FROM intents WHERE key = $1 ORDER BY generation DESC LIMIT 1) i ON true
               LEFT JOIN LATERAL (SELECT shard, seq, prev_hash, hash, body FROM audit
                                   WHERE row_intent_key = i.key AND row_intent_generation = i.generation
                                   ORDER BY id DESC LIMIT 1) s ON true",
        )
        .bind(key.as_str())
        .fetch_one(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        let sealed: Option<i64> = read.get(7);
        match (row_at(&read, 0), sealed.map(|g| g as u32)) {
            (None, None) => Ok(None),
            (None, Some(g)) => Err(rows::deleted(&format!("intent {key} generation {g}"))),
            (Some(row), Some(g)) if g > row.generation => Err(rows::integrity(
                &format!("intent {key} generation {g}"),
                "the audit chain wrote this generation and it is gone (deleted row)",
            )),
            (Some(row), _) => self.checked_at(&row, seal_at(&read, 8)?).map(Some),
        }
    }

    async fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> Result<Option<IntentRecord>, StoreError> {
        // One statement (one snapshot): the row and the newest record that sealed it.
        let read = sqlx::query(
            "SELECT i.key, i.generation, i.version, i.body, i.audit_shard, i.audit_seq, i.row_hash,
                    s.shard, s.seq, s.prev_hash, s.hash, s.body
               FROM (SELECT 1) AS one
               LEFT JOIN intents i ON i.key = $1 AND i.generation = $2
               LEFT JOIN LATERAL (SELECT shard, seq, prev_hash, hash, body FROM audit
                                   WHERE row_intent_key = $1 AND row_intent_generation = $2
                                   ORDER BY id DESC LIMIT 1) s ON true",
        )
        .bind(key.as_str())
        .bind(i64::from(generation))
        .fetch_one(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        let newest = seal_at(&read, 7)?;
        match row_at(&read, 0) {
            Some(row) => self.checked_at(&row, newest).map(Some),
            None if newest.is_some() => Err(rows::deleted(&format!(
                "intent {key} generation {generation}"
            ))),
            None => Ok(None),
        }
    }

    async fn find_other_run(
        &self,
        cross_key: &IntentKey,
        run_id: Option<&str>,
    ) -> Result<Option<IntentRecord>, StoreError> {
        // One statement (one snapshot): the row and the newest record that sealed it.
        let read = sqlx::query(
            "SELECT i.key, i.generation, i.version, i.body, i.audit_shard, i.audit_seq, i.row_hash,
                    s.shard, s.seq, s.prev_hash, s.hash, s.body
               FROM (SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents
                      WHERE cross_key = $1 AND run_id IS DISTINCT FROM $2
                        AND state NOT IN ('denied', 'failed', 'not_applied')
                      ORDER BY updated_at DESC LIMIT 1) AS i
               LEFT JOIN LATERAL (SELECT shard, seq, prev_hash, hash, body FROM audit
                                   WHERE row_intent_key = i.key AND row_intent_generation = i.generation
                                   ORDER BY id DESC LIMIT 1) s ON true",
        )
        .bind(cross_key.as_str())
        .bind(run_id)
        .fetch_optional(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        let Some(read) = read else {
            return Ok(None);
        };
        match row_at(&read, 0) {
            Some(row) => self.checked_at(&row, seal_at(&read, 7)?).map(Some),
            None => Ok(None),
        }
    }

    async fn list_intents(
        &self,
        filter: &IntentFilter,
    ) -> Result<Listing<IntentRecord>, StoreError> {
        let rows = listing::intents_query(Dialect::Postgres, filter)
            .fetch_all(&mut *self.conn().await?)
            .await
            .map_err(unavailable)?;
        let (rows, next) = listing::page_of(Dialect::Postgres, rows, Some(filter.limit), |r| {
            let row = row_data(r, RowKind::Intent);
            (r.get("sort_at"), row.id, row.generation)
        });
        Ok(crate::rows::listing_of::<IntentRowV1, _>(
            RowKind::Intent,
            rows.iter().map(|r| row_data(r, RowKind::Intent)),
            next,
        ))
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        self.snapshot(async |conn: &mut PgConnection| {
            match fetch_approval(conn, id, false).await? {
                Some(row) => {
                    let value = check_row(conn, RowKind::Approval, &row, self.chain_key()).await?;
                    rows::approval_from(&row, value).map(Some)
                }
                None => match newest_approval_seal(conn, id).await? {
                    None => Ok(None),
                    Some(_) => Err(rows::deleted(&format!("approval {id}"))),
                },
            }
        })
        .await
    }

    async fn list_approvals(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Listing<Approval>, StoreError> {
        let rows = listing::approvals_query(Dialect::Postgres, filter)
            .fetch_all(&mut *self.conn().await?)
            .await
            .map_err(unavailable)?;
        let limit = (filter.limit > 0).then_some(filter.limit);
        let (rows, next) = listing::page_of(Dialect::Postgres, rows, limit, |r| {
            (r.get("sort_at"), r.get("id"), 0)
        });
        Ok(crate::rows::listing_of::<ApprovalRowV1, _>(
            RowKind::Approval,
            rows.iter().map(|r| row_data(r, RowKind::Approval)),
            next,
        ))
    }

    async fn pending_approvals_of(
        &self,
        principal: &str,
        now: jiff::Timestamp,
    ) -> Result<u32, StoreError> {
        let row = sqlx::query(
            "SELECT count(*) FROM approvals
             WHERE state = 'pending' AND principal = $1 AND expires_at > $2::timestamptz",
        )
        .bind(principal)
        .bind(ts(now))
        .fetch_one(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        Ok(u32::try_from(row.get::<i64, _>(0)).unwrap_or(u32::MAX))
    }

    async fn stored_rows(&self) -> Result<Vec<StoredRow>, StoreError> {
        self.snapshot(async |conn: &mut PgConnection| {
            let mut out = Vec::new();
            for (kind, sql) in [
                    (RowKind::Intent, "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents ORDER BY key, generation"),
                    (RowKind::Approval, "SELECT id, generation, version, body, audit_shard, audit_seq, row_hash FROM approvals ORDER BY id"),
                ] {
                let rows = sqlx::query(sql)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(unavailable)?;
                for r in &rows {
                    let row = row_data(r, kind);
                    out.push(StoredRow {
                        kind,
                        generation: if kind == RowKind::Intent {
                            row.generation
                        } else {
                            0
                        },
                        body_hash: body_hash(&row.body).map(|(_, h)| h),
                        sealed_hash: row.row_hash,
                        link: row.link,
                        key: row.id,
                    });
                }
            }
            out.extend(controls_in(conn, self.legacy_before_ms()).await?);
            Ok(out)
        })
        .await
    }

    async fn stored_controls(&self) -> Result<Vec<StoredRow>, StoreError> {
        let legacy_before = self.legacy_before_ms();
        self.snapshot(async |conn: &mut PgConnection| controls_in(conn, legacy_before).await)
            .await
    }
}

/// The kill-switch and finding rows [`IntentsRead::stored_controls`] lists, as `conn`
/// reads them (those from before `legacy_before`, unsealed, left out).
async fn controls_in(
    conn: &mut PgConnection,
    legacy_before: Option<i64>,
) -> Result<Vec<StoredRow>, StoreError> {
    let mut out = Vec::new();
    for r in sqlx::query(
        "SELECT target, reason, set_by, (extract(epoch from set_at) * 1000000)::int8, audit_shard, audit_seq, row_hash FROM kill_switches",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(unavailable)?
    {
        let switch = switch_read(&r);
        if switch.row_hash.is_some()
            || legacy_before.is_none_or(|t| switch.row.set_at_ms >= t)
        {
            out.push(switch.stored());
        }
    }
    for r in sqlx::query(
        "SELECT id, rule, (extract(epoch from raised_at) * 1000000)::int8, body, (extract(epoch from delivered_at) * 1000000)::int8, attempts, (extract(epoch from next_attempt_at) * 1000000)::int8, audit_shard, audit_seq, row_hash FROM findings",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(unavailable)?
    {
        let finding = finding_row(&r)?;
        if finding.row_hash.is_some()
            || legacy_before.is_none_or(|t| finding.finding.raised_at.as_millisecond() >= t)
        {
            out.push(finding.stored());
        }
    }
    Ok(out)
}

impl AuditRead for PgStore {
    async fn audit_after(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, shard, seq, prev_hash, hash, body FROM audit WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| Ok((r.get::<i64, _>("id"), audit_row(r)?)))
            .collect()
    }

    async fn audit_shard(&self, shard: u32) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE shard = $1 ORDER BY seq",
        )
        .bind(i64::from(shard))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        rows.iter().map(audit_row).collect()
    }

    async fn audit_shard_after(
        &self,
        shard: u32,
        after: u64,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE shard = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(i64::from(shard))
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        rows.iter().map(audit_row).collect()
    }

    async fn audit_checkpoint(&self) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query("SELECT value FROM meta WHERE name = 'audit_checkpoint'")
                .fetch_optional(&mut *self.conn().await?)
                .await
                .map_err(unavailable)?
                .map(|r| r.get(0)),
        )
    }

    async fn audit_of_intent(
        &self,
        key: &IntentKey,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        // The newest `limit` through `audit_by_key`, then in chain order.
        let rows = sqlx::query(
            "SELECT shard, seq, prev_hash, hash, body FROM (
                 SELECT id, shard, seq, prev_hash, hash, body FROM audit
                  WHERE intent_key = $1 ORDER BY id DESC LIMIT $2
             ) newest ORDER BY id",
        )
        .bind(key.as_str())
        .bind(i64::from(limit))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        rows.iter().map(audit_row).collect()
    }

    async fn audit_shards(&self) -> Result<Vec<u32>, StoreError> {
        let rows = sqlx::query("SELECT DISTINCT shard FROM audit ORDER BY shard")
            .fetch_all(&mut *self.conn().await?)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(|r| r.get::<i64, _>(0) as u32).collect())
    }
}

impl SharedRead for PgStore {
    async fn kill_switches(&self) -> Result<Vec<KillSwitch>, StoreError> {
        let key = self.chain_key();
        let legacy_before = self.legacy_before_ms();
        self.snapshot(async |conn: &mut PgConnection| {
            let rows = sqlx::query(
                "SELECT target, reason, set_by, (extract(epoch from set_at) * 1000000)::int8, audit_shard, audit_seq, row_hash
                 FROM kill_switches ORDER BY target",
            )
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?;
            let mut read = Vec::with_capacity(rows.len());
            for r in &rows {
                let switch = switch_read(r);
                let newest = newest_control_seal(conn, RowKind::Switch, &switch.row.target).await?;
                read.push((switch, newest));
            }
            // Every target the chain ever sealed: one with no row was deleted.
            let sealed = sqlx::query(
                "SELECT a.row_switch_key, a.body, a.shard, a.seq, a.prev_hash, a.hash FROM audit a
                 JOIN (SELECT row_switch_key, MAX(id) AS id FROM audit WHERE row_switch_key IS NOT NULL GROUP BY row_switch_key) n
                   ON a.id = n.id
                 WHERE NOT EXISTS (SELECT 1 FROM kill_switches k WHERE k.target = a.row_switch_key)",
            )
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?;
            let deleted = sealed
                .iter()
                .map(|r| {
                    let at = audit_row(r).map_or(jiff::Timestamp::UNIX_EPOCH, |rec| rec.event.at);
                    (r.get::<String, _>(0), at)
                })
                .collect();
            Ok(controls::switches_on(read, deleted, key, legacy_before))
        })
        .await
    }

    async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
        let row = sqlx::query(
            "SELECT id, principal, state, (extract(epoch from updated_at) * 1000000)::int8
             FROM mcp_sessions WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        row.map(|r| {
            Ok(McpSession {
                id: r.get(0),
                principal: r.get(1),
                state: r
                    .get::<Option<&str>, _>(2)
                    .map(serde_json::from_str)
                    .transpose()
                    .map_err(corrupt)?,
                updated_at: from_micros(r.get(3))?,
            })
        })
        .transpose()
    }
}

impl Backend for PgStore {
    /// Answers within about a second: the database answers, and takes writes (a
    /// read-only standby or a database in recovery is not ready).
    async fn ping(&self) -> Result<(), StoreError> {
        let check = async {
            let row = sqlx::query("SHOW transaction_read_only")
                .fetch_one(&mut *self.conn().await?)
                .await
                .map_err(unavailable)?;
            if row.get::<String, _>(0) == "on" {
                return Err(StoreError::Unavailable(format!(
                    "the PostgreSQL database at {} is read-only (a standby?)",
                    self.describe()
                )));
            }
            Ok(())
        };
        match tokio::time::timeout(std::time::Duration::from_secs(1), check).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(format!(
                "PostgreSQL at {} did not answer within 1s",
                self.describe()
            ))),
        }
    }
}

pub(super) fn finding_row(r: &PgRow) -> Result<controls::FindingRead, StoreError> {
    decode::finding(r)
}

fn switch_read(r: &PgRow) -> controls::SwitchRead {
    let Ok(switch) = decode::switch(r);
    switch
}
