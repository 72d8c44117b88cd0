//! Shared state in memory: kill switches, MCP sessions and work claims ([`SharedRead`] /
//! [`SharedWrite`]).

use super::MemoryStore;
use crate::{KillSwitch, McpSession, SharedRead, SharedWrite, StoreError};

impl SharedRead for MemoryStore {
    async fn kill_switches(&self) -> Result<Vec<KillSwitch>, StoreError> {
        let data = self.reach().await?;
        Ok(data.kill_switches.values().cloned().collect())
    }

    async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
        let data = self.reach().await?;
        Ok(data.mcp_sessions.get(id).cloned())
    }
}

impl SharedWrite for MemoryStore {
    async fn put_mcp_session(&self, session: McpSession) -> Result<(), StoreError> {
        {
            let mut data = self.reach().await?;
            let stored = data
                .mcp_sessions
                .entry(session.id.clone())
                .or_insert_with(|| McpSession {
                    principal: None,
                    state: None,
                    ..session.clone()
                });
            stored.principal = session.principal.or(stored.principal.take());
            stored.state = session.state.or(stored.state.take());
            stored.updated_at = session.updated_at;
        }
        self.pause().await;
        Ok(())
    }

    async fn delete_mcp_session(
        &self,
        id: &str,
        idle_before: jiff::Timestamp,
    ) -> Result<(), StoreError> {
        {
            let mut data = self.reach().await?;
            data.mcp_sessions
                .retain(|k, s| k != id && s.updated_at >= idle_before);
        }
        self.pause().await;
        Ok(())
    }

    async fn claim_work(
        &self,
        work: &str,
        owner: &str,
        now: jiff::Timestamp,
        ttl: jiff::SignedDuration,
    ) -> Result<bool, StoreError> {
        // A store with its own clock judges a claim's expiry by it.
        let now = self.time().unwrap_or(now);
        let taken = {
            let mut data = self.reach().await?;
            let free = data
                .work
                .get(work)
                .is_none_or(|(held_by, until)| held_by == owner || *until <= now);
            if free {
                data.work
                    .insert(work.to_owned(), (owner.to_owned(), now + ttl));
            }
            free
        };
        self.pause().await;
        Ok(taken)
    }

    async fn release_work(&self, work: &str, owner: &str) -> Result<(), StoreError> {
        {
            let mut data = self.reach().await?;
            if data
                .work
                .get(work)
                .is_some_and(|(held_by, _)| held_by == owner)
            {
                data.work.remove(work);
            }
        }
        self.pause().await;
        Ok(())
    }
}
