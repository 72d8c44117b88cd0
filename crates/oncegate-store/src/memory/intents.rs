//! Intents and approvals in memory: [`IntentsRead`] and [`IntentsWrite`].

use oncegate_core::audit::{RowKind, StoredRow, row_hash};
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord, IntentState};
use oncegate_core::key::IntentKey;

use super::{MemoryStore, id_key};
use crate::storage::IntentRowV1;
use crate::{
    ApprovalFilter, ClientKeyBinding, Commit, IntentFilter, IntentsRead, IntentsWrite, Listing,
    StoreError,
};

impl IntentsRead for MemoryStore {
    async fn load(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        let data = self.reach().await?;
        Ok(data
            .intents
            .range((key.as_str().to_owned(), 0)..=(key.as_str().to_owned(), u32::MAX))
            .next_back()
            .map(|(_, r)| r.clone().into()))
    }

    async fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let data = self.reach().await?;
        Ok(data
            .intents
            .get(&id_key(key, generation))
            .cloned()
            .map(Into::into))
    }

    async fn find_other_run(
        &self,
        cross_key: &IntentKey,
        run_id: Option<&str>,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let data = self.reach().await?;
        // SQLite: cross_key = ? AND run_id IS NOT ? AND state NOT IN (...) ORDER BY
        // updated_at DESC LIMIT 1.
        Ok(data
            .intents
            .values()
            .filter(|r| r.cross_key.as_deref() == Some(cross_key.as_str()))
            .filter(|r| r.run_id.as_deref() != run_id)
            .filter(|r| {
                !matches!(
                    r.state,
                    IntentState::Denied | IntentState::Failed | IntentState::NotApplied
                )
            })
            .max_by_key(|r| r.updated_at)
            .cloned()
            .map(Into::into))
    }

    async fn list_intents(
        &self,
        filter: &IntentFilter,
    ) -> Result<Listing<IntentRecord>, StoreError> {
        let data = self.reach().await?;
        let limit = if filter.limit == 0 { 100 } else { filter.limit } as usize;
        let mut rows: Vec<&IntentRowV1> = data
            .intents
            .values()
            .filter(|r| filter.state.is_none_or(|s| r.state == s))
            .filter(|r| {
                filter
                    .capability
                    .as_deref()
                    .is_none_or(|c| r.capability == c)
            })
            .filter(|r| !filter.breaker_tripped || r.breaker_tripped)
            .filter(|r| filter.updated_since.is_none_or(|t| r.updated_at >= t))
            .filter(|r| {
                filter
                    .run_id
                    .as_deref()
                    .is_none_or(|run| r.run_id.as_deref() == Some(run))
            })
            .filter(|r| {
                filter
                    .business_ref
                    .as_deref()
                    .is_none_or(|b| r.business_ref.as_deref() == Some(b))
            })
            .collect();
        // The SQL backends' order: time, then key, then generation.
        let position = |r: &IntentRowV1| (r.updated_at, r.key.clone(), r.generation);
        rows.sort_by_key(|r| position(r));
        if !filter.oldest_first {
            rows.reverse();
        }
        if let Some(after) = &filter.after {
            let after = (after.at, after.id.clone(), after.generation);
            rows.retain(|r| {
                if filter.oldest_first {
                    position(r) > after
                } else {
                    position(r) < after
                }
            });
        }
        let next = (rows.len() > limit).then(|| {
            let last = rows[limit - 1];
            crate::PageAfter {
                at: last.updated_at,
                id: last.key.clone(),
                generation: last.generation,
            }
        });
        // Rows in memory are always readable: nothing can edit them behind the store.
        Ok(Listing {
            items: rows
                .into_iter()
                .take(limit)
                .map(|r| r.clone().into())
                .collect(),
            unreadable: Vec::new(),
            next,
        })
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        let data = self.reach().await?;
        Ok(data.approvals.get(id).cloned().map(Into::into))
    }

    async fn list_approvals(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Listing<Approval>, StoreError> {
        let data = self.reach().await?;
        let after = filter.after.as_ref().map(|a| (a.at, a.id.as_str()));
        let mut rows: Vec<Approval> = data
            .approvals
            .values()
            .filter(|a| filter.state.is_none_or(|s| a.state == s))
            .filter(|a| {
                after.is_none_or(|after| {
                    let here = (a.created_at, a.id.as_str());
                    if filter.newest_first {
                        here < after
                    } else {
                        here > after
                    }
                })
            })
            .map(|a| a.clone().into())
            .collect();
        rows.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        if filter.newest_first {
            rows.reverse();
        }
        let limit = filter.limit as usize;
        let next = (filter.limit > 0 && rows.len() > limit).then(|| {
            rows.truncate(limit);
            crate::PageAfter::of_approval(&rows[limit - 1])
        });
        Ok(Listing {
            items: rows,
            unreadable: Vec::new(),
            next,
        })
    }

    async fn pending_approvals_of(
        &self,
        principal: &str,
        now: jiff::Timestamp,
    ) -> Result<u32, StoreError> {
        let data = self.reach().await?;
        let live = data
            .approvals
            .values()
            .filter(|a| {
                a.state == ApprovalState::Pending && a.principal == principal && a.expires_at > now
            })
            .count();
        Ok(u32::try_from(live).unwrap_or(u32::MAX))
    }

    async fn stored_rows(&self) -> Result<Vec<StoredRow>, StoreError> {
        let data = self.reach().await?;
        let row = |kind: RowKind, key: &str, generation: u32, value: serde_json::Value| {
            let seal = data.seals.get(&(kind, key.to_owned(), generation));
            StoredRow {
                kind,
                key: key.to_owned(),
                generation,
                body_hash: Ok(row_hash(&value)),
                sealed_hash: seal.map(|(_, h)| h.clone()),
                link: seal.map(|(l, _)| *l),
            }
        };
        let mut out: Vec<StoredRow> = data
            .intents
            .values()
            .map(|r| row(RowKind::Intent, &r.key, r.generation, r.to_body()))
            .collect();
        out.extend(
            data.approvals
                .values()
                .map(|a| row(RowKind::Approval, &a.id, 0, a.to_body())),
        );
        Ok(out)
    }

    async fn stored_controls(&self) -> Result<Vec<StoredRow>, StoreError> {
        // The memory store seals intent and approval rows only (`memory.rs`): no control
        // of its carries a seal to check.
        drop(self.reach().await?);
        Ok(Vec::new())
    }
}

impl IntentsWrite for MemoryStore {
    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let store_now = self.time();
        let applied = self.reach().await?.apply(commit, store_now);
        // The caller hears about the commit only after a second wait: a process killed
        // here has committed without knowing it.
        self.pause().await;
        applied
    }

    async fn bind_client_key(
        &self,
        binding: ClientKeyBinding,
    ) -> Result<ClientKeyBinding, StoreError> {
        let held = {
            let mut data = self.reach().await?;
            let id = (
                binding.principal.clone(),
                binding.capability.clone(),
                binding.client_key.clone(),
            );
            data.client_keys.entry(id).or_insert(binding).clone()
        };
        self.pause().await;
        Ok(held)
    }
}
