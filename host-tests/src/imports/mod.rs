//! The hostcalls: every `env` import the proxy-wasm Rust SDK 0.2.5 can emit (ABI 0.2.1), plus the
//! few WASI calls a Rust toolchain may emit. Anything else fails at link time, loudly.
//!
//! Statuses are the ones Envoy returns and the SDK accepts (`hostcalls.rs`): a missing header,
//! property, shared-data key or buffer is NotFound (the SDK turns it into `None`); a header map
//! that does not exist in the current callback is BadArgument (NotFound while logging), as in
//! Envoy's `Context::getHeaderMapValue`; an unknown cluster or a call without `:authority`,
//! `:path` or `:method` is BadArgument at once, a gRPC stream to an unknown cluster
//! ParseFailure; a stale CAS is CasMismatch. Guest pointers go through `memory`, so a bad one is
//! InvalidMemoryAccess. gRPC streams are [`crate::grpc`]'s.
//!
//! One submodule per ABI area adds its hostcalls to the linker; the helpers every area uses (a
//! hostcall's status, WASI's errno, a trap) are here.

mod buffers;
mod grpc;
mod headers;
mod http_call;
mod log;
mod metrics;
mod properties;
mod shared;
mod streams;
mod time;
mod wasi;

use crate::abi::Status;
use crate::memory::{Fault, Hostcall};
use crate::nginx;
use crate::options::Profile;
use crate::state::HostState;
use wasmtime::{Caller, Engine, FuncType, Linker, Val, ValType};

type Ctx<'a> = Caller<'a, HostState>;

/// The status a hostcall returns to the guest; a trap ends the guest call instead.
fn status(result: Hostcall) -> wasmtime::Result<i32> {
    match result {
        Ok(()) => Ok(Status::Ok as i32),
        Err(Fault::Status(status)) => Ok(status as i32),
        Err(Fault::Trap(error)) => Err(error),
    }
}

/// The WASI errno of a call: 0, or EFAULT (21) for a bad guest pointer.
fn errno(result: Hostcall) -> wasmtime::Result<i32> {
    match result {
        Ok(()) => Ok(0),
        Err(Fault::Status(_)) => Ok(21),
        Err(Fault::Trap(error)) => Err(error),
    }
}

/// A trap with `message`, as a host that refuses a call by trapping does.
fn trap<T>(message: String) -> Hostcall<T> {
    Err(Fault::Trap(wasmtime::Error::msg(message)))
}

/// A linker with every hostcall of `profile`; instances of any VM of the host link against it.
pub(crate) fn linker(engine: &Engine, profile: Profile) -> wasmtime::Result<Linker<HostState>> {
    let mut l = envoy_linker(engine)?;
    if profile == Profile::Nginx {
        nginx_imports(&mut l)?;
    }
    Ok(l)
}

/// What ngx_wasm_module declares otherwise than Envoy: `proxy_get_log_level` with two
/// parameters (a module importing the SDK's one-parameter form does not link), and the calls it
/// does not implement, which trap.
fn nginx_imports(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    l.allow_shadowing(true);
    let engine = l.engine().clone();
    let not_implemented = |name: &str, params: usize| {
        let ty = FuncType::new(
            &engine,
            std::iter::repeat_n(ValType::I32, params),
            [ValType::I32],
        );
        let name = name.to_string();
        (
            ty,
            move |_: Ctx, _: &[Val], _: &mut [Val]| -> wasmtime::Result<()> {
                wasmtime::bail!("host trap (function not yet implemented): {name}")
            },
        )
    };
    let (ty, f) = not_implemented("proxy_get_log_level", nginx::LOG_LEVEL_ARITY);
    l.func_new("env", "proxy_get_log_level", ty, f)?;
    for (name, params) in nginx::NOT_IMPLEMENTED {
        let (ty, f) = not_implemented(name, params);
        l.func_new("env", name, ty, f)?;
    }
    l.allow_shadowing(false);
    Ok(())
}

/// Envoy's hostcalls, by ABI area.
fn envoy_linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut l = Linker::new(engine);
    log::add(&mut l)?;
    time::add(&mut l)?;
    buffers::add(&mut l)?;
    headers::add(&mut l)?;
    properties::add(&mut l)?;
    shared::add(&mut l)?;
    streams::add(&mut l)?;
    http_call::add(&mut l)?;
    grpc::add(&mut l)?;
    // This host offers no foreign function: every name is NotFound.
    l.func_wrap(
        "env",
        "proxy_call_foreign_function",
        |_: Ctx, _: i32, _: i32, _: i32, _: i32, _: i32, _: i32| {
            status(Err(Status::NotFound.into()))
        },
    )?;
    metrics::add(&mut l)?;
    wasi::add(&mut l)?;
    Ok(l)
}
