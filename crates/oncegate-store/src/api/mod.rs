//! The store API, cut by table: one read/write trait pair per concern, each with the
//! row types it reads and writes. [`crate::Backend`] is all of them.

pub(crate) mod audit;
pub(crate) mod finding;
pub(crate) mod intents;
pub(crate) mod limits;
pub(crate) mod page;
pub(crate) mod pins;
pub(crate) mod shared;
