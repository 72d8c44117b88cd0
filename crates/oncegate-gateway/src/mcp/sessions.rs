//! 2025-11-25 MCP sessions that survive a restart: rmcp's [`SessionStore`] on files
//! beside the intent store.
//!
//! A session is the client's `initialize` parameters (rmcp replays the handshake from
//! them when a request names a session this process does not hold) plus the principal
//! that opened it (the session binding `/mcp` enforces). Without this, every deploy
//! would answer 404 to every connected legacy client, which today's SDKs surface as an
//! error instead of re-initialising.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncegate_engine::Gate;
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};

/// Which principal opened each MCP session: in memory, and in [`SessionFiles`] when the
/// store has a directory to keep them beside.
#[derive(Clone)]
pub struct Sessions {
    /// Session id -> the principal that opened it, and when it was last used.
    owners: Arc<Mutex<HashMap<String, (String, Instant)>>>,
    /// 2025-11-25 sessions on disk beside the store, so they survive a restart.
    files: Option<SessionFiles>,
}

impl Sessions {
    /// The sessions of a gateway on `gate`'s store: `<store>.mcp-sessions/` beside an
    /// SQLite store (in memory only for other stores, or when the directory cannot be
    /// made).
    pub fn beside(gate: &Gate) -> Self {
        Self {
            owners: Arc::default(),
            files: session_files(gate),
        }
    }

    /// The session files, when sessions persist.
    pub fn files(&self) -> Option<&SessionFiles> {
        self.files.as_ref()
    }

    /// The principal that opened a session (and marks it used); after a restart, from
    /// the session files.
    pub async fn owner(&self, id: &str) -> Option<String> {
        {
            let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((owner, used)) = owners.get_mut(id) {
                *used = Instant::now();
                return Some(owner.clone());
            }
        }
        let owner = self.files.as_ref()?.principal(id).await?;
        self.remember(id, &owner);
        Some(owner)
    }

    /// Records who opened a session, in memory and on disk.
    pub async fn bind(&self, id: &str, principal: &str) {
        self.remember(id, principal);
        if let Some(files) = &self.files
            && let Err(e) = files.set_principal(id, principal).await
        {
            tracing::warn!(error = %e, "an MCP session's owner could not be saved; it ends with this process");
        }
    }

    /// Forgets a session its owner ended (or rmcp dropped).
    pub fn unbind(&self, id: &str) {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// Bindings idle longer than rmcp keeps an idle session are dropped here, so the map
    /// cannot grow without bound.
    fn remember(&self, id: &str, principal: &str) {
        const IDLE: Duration = Duration::from_secs(15 * 60);
        let now = Instant::now();
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners.retain(|_, (_, used)| now.duration_since(*used) < IDLE);
        owners.insert(id.to_owned(), (principal.to_owned(), now));
    }
}

/// `<store>.mcp-sessions/` beside an SQLite store.
fn session_files(gate: &Gate) -> Option<SessionFiles> {
    let db = gate.store().path()?;
    let mut name = db.file_name()?.to_owned();
    name.push(".mcp-sessions");
    match SessionFiles::open(&db.with_file_name(name)) {
        Ok(files) => Some(files),
        Err(e) => {
            tracing::warn!(error = %e, "MCP sessions will not survive a restart: cannot create their directory");
            None
        }
    }
}

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
