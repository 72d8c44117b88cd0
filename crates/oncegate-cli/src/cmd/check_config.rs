//! `oncegate check-config`: validate a registry without starting anything.

use std::process::ExitCode;

use crate::ConfigArg;

pub fn run(args: &ConfigArg) -> anyhow::Result<ExitCode> {
    let registry = match oncegate_store::load_registry(&args.config) {
        Ok(r) => r,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{}: {} error(s)", args.config.display(), errors.0.len());
            return Ok(ExitCode::FAILURE);
        }
    };
    for w in &registry.warnings {
        eprintln!("warning: {}: `{}`: {}", w.location, w.field, w.message);
    }
    for p in &registry.principals {
        if std::env::var_os(&p.token_env).is_none() {
            eprintln!(
                "note: principal `{}`: ${} is not set here (needed by `oncegate serve`)",
                p.name, p.token_env
            );
        }
    }
    println!(
        "{}: ok ({} capabilities, {} principals, store {})",
        args.config.display(),
        registry.capabilities().len(),
        registry.principals.len(),
        registry.store_url
    );
    for cap in registry.capabilities() {
        println!(
            "  {:<16} {:<16} window {:#} ceiling {} on_unknown {:?} policy {}",
            cap.name,
            format!("{:?}", cap.category),
            cap.replay_window,
            cap.attempt_ceiling
                .map_or("none".to_owned(), |c| c.to_string()),
            cap.on_unknown,
            cap.policy_file.as_deref().unwrap_or("-"),
        );
    }
    Ok(ExitCode::SUCCESS)
}
