//! How loud a log line is: one scale for the pool's events and the fleet's notes, below both.

/// How loud an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something is wrong with the setup.
    Error,
    /// The policy acted against its own preference (guard engaged, cap reached).
    Warn,
    /// A change of who takes traffic, or of a backend's health.
    Info,
    /// Detail for the curious.
    Debug,
}
