//! `oncegate intents list|show`: what the store holds.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use oncegate_core::intent::IntentRecord;
use oncegate_core::intent::IntentState;
use oncegate_core::key::IntentKey;
use oncegate_store::{IntentFilter, IntentsRead, Listing};

use crate::registry::ConfigArg;

/// Intents read from the store at a time.
const PAGE: u32 = 500;

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
            let registry = crate::registry::load(&config.config)?;
            let store = crate::registry::open_store(&registry).await?;
            let state = match state.as_deref() {
                None => None,
                Some(s) => {
                    Some(IntentState::parse(s).with_context(|| format!("`{s}` is not a state"))?)
                }
            };
            let mut filter = IntentFilter {
                state,
                capability,
                breaker_tripped: false,
                oldest_first: false,
                updated_since: None,
                ..IntentFilter::default()
            };
            // Page by page through the store's cursor, printing as it goes: `--limit`
            // bounds what is printed, a page what is held in memory.
            let (mut listed, mut unreadable) = (0u32, 0usize);
            while listed < limit {
                filter.limit = (limit - listed).min(PAGE);
                let listing = store.list_intents(&filter).await?;
                listed += u32::try_from(listing.items.len()).unwrap_or(u32::MAX);
                unreadable += listing.unreadable.len();
                print_page(&listing, json)?;
                match listing.next {
                    Some(next) => filter.after = Some(next),
                    None => break,
                }
            }
            if !json {
                eprintln!("{listed} intent(s)");
                if unreadable > 0 {
                    eprintln!("{unreadable} row(s) could not be read; run `oncegate audit verify`");
                }
            }
            Ok(if unreadable == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        IntentsCommand::Show { config, key } => {
            let registry = crate::registry::load(&config.config)?;
            let store = crate::registry::open_store(&registry).await?;
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

/// Prints one page of the listing: the intents, then the rows that could not be read
/// (one unreadable row is reported by key; it never hides the others).
fn print_page(listing: &Listing<IntentRecord>, json: bool) -> anyhow::Result<()> {
    for r in &listing.items {
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
    Ok(())
}
