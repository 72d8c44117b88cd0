//! The registry file and its store, read and opened the one way every subcommand does:
//! `--config PATH`, config errors made readable, and store errors that say what to do.

use std::path::{Path, PathBuf};

use oncegate_core::Registry;

/// `--config PATH`, shared by every subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArg {
    /// The registry file.
    #[arg(long, short, default_value = "oncegate.toml", env = "ONCEGATE_CONFIG")]
    pub config: PathBuf,
}

/// Loads a registry, turning config errors into one readable error.
pub fn load(path: &Path) -> anyhow::Result<Registry> {
    oncegate_engine::config::load_registry(path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Opens the registry's existing store (never creates one).
pub async fn open_store(registry: &Registry) -> anyhow::Result<oncegate_store::Store> {
    open_store_with(registry, oncegate_store::OpenMode::Existing).await
}

/// Opens the registry's store as `mode` says, with its audit chain key.
pub async fn open_store_with(
    registry: &Registry,
    mode: oncegate_store::OpenMode,
) -> anyhow::Result<oncegate_store::Store> {
    open_registry_store(registry, mode, None).await
}

/// Opens the registry's store for `oncegate serve`: this process becomes its server,
/// a second server on an embedded (SQLite) store is refused, and so is a store behind
/// its serve anchor unless `serving` accepts the rollback.
pub async fn open_serving_store(
    registry: &Registry,
    mode: oncegate_store::OpenMode,
    serving: oncegate_store::Serving,
) -> anyhow::Result<oncegate_store::Store> {
    open_registry_store(registry, mode, Some(serving)).await
}

async fn open_registry_store(
    registry: &Registry,
    mode: oncegate_store::OpenMode,
    serving: Option<oncegate_store::Serving>,
) -> anyhow::Result<oncegate_store::Store> {
    let location =
        oncegate_store::registry_location(registry).map_err(|e| anyhow::anyhow!("{e}"))?;
    async {
        let chain_key = oncegate_engine::config::chain_key_from_env(registry)?;
        oncegate_store::open_registry_store_with(registry, mode, serving, chain_key).await
    }
    .await
    .map_err(|e| match e {
        // These say what happened and what to do; a wrapper would only bury that
        // (`Locked`: another `serve` holds the SQLite file; the message names
        // PostgreSQL for several replicas).
        oncegate_store::StoreError::NotInitialised(_)
        | oncegate_store::StoreError::AlreadyExists(_)
        | oncegate_store::StoreError::Locked(_)
        | oncegate_store::StoreError::RolledBack(_) => {
            anyhow::anyhow!("{e} [{}]", e.code())
        }
        other => anyhow::anyhow!("cannot open the store at {location}: {other}"),
    })
}
