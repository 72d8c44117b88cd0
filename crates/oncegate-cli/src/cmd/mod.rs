//! One module per subcommand.

pub mod approvals;
pub mod audit;
pub mod bench;
pub mod check_config;
pub mod connect;
pub mod demo;
pub mod detect;
pub mod doubts;
pub mod holds;
pub mod init;
pub mod intents;
pub mod keys;
pub mod limits;
pub mod migrate;
pub mod sandbox;
pub mod serve;
pub mod tools;
pub mod verify;
