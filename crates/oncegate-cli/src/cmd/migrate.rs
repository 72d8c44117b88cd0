//! `oncegate migrate`: applies pending migrations to the configured store and exits,
//! the step before a rolling deploy.
//!
//! Migrations are additive, so it is safe while replicas of the previous version keep
//! serving; it can also run alone, as a deploy job, before any new replica starts. A
//! SQLite store must already exist (`oncegate init` creates one: a missing file may be a
//! lost volume); an empty PostgreSQL database gets the whole schema.

use std::process::ExitCode;

use crate::registry::ConfigArg;

/// Applies pending migrations and prints which.
pub async fn migrate(args: ConfigArg) -> anyhow::Result<ExitCode> {
    let registry = crate::registry::load(&args.config)?;
    let location =
        oncegate_store::registry_location(&registry).map_err(|e| anyhow::anyhow!("{e}"))?;
    let migrated = async {
        let chain_key = oncegate_engine::config::chain_key_from_env(&registry)?;
        oncegate_store::migrate_registry_store(&registry, chain_key).await
    }
    .await
    .map_err(|e| match e {
        oncegate_store::StoreError::NotInitialised(_)
        | oncegate_store::StoreError::AlreadyExists(_) => {
            anyhow::anyhow!("{e} [{}]", e.code())
        }
        other => anyhow::anyhow!("cannot migrate the store at {location}: {other}"),
    })?;
    let store = &migrated.store;
    let mut out = String::new();
    if migrated.applied.is_empty() {
        out.push_str(&format!(
            "the store at {} (store id {}) is up to date: no migration to apply\n",
            store.describe(),
            store.store_id()
        ));
    } else {
        out.push_str(&format!(
            "applied {} migration(s) to the store at {} (store id {}):\n",
            migrated.applied.len(),
            store.describe(),
            store.store_id()
        ));
        for (version, description) in &migrated.applied {
            out.push_str(&format!("  {version:04} {description}\n"));
        }
    }
    crate::output::emit(&out);
    store.close().await;
    Ok(ExitCode::SUCCESS)
}
