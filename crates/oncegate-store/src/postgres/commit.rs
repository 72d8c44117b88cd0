//! Writes: the commit transaction (rows, their checks, the audit append under the
//! shard head's row lock) and the small writes outside the chain.

use oncegate_core::audit::{AuditRecord, ChainHead, RowKind, add_row_seals, seal_with};
use oncegate_core::key::IntentKey;
use sqlx::{PgConnection, Row};

use super::controls::{insert_finding, reconcile, release, reserve, write_kill_switch};
use super::fused::{fusable, prepare_at_db_time};
use super::read::{
    check_row, fetch_approval, fetch_intent, newest_approval_seal, newest_intent_seal,
};
use super::{PgStore, db_error, from_micros, ts, unavailable};
use crate::ledger::Sealing;
use crate::rows::{self, PreparedApproval, PreparedIntent};
use crate::storage::{AuditRowV1, IntentRowV1};
use crate::{
    AuditWrite, ClientKeyBinding, Commit, IntentsWrite, LimitsWrite, McpSession, Reservation,
    SharedWrite, StoreError,
};

impl IntentsWrite for PgStore {
    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        // Spawned, never run under the caller's future: a caller that gives up cannot
        // cancel the transaction half-way (between COMMIT sent and answered).
        let store = self.clone();
        let result = tokio::spawn(async move { store.commit_inner(&commit).await })
            .await
            .unwrap_or_else(|e| {
                Err(StoreError::Unavailable(format!(
                    "the commit task failed: {e}"
                )))
            });
        metrics::histogram!("oncegate_store_commit_seconds")
            .record(started.elapsed().as_secs_f64());
        result
    }

    async fn bind_client_key(&self, b: ClientKeyBinding) -> Result<ClientKeyBinding, StoreError> {
        let mut conn = self.conn().await?;
        sqlx::query(
            "INSERT INTO client_keys (principal, capability, client_key, intent_key, args_digest, created_at)
             VALUES ($1, $2, $3, $4, $5, $6::timestamptz) ON CONFLICT DO NOTHING",
        )
        .bind(&b.principal)
        .bind(&b.capability)
        .bind(&b.client_key)
        .bind(b.intent_key.as_str())
        .bind(&b.args_digest)
        .bind(ts(b.created_at))
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?;
        let row = sqlx::query(
            "SELECT intent_key, args_digest, (extract(epoch from created_at) * 1000000)::int8
             FROM client_keys WHERE principal = $1 AND capability = $2 AND client_key = $3",
        )
        .bind(&b.principal)
        .bind(&b.capability)
        .bind(&b.client_key)
        .fetch_one(&mut *conn)
        .await
        .map_err(unavailable)?;
        Ok(ClientKeyBinding {
            intent_key: IntentKey::from_hex(row.get::<String, _>(0)),
            args_digest: row.get(1),
            created_at: from_micros(row.get(2))?,
            ..b
        })
    }
}

impl AuditWrite for PgStore {
    async fn put_audit_checkpoint(&self, checkpoint: String) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO meta (name, value) VALUES ('audit_checkpoint', $1)
             ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
        )
        .bind(checkpoint)
        .execute(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        Ok(())
    }
}

impl SharedWrite for PgStore {
    async fn put_mcp_session(&self, s: McpSession) -> Result<(), StoreError> {
        let state = s.state.as_ref().map(serde_json::Value::to_string);
        sqlx::query(
            "INSERT INTO mcp_sessions (id, principal, state, updated_at) VALUES ($1, $2, $3, $4::timestamptz)
             ON CONFLICT (id) DO UPDATE SET principal = COALESCE(EXCLUDED.principal, mcp_sessions.principal),
                 state = COALESCE(EXCLUDED.state, mcp_sessions.state), updated_at = EXCLUDED.updated_at",
        )
        .bind(&s.id)
        .bind(s.principal.as_deref())
        .bind(state)
        .bind(ts(s.updated_at))
        .execute(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    async fn delete_mcp_session(
        &self,
        id: &str,
        idle_before: jiff::Timestamp,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM mcp_sessions WHERE id = $1 OR updated_at < $2::timestamptz")
            .bind(id)
            .bind(ts(idle_before))
            .execute(&mut *self.conn().await?)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Claims by the database's clock: `now` is ignored, the claim runs until
    /// `now() + ttl` and a claim is expired when its `until <= now()`.
    async fn claim_work(
        &self,
        work: &str,
        owner: &str,
        _now: jiff::Timestamp,
        ttl: jiff::SignedDuration,
    ) -> Result<bool, StoreError> {
        let ttl_us = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "INSERT INTO work_claims (work, owner, until) VALUES ($1, $2, now() + $3 * interval '1 microsecond')
             ON CONFLICT (work) DO UPDATE SET owner = EXCLUDED.owner, until = EXCLUDED.until
             WHERE work_claims.owner = EXCLUDED.owner OR work_claims.until <= now()",
        )
        .bind(work)
        .bind(owner)
        .bind(ttl_us as f64)
        .execute(&mut *self.conn().await?)
        .await
        .map_err(db_error)
        .or_else(|e| match e {
            // Two replicas inserting the same new claim at once: the other one won.
            StoreError::Conflict => Ok(Default::default()),
            e => Err(e),
        })?
        .rows_affected();
        Ok(rows == 1)
    }

    async fn release_work(&self, work: &str, owner: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM work_claims WHERE work = $1 AND owner = $2")
            .bind(work)
            .bind(owner)
            .execute(&mut *self.conn().await?)
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

impl LimitsWrite for PgStore {
    async fn finding_delivery(
        &self,
        id: &str,
        attempts: u32,
        delivered_at: Option<jiff::Timestamp>,
        next_attempt_at: Option<jiff::Timestamp>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE findings SET attempts = $2, delivered_at = $3::timestamptz, next_attempt_at = $4::timestamptz WHERE id = $1",
        )
        .bind(id)
        .bind(i64::from(attempts))
        .bind(delivered_at.map(ts))
        .bind(next_attempt_at.map(ts))
        .execute(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        Ok(())
    }
}

impl PgStore {
    async fn commit_inner(&self, commit: &Commit) -> Result<(), StoreError> {
        // Most commits write no control: two statements and no transaction held open
        // between them (fused.rs). The others keep one transaction of many statements.
        if fusable(commit) {
            return self.fused_commit(commit).await;
        }
        let mut tx = self.begin("BEGIN").await?;
        match self.apply(tx.conn(), commit).await {
            Ok(()) => tx.end("COMMIT").await,
            Err(e) => {
                // A failed ROLLBACK closes the connection (InTransaction).
                let _ = tx.end("ROLLBACK").await;
                Err(e)
            }
        }
    }

    // Long on purpose: one transaction's statements in the order every backend runs them,
    // read side by side with memory.rs `Data::apply` and sqlite/writer/task.rs `apply_one`;
    // issue 35 (one round trip per commit) rewrites this body, and cutting it now would
    // move the same code twice.
    /// The body of one commit's transaction.
    async fn apply(&self, conn: &mut PgConnection, commit: &Commit) -> Result<(), StoreError> {
        let key = self.chain_key();
        let shards = self.inner.audit_shards;
        // The transaction's timestamp: the clock every instant of this commit is written
        // and judged by. Its `clock_timestamp()` is one more sample of the database's
        // clock for this replica's estimate, free.
        let clock = &self.inner.clock;
        let before = clock.ticks();
        let row = sqlx::query(
            "SELECT (extract(epoch from now()) * 1000000)::int8, (extract(epoch from clock_timestamp()) * 1000000)::int8",
        )
        .fetch_one(&mut *conn)
        .await
        .map_err(db_error)?;
        let after = clock.ticks();
        let db_now = from_micros(row.get(0))?;
        super::clock::observe(clock, before, from_micros(row.get(1))?, after);
        if let Some(until) = commit.valid_until
            && db_now >= until
        {
            // The decision relied on an instant (an approval's expiry) that has passed by
            // the database's clock: nothing is written, the engine decides again.
            return Err(StoreError::Conflict);
        }
        let retime = |t: jiff::Timestamp| rows::retime(t, commit.event.at, db_now);
        let mut event = commit.event.clone();
        let mut intent_row = None;
        if let Some(record) = &commit.record {
            let (id, generation) = (record.key.as_str(), record.generation);
            let what = format!("intent {id} generation {generation}");
            // The lease and attempt end the row holds now, if the commit replaces a
            // checked row.
            let mut current_lease = None;
            let mut current_ended = None;
            if record.version == 0 {
                if newest_intent_seal(conn, id, generation).await?.is_some()
                    && fetch_intent(conn, id, generation, false).await?.is_none()
                {
                    return Err(rows::deleted(&what));
                }
            } else if let Some(current) = fetch_intent(conn, id, generation, true).await?
                && current.version == i64::try_from(record.version).unwrap_or(-1)
            {
                // Locked (FOR UPDATE): no other commit can replace it before ours ends,
                // so the seal read next is the one that wrote this version.
                let value = check_row(conn, RowKind::Intent, &current, key).await?;
                if let Ok(row) = IntentRowV1::from_body(value) {
                    current_lease = row.lease;
                    current_ended = row.attempt_ended_at;
                }
            }
            let prepared = prepare_at_db_time(commit, record, db_now, current_lease, current_ended);
            intent_row = Some(prepared);
        }
        let mut approval_row = None;
        if let Some(approval) = &commit.approval {
            let prepared = rows::prepare_approval(approval);
            let what = format!("approval {}", prepared.stored.id);
            if approval.version == 0 {
                if newest_approval_seal(conn, &prepared.stored.id)
                    .await?
                    .is_some()
                    && fetch_approval(conn, &prepared.stored.id, false)
                        .await?
                        .is_none()
                {
                    return Err(rows::deleted(&what));
                }
            } else if let Some(current) = fetch_approval(conn, &prepared.stored.id, true).await?
                && current.version == i64::try_from(approval.version).unwrap_or(-1)
            {
                check_row(conn, RowKind::Approval, &current, key).await?;
            }
            approval_row = Some(prepared);
        }
        add_row_seals(
            &mut event,
            intent_row.as_ref().map(|r| r.seal.clone()),
            approval_row.as_ref().map(|r| r.seal.clone()),
        );
        let (switch, finding) = crate::controls::seal_controls(commit, &mut event);
        let shard = event.shard_in(shards);
        let head = lock_head(conn, shard).await?;
        let seq = head.seq + 1;
        if let Some(prepared) = &intent_row {
            write_intent(conn, prepared, shard, seq, commit.takes_over).await?;
        }
        if let Some(prepared) = &approval_row {
            write_approval(conn, prepared, shard, seq).await?;
        }
        let mut sealing = Sealing::new(
            (shard, seq),
            key,
            self.inner.legacy_before,
            &self.inner.known,
        );
        if let Some(r) = &commit.limit_reconcile {
            reconcile(conn, r, &mut sealing).await?;
        }
        if let (Some(change), Some(seal)) = (&commit.kill_switch, &switch) {
            write_kill_switch(conn, change, seal, &sealing).await?;
        }
        if let Some(record) = &commit.record {
            if crate::releases(record) {
                release(
                    conn,
                    record.key.as_str(),
                    record.generation,
                    db_now,
                    &mut sealing,
                )
                .await?;
            }
            let mut reservations = commit.reservations.clone();
            // Budgets are locked in one order by every commit (no deadlock between two).
            reservations.sort_by(|a, b| a.scope.cmp(&b.scope));
            for r in &reservations {
                // The window is the database's: it starts the limit's length before
                // `now()`, and the reservation is made at `now()`.
                let r = Reservation {
                    since: retime(r.since),
                    ..r.clone()
                };
                reserve(
                    conn,
                    record.key.as_str(),
                    record.generation,
                    &r,
                    db_now,
                    &mut sealing,
                )
                .await?;
            }
        }
        if let (Some(f), Some(seal)) = (&commit.finding, &finding) {
            insert_finding(conn, f, seal, &sealing).await?;
        }
        sealing.seal_into(&mut event);
        let sealed = seal_with(event, &head, key, shards);
        debug_assert_eq!((sealed.shard, sealed.seq), (shard, seq));
        append(conn, &sealed).await
    }
}

/// The head of `shard`, locked until the transaction ends (created at genesis first if
/// the shard has none yet).
async fn lock_head(conn: &mut PgConnection, shard: u32) -> Result<ChainHead, StoreError> {
    let genesis = ChainHead::genesis();
    sqlx::query("INSERT INTO audit_heads (shard, seq, hash) VALUES ($1, 0, $2) ON CONFLICT (shard) DO NOTHING")
        .bind(i64::from(shard))
        .bind(&genesis.hash)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    let row = sqlx::query("SELECT seq, hash FROM audit_heads WHERE shard = $1 FOR UPDATE")
        .bind(i64::from(shard))
        .fetch_one(&mut *conn)
        .await
        .map_err(db_error)?;
    Ok(ChainHead {
        seq: row.get::<i64, _>(0) as u64,
        hash: row.get(1),
    })
}

/// Inserts the sealed record (with its row-seal columns) and moves the shard's head.
async fn append(conn: &mut PgConnection, sealed: &AuditRecord) -> Result<(), StoreError> {
    let seal = |kind: RowKind| oncegate_core::audit::row_seal(&sealed.event, kind.field());
    let (intent, approval) = (seal(RowKind::Intent), seal(RowKind::Approval));
    let (switch, finding) = (seal(RowKind::Switch), seal(RowKind::Finding));
    let row = AuditRowV1::from(sealed.clone());
    sqlx::query(
        "INSERT INTO audit (shard, seq, prev_hash, hash, body, row_intent_key, row_intent_generation, row_approval_key, intent_key, row_switch_key, row_finding_key)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(i64::from(row.shard))
    .bind(row.seq as i64)
    .bind(&row.prev_hash)
    .bind(&row.hash)
    .bind(row.body_text())
    .bind(intent.as_ref().map(|s| s.key.clone()))
    .bind(intent.as_ref().map(|s| i64::from(s.generation)))
    .bind(approval.as_ref().map(|s| s.key.clone()))
    .bind(sealed.event.key.as_ref().map(|k| k.as_str().to_owned()))
    .bind(switch.map(|s| s.key))
    .bind(finding.map(|s| s.key))
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    sqlx::query("UPDATE audit_heads SET seq = $2, hash = $3 WHERE shard = $1")
        .bind(i64::from(sealed.shard))
        .bind(sealed.seq as i64)
        .bind(&sealed.hash)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    Ok(())
}

async fn write_intent(
    conn: &mut PgConnection,
    prepared: &PreparedIntent,
    shard: u32,
    seq: u64,
    takes_over: bool,
) -> Result<(), StoreError> {
    let PreparedIntent { stored, body, seal } = prepared;
    let lease_expires_at = stored.lease.as_ref().map(|l| ts(l.expires_at));
    let sql = if stored.version == 1 {
        "INSERT INTO intents (key, generation, capability, state, cross_key, run_id, business_ref, breaker_tripped, updated_at, version, body, audit_shard, audit_seq, row_hash, lease_expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::timestamptz, $10, $11, $12, $13, $14, $15::timestamptz) ON CONFLICT (key, generation) DO NOTHING"
    } else if takes_over {
        // A takeover: the lease it replaces must have run out by the database's clock.
        "UPDATE intents SET capability = $3, state = $4, cross_key = $5, run_id = $6, business_ref = $7,
                breaker_tripped = $8, updated_at = $9::timestamptz, version = $10, body = $11,
                audit_shard = $12, audit_seq = $13, row_hash = $14, lease_expires_at = $15::timestamptz
         WHERE key = $1 AND generation = $2 AND version = $10 - 1
           AND (lease_expires_at IS NULL OR lease_expires_at <= now())"
    } else {
        "UPDATE intents SET capability = $3, state = $4, cross_key = $5, run_id = $6, business_ref = $7,
                breaker_tripped = $8, updated_at = $9::timestamptz, version = $10, body = $11,
                audit_shard = $12, audit_seq = $13, row_hash = $14, lease_expires_at = $15::timestamptz
         WHERE key = $1 AND generation = $2 AND version = $10 - 1"
    };
    let rows = sqlx::query(sql)
        .bind(&stored.key)
        .bind(i64::from(stored.generation))
        .bind(&stored.capability)
        .bind(stored.state.as_str())
        .bind(stored.cross_key.as_deref())
        .bind(stored.run_id.as_deref())
        .bind(stored.business_ref.as_deref())
        .bind(stored.breaker_tripped)
        .bind(ts(stored.updated_at))
        .bind(stored.version as i64)
        .bind(body)
        .bind(i64::from(shard))
        .bind(seq as i64)
        .bind(&seal.hash)
        .bind(lease_expires_at)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?
        .rows_affected();
    if rows == 1 {
        return Ok(());
    }
    if takes_over && stored.version > 1 {
        // At the expected version but not taken: the lease is live by the database.
        let live = sqlx::query(
            "SELECT (extract(epoch from lease_expires_at - now()) * 1000)::int8 FROM intents
             WHERE key = $1 AND generation = $2 AND version = $3 AND lease_expires_at > now()",
        )
        .bind(&stored.key)
        .bind(i64::from(stored.generation))
        .bind(stored.version as i64 - 1)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_error)?;
        if let Some(row) = live {
            let left_ms: i64 = row.get(0);
            return Err(StoreError::LeaseLive(format!(
                "intent {} generation {}: the lease runs {left_ms} ms more by the database's clock",
                stored.key, stored.generation
            )));
        }
    }
    Err(StoreError::Conflict)
}

async fn write_approval(
    conn: &mut PgConnection,
    prepared: &PreparedApproval,
    shard: u32,
    seq: u64,
) -> Result<(), StoreError> {
    let PreparedApproval { stored, body, seal } = prepared;
    let sql = if stored.version == 1 {
        "INSERT INTO approvals (id, key, generation, state, created_at, version, body, audit_shard, audit_seq, row_hash, principal, expires_at)
         VALUES ($1, $2, $3, $4, $5::timestamptz, $6, $7, $8, $9, $10, $11, $12::timestamptz) ON CONFLICT (id) DO NOTHING"
    } else {
        "UPDATE approvals SET key = $2, generation = $3, state = $4, created_at = $5::timestamptz, version = $6, body = $7,
                audit_shard = $8, audit_seq = $9, row_hash = $10, principal = $11, expires_at = $12::timestamptz
         WHERE id = $1 AND version = $6 - 1"
    };
    let rows = sqlx::query(sql)
        .bind(&stored.id)
        .bind(&stored.key)
        .bind(i64::from(stored.generation))
        .bind(stored.state.as_str())
        .bind(ts(stored.created_at))
        .bind(stored.version as i64)
        .bind(body)
        .bind(i64::from(shard))
        .bind(seq as i64)
        .bind(&seal.hash)
        .bind(&stored.principal)
        .bind(ts(stored.expires_at))
        .execute(&mut *conn)
        .await
        .map_err(db_error)?
        .rows_affected();
    if rows != 1 {
        return Err(StoreError::Conflict);
    }
    Ok(())
}
