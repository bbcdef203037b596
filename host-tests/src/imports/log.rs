//! Log lines: `proxy_log` into the process's log, and the level the host reports. Every line
//! is kept whatever the level, so a test (or a failing one's output) can read why a guest did
//! what it did.

use super::{status, Ctx};
use crate::abi::{LogLevel, Status};
use crate::memory::{read_string, write_u32, Hostcall};
use crate::process::LogLine;
use crate::state::HostState;
use wasmtime::Linker;

/// The hostcalls of logging.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    l.func_wrap(
        "env",
        "proxy_log",
        |mut c: Ctx, level: i32, ptr: i32, len: i32| status(log(&mut c, level, ptr, len)),
    )?;
    l.func_wrap("env", "proxy_get_log_level", |mut c: Ctx, ptr: i32| {
        let level = c.data().log_level as u32;
        status(write_u32(&mut c, ptr, level))
    })?;
    Ok(())
}

/// Appends a line from the VM of `state` to the process's log, at the virtual clock's time.
pub(super) fn push_log(state: &HostState, level: LogLevel, message: String) {
    let mut process = state.process.borrow_mut();
    let at = process.clock.now();
    process.logs.push(LogLine {
        at,
        vm: state.vm,
        level,
        message,
    });
}

fn log(c: &mut Ctx, level: i32, ptr: i32, len: i32) -> Hostcall {
    let level = LogLevel::from_raw(level).ok_or(Status::BadArgument)?;
    let message = read_string(c, ptr, len)?;
    push_log(c.data(), level, message);
    Ok(())
}
