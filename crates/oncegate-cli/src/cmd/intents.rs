//! `oncegate intents list|show`: what the store holds.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use oncegate_core::intent::IntentState;
use oncegate_core::key::IntentKey;
use oncegate_store::{IntentFilter, StoreRead};

use crate::ConfigArg;

#[derive(Debug, Subcommand)]
pub enum IntentsCommand {
    /// List intents, newest first.
    List {
        #[command(flatten)]
        config: ConfigArg,
        /// Only this state (in_flight, applied, failed, unknown, not_applied, pending_approval, denied).
        #[arg(long)]
        state: Option<String>,
        /// Only this capability.
        #[arg(long)]
        capability: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Show one intent (its latest generation) as JSON.
    Show {
        #[command(flatten)]
        config: ConfigArg,
        /// The intent key.
        key: String,
    },
}

pub async fn run(command: IntentsCommand) -> anyhow::Result<ExitCode> {
    match command {
        IntentsCommand::List {
            config,
            state,
            capability,
            limit,
            json,
        } => {
            let registry = crate::load(&config.config)?;
            let store = crate::open_store(&registry).await?;
            let state = match state.as_deref() {
                None => None,
                Some(s) => {
                    Some(IntentState::parse(s).with_context(|| format!("`{s}` is not a state"))?)
                }
            };
            let filter = IntentFilter {
                state,
                capability,
                breaker_tripped: false,
                limit,
                oldest_first: false,
                updated_since: None,
                ..IntentFilter::default()
            };
            let listing = store.list_intents(&filter).await?;
            let intents = &listing.items;
            for r in intents {
                if json {
                    println!("{}", serde_json::to_string(r)?);
                } else {
                    println!(
                        "{}  g{}  {:<14} {:<16} attempts {:<3} ref {:<10} effect {}",
                        r.key,
                        r.generation,
                        r.capability,
                        r.state.as_str(),
                        r.attempts,
                        r.business_ref.as_deref().unwrap_or("-"),
                        r.effect_ref.as_deref().unwrap_or("-")
                    );
                }
            }
            // One unreadable row is reported by key; it never hides the others.
            for u in &listing.unreadable {
                if json {
                    println!("{}", serde_json::json!({"unreadable": u}));
                } else {
                    println!(
                        "{}  g{}  UNREADABLE: {}",
                        u.key,
                        u.generation.unwrap_or(0),
                        u.problem
                    );
                }
            }
            if !json {
                eprintln!("{} intent(s)", intents.len());
                if !listing.unreadable.is_empty() {
                    eprintln!(
                        "{} row(s) could not be read; run `oncegate audit verify`",
                        listing.unreadable.len()
                    );
                }
            }
            Ok(if listing.unreadable.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        IntentsCommand::Show { config, key } => {
            let registry = crate::load(&config.config)?;
            let store = crate::open_store(&registry).await?;
            match store.load(&IntentKey::from_hex(key.trim())).await? {
                Some(r) => {
                    println!("{}", serde_json::to_string_pretty(&r)?);
                    Ok(ExitCode::SUCCESS)
                }
                None => bail!("no intent {key}"),
            }
        }
    }
}
