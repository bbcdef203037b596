//! What a fake backend does with the requests it gets, and when that changes: the grammar the
//! CLI's scenarios read too, stated once in [`upcheck_cli::mode`] and used here as it is.

pub use upcheck_cli::mode::{Answer, DrainSignal, Mode, ModeError, Schedule, Switch, PROBE_PATH};
