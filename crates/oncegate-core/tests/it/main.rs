//! oncegate-core integration tests, compiled as one binary.

mod config;
mod decide;
mod fuzz;
mod keys;
mod policy;

use std::path::{Path, PathBuf};

use oncegate_core::Registry;
use oncegate_core::config::ConfigEnv;

/// Reads policy files from disk and resolves time zones, like the real shell.
pub struct TestEnv;

impl ConfigEnv for TestEnv {
    fn read_file(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn time_zone(&self, name: &str) -> Option<jiff::tz::TimeZone> {
        jiff::tz::TimeZone::get(name).ok()
    }
}

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// The shipped example registry.
pub fn payments() -> Registry {
    let path = examples().join("payments.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    Registry::parse(&path, &text, &TestEnv).unwrap_or_else(|e| panic!("{e}"))
}

/// Parses a config text placed beside the examples (so `policies.cedar` resolves).
pub fn parse(text: &str) -> Result<Registry, oncegate_core::config::ConfigErrors> {
    Registry::parse(&examples().join("test.toml"), text, &TestEnv)
}
