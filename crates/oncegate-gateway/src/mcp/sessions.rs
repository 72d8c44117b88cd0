//! 2025-11-25 MCP sessions that survive a restart: rmcp's [`SessionStore`] on files
//! beside the intent store.
//!
//! A session is the client's `initialize` parameters (rmcp replays the handshake from
//! them when a request names a session this process does not hold) plus the principal
//! that opened it (the session binding `/mcp` enforces). Without this, every deploy
//! would answer 404 to every connected legacy client, which today's SDKs surface as an
//! error instead of re-initialising.

use std::path::{Path, PathBuf};

use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};

/// Session files in one directory: `<id>.json` (rmcp's state) and `<id>.principal`.
#[derive(Clone, Debug)]
pub struct SessionFiles {
    dir: PathBuf,
}

impl SessionFiles {
    /// Uses (and creates) `dir`.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// Only ids rmcp could have made (UUIDs) name files: nothing else reaches the disk.
    fn path(&self, id: &str, ext: &str) -> Option<PathBuf> {
        let safe = !id.is_empty()
            && id.len() <= 64
            && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        safe.then(|| self.dir.join(format!("{id}.{ext}")))
    }

    /// The principal that opened session `id`, if recorded.
    pub async fn principal(&self, id: &str) -> Option<String> {
        let path = self.path(id, "principal")?;
        tokio::fs::read_to_string(path).await.ok()
    }

    /// Records the principal that opened session `id`.
    pub async fn set_principal(&self, id: &str, principal: &str) -> std::io::Result<()> {
        let Some(path) = self.path(id, "principal") else {
            return Ok(());
        };
        write_atomically(&path, principal.as_bytes()).await
    }

    async fn remove(&self, id: &str) {
        for ext in ["json", "principal"] {
            if let Some(path) = self.path(id, ext) {
                let _ = tokio::fs::remove_file(path).await;
            }
        }
    }
}

async fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    tokio::fs::write(&tmp, bytes).await?;
    tokio::fs::rename(&tmp, path).await
}

#[async_trait::async_trait]
impl SessionStore for SessionFiles {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(path) = self.path(session_id, "json") else {
            return Ok(None);
        };
        match tokio::fs::read(&path).await {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Box::new(e)),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let Some(path) = self.path(session_id, "json") else {
            return Ok(());
        };
        write_atomically(&path, &serde_json::to_vec(state)?).await?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.remove(session_id).await;
        Ok(())
    }
}
