//! Log lines go to the host's log, from the configuration's `log_level` up.
//!
//! The SDK's own logger unwraps the result of every `proxy_log` call (and its panic hook does
//! too), so a host that ever refused a log line would kill the VM. This one drops such a line
//! instead. It does not ask the host for its level: ngx_wasm_module declares
//! `proxy_get_log_level` with another signature than the SDK's, so a module importing it does
//! not even load there. The host filters the lines again by its own level.

use crate::abi::HostLogLevel;
use crate::hostcall as hostcalls;
use upcheck_policy::config;

struct HostLog;

static LOGGER: HostLog = HostLog;

impl log::Log for HostLog {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            log::Level::Error => HostLogLevel::Error,
            log::Level::Warn => HostLogLevel::Warn,
            log::Level::Info => HostLogLevel::Info,
            log::Level::Debug => HostLogLevel::Debug,
            log::Level::Trace => HostLogLevel::Trace,
        };
        let _ = hostcalls::log(level, &record.args().to_string());
    }

    fn flush(&self) {}
}

/// Installs the logger (once per VM), at info until a configuration says otherwise, and a
/// panic hook that reports a panic before the VM dies.
pub fn install() {
    if log::set_logger(&LOGGER).is_err() {
        return; // already installed in this VM
    }
    std::panic::set_hook(Box::new(|panic| {
        let _ = hostcalls::log(HostLogLevel::Critical, &format!("upcheck: {panic}"));
    }));
    log::set_max_level(log::LevelFilter::Info);
}

/// Logs from `level` up.
pub fn set_level(level: config::LogLevel) {
    log::set_max_level(match level {
        config::LogLevel::Trace => log::LevelFilter::Trace,
        config::LogLevel::Debug => log::LevelFilter::Debug,
        config::LogLevel::Info => log::LevelFilter::Info,
        config::LogLevel::Warn => log::LevelFilter::Warn,
        config::LogLevel::Error => log::LevelFilter::Error,
        config::LogLevel::Off => log::LevelFilter::Off,
    });
}

/// Logs that a callback found what it needs (`held`: the root contexts, the stream contexts,
/// the VM state) in use by another, so that it skipped its work or, making context `made`, did
/// not make it. Never the case in a single-threaded VM: out of line, so that the callbacks'
/// common way sets up nothing for the line.
#[cold]
#[inline(never)]
pub fn busy(held: &str, made: Option<u32>) {
    match made {
        Some(context) => log::error!("upcheck: {held} busy; context {context} not made"),
        None => log::error!("upcheck: {held} busy; callback skipped"),
    }
}
