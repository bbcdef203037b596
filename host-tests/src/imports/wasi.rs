//! The WASI preview1 calls `std` may pull in; time and randomness are virtual and
//! deterministic, and what is written to stdout or stderr becomes log lines.

use super::log::push_log;
use super::{errno, Ctx};
use crate::abi::{LogLevel, Status};
use crate::memory::{read, write, write_u32};
use crate::state::HostState;
use wasmtime::Linker;

/// The WASI calls.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    const WASI: &str = "wasi_snapshot_preview1";
    l.func_wrap(
        WASI,
        "fd_write",
        |mut c: Ctx, fd: i32, iovs: i32, count: i32, written_ptr: i32| {
            errno((|| {
                let level = match fd {
                    1 => LogLevel::Info,
                    2 => LogLevel::Error,
                    _ => return Err(Status::BadArgument.into()),
                };
                let mut text = Vec::new();
                for i in 0..count.max(0) {
                    let iov = read(&mut c, iovs.wrapping_add(i.wrapping_mul(8)), 8)?;
                    let word = |at: usize| {
                        i32::from_le_bytes([iov[at], iov[at + 1], iov[at + 2], iov[at + 3]])
                    };
                    text.extend(read(&mut c, word(0), word(4))?);
                }
                write_u32(&mut c, written_ptr, text.len() as u32)?;
                let message = String::from_utf8_lossy(&text).trim_end().to_string();
                push_log(c.data(), level, message);
                Ok(())
            })())
        },
    )?;
    l.func_wrap(
        WASI,
        "clock_time_get",
        |mut c: Ctx, clock: i32, _precision: i64, ptr: i32| {
            let clock_now = {
                let process = c.data().process.borrow();
                match clock {
                    0 => process.clock.wall_nanos(),
                    _ => process.clock.now().as_nanos() as u64,
                }
            };
            errno(write(&mut c, ptr, &clock_now.to_le_bytes()))
        },
    )?;
    l.func_wrap(WASI, "random_get", |mut c: Ctx, ptr: i32, len: i32| {
        let bytes: Vec<u8> = (0..len.max(0))
            .map(|_| {
                // xorshift64: reproducible across runs, which is the point here.
                let state = &mut c.data_mut().random;
                *state ^= *state << 13;
                *state ^= *state >> 7;
                *state ^= *state << 17;
                *state as u8
            })
            .collect();
        errno(write(&mut c, ptr, &bytes))
    })?;
    l.func_wrap(
        WASI,
        "environ_sizes_get",
        |mut c: Ctx, count_ptr: i32, size_ptr: i32| {
            errno(write_u32(&mut c, count_ptr, 0).and_then(|()| write_u32(&mut c, size_ptr, 0)))
        },
    )?;
    l.func_wrap(WASI, "environ_get", |_: Ctx, _: i32, _: i32| errno(Ok(())))?;
    l.func_wrap(
        WASI,
        "proc_exit",
        |_: Ctx, code: i32| -> wasmtime::Result<()> {
            wasmtime::bail!("the guest called proc_exit({code})")
        },
    )?;
    Ok(())
}
