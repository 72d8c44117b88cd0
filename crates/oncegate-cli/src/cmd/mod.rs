//! One module per subcommand.

pub mod audit;
pub mod check_config;
pub mod intents;
pub mod keys;
