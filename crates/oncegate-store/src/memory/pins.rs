//! Pinned tool definitions in memory: [`PinsRead`] / [`PinsWrite`].

use super::MemoryStore;
use crate::{PinsRead, PinsWrite, StoreError};

impl PinsRead for MemoryStore {
    async fn tool_pins(&self) -> Result<Vec<crate::ToolPin>, StoreError> {
        let data = self.reach().await?;
        Ok(data.tool_pins.values().cloned().collect())
    }
}

impl PinsWrite for MemoryStore {
    async fn pin_tool(&self, offered: crate::OfferedTool) -> Result<crate::ToolPin, StoreError> {
        let pin = {
            let mut data = self.reach().await?;
            let id = (offered.server.clone(), offered.tool.clone());
            let pin = data.tool_pins.entry(id).or_insert_with(|| crate::ToolPin {
                server: offered.server.clone(),
                tool: offered.tool.clone(),
                digest: offered.digest.clone(),
                definition: offered.definition.clone(),
                pinned_at: offered.at,
                pinned_by: "oncegate".into(),
                pending: None,
            });
            if pin.digest == offered.digest {
                pin.pending = None;
            } else if pin
                .pending
                .as_ref()
                .is_none_or(|p| p.digest != offered.digest)
            {
                pin.pending = Some(crate::PendingTool {
                    digest: offered.digest,
                    definition: offered.definition,
                    seen_at: offered.at,
                });
            }
            pin.clone()
        };
        self.pause().await;
        Ok(pin)
    }

    async fn accept_tool(
        &self,
        server: &str,
        tool: &str,
        digest: &str,
        by: &str,
        at: jiff::Timestamp,
    ) -> Result<bool, StoreError> {
        let accepted = {
            let mut data = self.reach().await?;
            match data
                .tool_pins
                .get_mut(&(server.to_owned(), tool.to_owned()))
            {
                Some(pin) if pin.pending.as_ref().is_some_and(|p| p.digest == digest) => {
                    let pending = pin.pending.take().expect("checked above");
                    pin.digest = pending.digest;
                    pin.definition = pending.definition;
                    pin.pinned_at = at;
                    pin.pinned_by = by.to_owned();
                    true
                }
                _ => false,
            }
        };
        self.pause().await;
        Ok(accepted)
    }
}
