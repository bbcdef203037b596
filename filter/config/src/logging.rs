//! What upcheck writes to the host's log: how little (`log_level`) and in which form a change is
//! written (`log_format`). A module of its own because both are about the log alone, read by the
//! adapter's logger and the policy's history, and by nothing that decides.

use serde::Serialize;

/// The least severe log line upcheck writes. The host filters again by its own level (Envoy's
/// `--log-level`, NGINX's `error_log`); upcheck does not ask the host for it, since not every
/// host answers (ngx_wasm_module declares `proxy_get_log_level` unlike the SDK and does not
/// implement it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Also what upcheck is doing (configured, serving the page).
    Debug,
    /// Health changes and ejections with their reasons (the default).
    #[default]
    Info,
    /// Only what needs an operator.
    Warn,
    /// Only errors.
    Error,
    /// Nothing.
    Off,
}

/// How a change is written to the log (`log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of prose per event, with its reason (`app2 unhealthy: 1 probe answered 502`).
    #[default]
    Text,
    /// Each change as one JSON object shaped after Envoy's `HealthCheckEvent` (`type`,
    /// `backend`, `cause`, `timestamp`), for log shippers (the policy's `history::Change::json`);
    /// other events stay prose.
    Json,
}
