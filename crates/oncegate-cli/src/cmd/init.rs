//! `oncegate init` and `oncegate migrate`: the explicit steps before a first start and
//! a rolling deploy.
//!
//! `serve` never creates a store (a missing one may be a lost volume, and a fresh store
//! would re-execute every intent it forgot). `init` creates one; `migrate` only ever
//! upgrades an existing one, so a deploy that finds its volume missing stops there too.

use std::process::ExitCode;

use oncegate_store::OpenMode;

use crate::ConfigArg;

/// Creates and migrates a new store; refuses one that already exists.
pub async fn init(args: ConfigArg) -> anyhow::Result<ExitCode> {
    let registry = crate::load(&args.config)?;
    let store = crate::open_store_with(&registry, OpenMode::Create).await?;
    crate::emit(&format!(
        "initialised a new oncegate store at {} (store id {})\n",
        store.describe(),
        store.store_id()
    ));
    store.close().await;
    Ok(ExitCode::SUCCESS)
}

/// Applies pending migrations to an existing store.
pub async fn migrate(args: ConfigArg) -> anyhow::Result<ExitCode> {
    let registry = crate::load(&args.config)?;
    let store = crate::open_store_with(&registry, OpenMode::Existing).await?;
    crate::emit(&format!(
        "the store at {} (store id {}) is migrated to this version's schema\n",
        store.describe(),
        store.store_id()
    ));
    store.close().await;
    Ok(ExitCode::SUCCESS)
}
