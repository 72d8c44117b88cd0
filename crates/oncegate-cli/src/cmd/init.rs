//! `oncegate init`: the explicit step before a first start (`oncegate migrate`,
//! `cmd/migrate.rs`, is the one before a rolling deploy).
//!
//! `serve` never creates a store (a missing one may be a lost volume, and a fresh store
//! would re-execute every intent it forgot). `init` creates one; `migrate` only ever
//! upgrades an existing one, so a deploy that finds its volume missing stops there too.

use std::process::ExitCode;

use oncegate_store::OpenMode;

use crate::registry::ConfigArg;

/// Creates and migrates a new store; refuses one that already exists.
pub async fn init(args: ConfigArg) -> anyhow::Result<ExitCode> {
    let registry = crate::registry::load(&args.config)?;
    let store = crate::registry::open_store_with(&registry, OpenMode::Create).await?;
    crate::output::emit(&format!(
        "initialised a new oncegate store at {} (store id {})\n",
        store.describe(),
        store.store_id()
    ));
    store.close().await;
    Ok(ExitCode::SUCCESS)
}
