//! Log lines go to the host's log, at the level the host runs at.
//!
//! The SDK's own logger unwraps the result of every `proxy_log` call (and its panic hook does
//! too), so a host that ever refused a log line would kill the VM. This one drops such a line
//! instead, and takes its level from the host (`envoy --log-level debug` shows upcheck's debug
//! lines too).

use proxy_wasm::hostcalls;
use proxy_wasm::types::LogLevel;

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
            log::Level::Error => LogLevel::Error,
            log::Level::Warn => LogLevel::Warn,
            log::Level::Info => LogLevel::Info,
            log::Level::Debug => LogLevel::Debug,
            log::Level::Trace => LogLevel::Trace,
        };
        let _ = hostcalls::log(level, &record.args().to_string());
    }

    fn flush(&self) {}
}

/// Installs the logger (once per VM) and a panic hook that reports a panic before the VM dies.
pub fn install() {
    if log::set_logger(&LOGGER).is_err() {
        return; // already installed in this VM
    }
    std::panic::set_hook(Box::new(|panic| {
        let _ = hostcalls::log(LogLevel::Critical, &format!("upcheck: {panic}"));
    }));
    follow_host_level();
}

/// Logs at the level the host runs at (info if it does not say).
pub fn follow_host_level() {
    let level = match hostcalls::get_log_level() {
        Ok(LogLevel::Trace) => log::LevelFilter::Trace,
        Ok(LogLevel::Debug) => log::LevelFilter::Debug,
        Ok(LogLevel::Warn) => log::LevelFilter::Warn,
        Ok(LogLevel::Error) => log::LevelFilter::Error,
        Ok(LogLevel::Critical) => log::LevelFilter::Off,
        Ok(LogLevel::Info) | Err(_) => log::LevelFilter::Info,
    };
    log::set_max_level(level);
}
