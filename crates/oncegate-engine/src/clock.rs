//! Clocks: the engine decides with the clock it is given, which in production is the
//! store's (`oncegate_store::clock`, where every clock is defined: the store's own clock
//! is built beside the store it reads). Re-exported here for the engine's users.

pub use oncegate_store::clock::{Clock, ManualClock, StoreClock, SystemClock, Ticks, TokioClock};
