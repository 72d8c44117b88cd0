//! Loading a registry and its secret from the world: the config file, the policy files
//! and time zones it names (the I/O half of `Registry::parse`; `oncegate-core` does no
//! I/O), and the audit chain key `[audit] chain_key_env` names, read from the
//! environment. The store is opened with that key (`StoreOptions::chain_key`) and never
//! reads the environment for it itself.

use std::path::Path;

use oncegate_core::audit::ChainKey;
use oncegate_core::config::{ConfigEnv, ConfigError, ConfigErrors, Registry};
use oncegate_store::StoreError;

/// The file-system side of config loading: policy files and the system tz database.
struct FsEnv;

impl ConfigEnv for FsEnv {
    fn read_file(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn time_zone(&self, name: &str) -> Option<jiff::tz::TimeZone> {
        jiff::tz::TimeZone::get(name).ok()
    }
}

/// Reads and validates a registry file (the I/O half of `Registry::parse`).
pub fn load_registry(path: &Path) -> Result<Registry, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_owned(),
            line: 0,
            column: 0,
            field: String::new(),
            message: format!("cannot read the config file: {e}"),
            help: Some("pass --config PATH to an existing file".into()),
        }])
    })?;
    Registry::parse(path, &text, &FsEnv)
}

/// The audit chain key named by `[audit] chain_key_env`, read from the environment.
/// A named variable that is unset or empty is an error: records would otherwise be
/// written unkeyed without anyone noticing.
pub fn chain_key_from_env(registry: &Registry) -> Result<Option<ChainKey>, StoreError> {
    let Some(name) = &registry.audit_chain_key_env else {
        return Ok(None);
    };
    let secret = std::env::var(name).unwrap_or_default();
    ChainKey::new(secret.as_bytes()).map(Some).ok_or_else(|| {
        StoreError::NotInitialised(format!(
            "`[audit] chain_key_env` names `{name}`, which is not set (or empty): set it to the audit chain key, or remove the setting"
        ))
    })
}
