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

use crate::abi::{
    deserialize_map, serialize_map, BufferType, Headers, LogLevel, MapType, MetricKind, Status,
    STREAM_HTTP_REQUEST, STREAM_HTTP_RESPONSE,
};
use crate::clock::Event;
use crate::envoy::{self, Reply};
use crate::grpc::{self, Arrival};
use crate::loopback;
use crate::memory::{give, read, read_string, write, write_u32, Fault, Hostcall};
use crate::nginx;
use crate::options::Profile;
use crate::process::{CallRecord, LogLine, Metric};
use crate::state::{HostState, Intent, Phase};
use crate::upstream::Sender;
use std::time::Duration;
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

/// Envoy's hostcalls.
fn envoy_linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut l = Linker::new(engine);
    l.func_wrap(
        "env",
        "proxy_log",
        |mut c: Ctx, level: i32, ptr: i32, len: i32| status(log(&mut c, level, ptr, len)),
    )?;
    l.func_wrap("env", "proxy_get_log_level", |mut c: Ctx, ptr: i32| {
        let level = c.data().log_level as u32;
        status(write_u32(&mut c, ptr, level))
    })?;
    l.func_wrap(
        "env",
        "proxy_get_current_time_nanoseconds",
        |mut c: Ctx, ptr: i32| {
            let now = c.data().process.borrow().clock.wall_nanos();
            status(write(&mut c, ptr, &now.to_le_bytes()))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_set_tick_period_milliseconds",
        |mut c: Ctx, ms: i32| status(set_tick_period(&mut c, ms)),
    )?;
    l.func_wrap(
        "env",
        "proxy_get_buffer_bytes",
        |mut c: Ctx, kind: i32, start: i32, max: i32, ptr_ptr: i32, size_ptr: i32| {
            status(get_buffer(&mut c, kind, start, max, ptr_ptr, size_ptr))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_set_buffer_bytes",
        |mut c: Ctx, kind: i32, start: i32, size: i32, ptr: i32, len: i32| {
            status(set_buffer(&mut c, kind, start, size, ptr, len))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_get_header_map_pairs",
        |mut c: Ctx, kind: i32, ptr_ptr: i32, size_ptr: i32| {
            status(get_map_pairs(&mut c, kind, ptr_ptr, size_ptr))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_set_header_map_pairs",
        |mut c: Ctx, kind: i32, ptr: i32, len: i32| {
            status((|| {
                let pairs = deserialize_map(&read(&mut c, ptr, len)?)
                    .ok_or(Status::SerializationFailure)?;
                *map_mut(c.data_mut(), kind)? = pairs;
                Ok(())
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_get_header_map_value",
        |mut c: Ctx, kind: i32, key_ptr: i32, key_len: i32, ptr_ptr: i32, size_ptr: i32| {
            status(get_map_value(
                &mut c, kind, key_ptr, key_len, ptr_ptr, size_ptr,
            ))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        |mut c: Ctx, kind: i32, key_ptr: i32, key_len: i32, ptr: i32, len: i32| {
            status(edit_map(
                &mut c,
                kind,
                key_ptr,
                key_len,
                Some((ptr, len)),
                Edit::Replace,
            ))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_add_header_map_value",
        |mut c: Ctx, kind: i32, key_ptr: i32, key_len: i32, ptr: i32, len: i32| {
            status(edit_map(
                &mut c,
                kind,
                key_ptr,
                key_len,
                Some((ptr, len)),
                Edit::Add,
            ))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        |mut c: Ctx, kind: i32, key_ptr: i32, key_len: i32| {
            status(edit_map(&mut c, kind, key_ptr, key_len, None, Edit::Remove))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_get_property",
        |mut c: Ctx, path_ptr: i32, path_len: i32, ptr_ptr: i32, size_ptr: i32| {
            status(get_property(&mut c, path_ptr, path_len, ptr_ptr, size_ptr))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_set_property",
        |mut c: Ctx, path_ptr: i32, path_len: i32, ptr: i32, len: i32| {
            status((|| {
                let path = read(&mut c, path_ptr, path_len)?;
                let value = read(&mut c, ptr, len)?;
                let state = c.data_mut();
                state
                    .properties
                    .insert((state.effective_context, path), value);
                Ok(())
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_get_shared_data",
        |mut c: Ctx, key_ptr: i32, key_len: i32, ptr_ptr: i32, size_ptr: i32, cas_ptr: i32| {
            status((|| {
                let key = read_string(&mut c, key_ptr, key_len)?;
                let found = c.data().process.borrow().get_shared(&key).cloned();
                let (value, cas) = found.ok_or(Status::NotFound)?;
                write_u32(&mut c, cas_ptr, cas)?;
                give(&mut c, &value, ptr_ptr, size_ptr)
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_set_shared_data",
        |mut c: Ctx, key_ptr: i32, key_len: i32, ptr: i32, len: i32, cas: i32| {
            status((|| {
                let key = read_string(&mut c, key_ptr, key_len)?;
                let value = read(&mut c, ptr, len)?;
                let mut process = c.data().process.borrow_mut();
                Ok(process.set_shared(&key, value, cas as u32)?)
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_register_shared_queue",
        |mut c: Ctx, name_ptr: i32, name_len: i32, id_ptr: i32| {
            status((|| {
                let name = read_string(&mut c, name_ptr, name_len)?;
                let (vm, context) = (c.data().vm, c.data().effective_context);
                let id = c
                    .data()
                    .process
                    .borrow_mut()
                    .register_queue(&name, vm, context);
                write_u32(&mut c, id_ptr, id)
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_resolve_shared_queue",
        |mut c: Ctx, vm_ptr: i32, vm_len: i32, name_ptr: i32, name_len: i32, id_ptr: i32| {
            status((|| {
                let vm_id = read_string(&mut c, vm_ptr, vm_len)?;
                let name = read_string(&mut c, name_ptr, name_len)?;
                let id = (vm_id == envoy::PLUGIN)
                    .then(|| c.data().process.borrow().resolve_queue(&name))
                    .flatten()
                    .ok_or(Status::NotFound)?;
                write_u32(&mut c, id_ptr, id)
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_dequeue_shared_queue",
        |mut c: Ctx, id: i32, ptr_ptr: i32, size_ptr: i32| {
            status((|| {
                let value = c.data().process.borrow_mut().dequeue(id as u32)?;
                give(&mut c, &value, ptr_ptr, size_ptr)
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_enqueue_shared_queue",
        |mut c: Ctx, id: i32, ptr: i32, len: i32| {
            status((|| {
                let value = read(&mut c, ptr, len)?;
                Ok(c.data().process.borrow_mut().enqueue(id as u32, value)?)
            })())
        },
    )?;
    l.func_wrap("env", "proxy_continue_stream", |mut c: Ctx, kind: i32| {
        status(stream_intent(&mut c, kind, Intent::Continue))
    })?;
    l.func_wrap("env", "proxy_close_stream", |mut c: Ctx, kind: i32| {
        status(stream_intent(&mut c, kind, Intent::Reset))
    })?;
    l.func_wrap(
        "env",
        "proxy_send_local_response",
        |mut c: Ctx,
         code: i32,
         details_ptr: i32,
         details_len: i32,
         body_ptr: i32,
         body_len: i32,
         headers_ptr: i32,
         headers_len: i32,
         _grpc_status: i32| {
            status((|| {
                let details = read_string(&mut c, details_ptr, details_len)?;
                let body = read_string(&mut c, body_ptr, body_len)?;
                let headers = deserialize_map(&read(&mut c, headers_ptr, headers_len)?)
                    .ok_or(Status::SerializationFailure)?;
                let code = u16::try_from(code).map_err(|_| Status::BadArgument)?;
                let state = c.data_mut();
                let context = state.effective_context;
                state.stream().ok_or(Status::BadArgument)?;
                let reply = Reply::local(code, &details, &body, headers);
                state.intents.push_back(Intent::LocalReply(context, reply));
                Ok(())
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_http_call",
        |mut c: Ctx,
         up_ptr: i32,
         up_len: i32,
         headers_ptr: i32,
         headers_len: i32,
         body_ptr: i32,
         body_len: i32,
         trailers_ptr: i32,
         trailers_len: i32,
         timeout_ms: i32,
         token_ptr: i32| {
            status((|| {
                let cluster = read_string(&mut c, up_ptr, up_len)?;
                let headers = deserialize_map(&read(&mut c, headers_ptr, headers_len)?)
                    .ok_or(Status::SerializationFailure)?;
                let body = read(&mut c, body_ptr, body_len)?;
                read(&mut c, trailers_ptr, trailers_len)?;
                write_u32(&mut c, token_ptr, 0)?;
                let timeout = Duration::from_millis(u64::from(timeout_ms as u32));
                let token = http_call(c.data(), &cluster, &headers, body, timeout)?;
                write_u32(&mut c, token_ptr, token)
            })())
        },
    )?;
    // Unary gRPC calls are not emulated: they fail the way the SDK expects a failed call to.
    l.func_wrap(
        "env",
        "proxy_grpc_call",
        |_: Ctx,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32| { status(Err(Status::InternalFailure.into())) },
    )?;
    l.func_wrap(
        "env",
        "proxy_grpc_stream",
        |mut c: Ctx,
         cluster_ptr: i32,
         cluster_len: i32,
         service_ptr: i32,
         service_len: i32,
         method_ptr: i32,
         method_len: i32,
         metadata_ptr: i32,
         metadata_len: i32,
         token_ptr: i32| {
            status((|| {
                let cluster = read_string(&mut c, cluster_ptr, cluster_len)?;
                let service = read_string(&mut c, service_ptr, service_len)?;
                let method = read_string(&mut c, method_ptr, method_len)?;
                let metadata = deserialize_map(&read(&mut c, metadata_ptr, metadata_len)?)
                    .ok_or(Status::SerializationFailure)?;
                write_u32(&mut c, token_ptr, 0)?;
                let token = grpc_stream(c.data(), &cluster, &service, &method, &metadata)?;
                write_u32(&mut c, token_ptr, token)
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_grpc_send",
        |mut c: Ctx, token: i32, ptr: i32, len: i32, end_of_stream: i32| {
            status((|| {
                let message = read(&mut c, ptr, len)?;
                let state = c.data();
                let mut process = state.process.borrow_mut();
                let (vm, context, token) = (state.vm, state.effective_context, token as u32);
                Ok(process
                    .grpc
                    .send(vm, context, token, &message, end_of_stream != 0)?)
            })())
        },
    )?;
    // Ending a stream: at once (cancel), or by closing this side (close).
    type End = fn(&mut grpc::Streams, usize, u32, u32) -> Result<(), Status>;
    let ends: [(&str, End); 2] = [
        ("proxy_grpc_cancel", grpc::Streams::cancel),
        ("proxy_grpc_close", grpc::Streams::close),
    ];
    for (name, end) in ends {
        l.func_wrap("env", name, move |c: Ctx, token: i32| {
            let state = c.data();
            let mut process = state.process.borrow_mut();
            let (vm, context) = (state.vm, state.effective_context);
            status(end(&mut process.grpc, vm, context, token as u32).map_err(Fault::from))
        })?;
    }
    l.func_wrap(
        "env",
        "proxy_get_status",
        |mut c: Ctx, code_ptr: i32, ptr_ptr: i32, size_ptr: i32| {
            status((|| {
                // Envoy's status is that of the gRPC close being delivered, else 0 and nothing.
                let (code, message) = match &c.data().grpc_arrival {
                    Some(Arrival::Close { status, message }) => (*status, message.clone()),
                    _ => (0, String::new()),
                };
                write_u32(&mut c, code_ptr, code)?;
                give(&mut c, message.as_bytes(), ptr_ptr, size_ptr)
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_set_effective_context",
        |mut c: Ctx, context: i32| {
            let state = c.data_mut();
            if state.profile == Profile::Nginx {
                return status(Ok(())); // ngx_wasm_module: does nothing
            }
            let context = context as u32;
            let known = state.is_root(context) || state.streams.contains_key(&context);
            if known {
                state.effective_context = context;
            }
            status(if known {
                Ok(())
            } else {
                Err(Status::BadArgument.into())
            })
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_call_foreign_function",
        |_: Ctx, _: i32, _: i32, _: i32, _: i32, _: i32, _: i32| {
            status(Err(Status::NotFound.into()))
        },
    )?;
    l.func_wrap("env", "proxy_done", |_: Ctx| status(Ok(())))?;
    l.func_wrap(
        "env",
        "proxy_define_metric",
        |mut c: Ctx, kind: i32, name_ptr: i32, name_len: i32, id_ptr: i32| {
            status((|| {
                let kind = MetricKind::from_raw(kind).ok_or(Status::BadArgument)?;
                let name = read_string(&mut c, name_ptr, name_len)?;
                let id = define_metric(c.data_mut(), kind, name);
                write_u32(&mut c, id_ptr, id)
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_get_metric",
        |mut c: Ctx, id: i32, ptr: i32| {
            status((|| {
                let value = with_metric(c.data(), id, |metric| match metric.kind {
                    MetricKind::Histogram => Err(Status::BadArgument),
                    _ => Ok(metric.value),
                })?;
                write(&mut c, ptr, &value.to_le_bytes())
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_record_metric",
        |c: Ctx, id: i32, value: i64| {
            let value = value as u64;
            if c.data().profile == Profile::Nginx {
                status(nginx_metric(
                    c.data(),
                    id,
                    MetricKind::Counter,
                    "is a counter",
                ))?;
            }
            status(with_metric(c.data(), id, |metric| {
                match metric.kind {
                    MetricKind::Counter => metric.value = metric.value.saturating_add(value),
                    MetricKind::Gauge => metric.value = value,
                    MetricKind::Histogram => metric.samples.push(value),
                }
                Ok(())
            }))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_increment_metric",
        |c: Ctx, id: i32, offset: i64| {
            if c.data().profile == Profile::Nginx {
                status(nginx_metric(
                    c.data(),
                    id,
                    MetricKind::Gauge,
                    "not a counter",
                ))?;
            }
            status(with_metric(c.data(), id, |metric| {
                let magnitude = offset.unsigned_abs();
                match (metric.kind, offset > 0) {
                    (MetricKind::Counter, true) | (MetricKind::Gauge, true) => {
                        metric.value = metric.value.saturating_add(magnitude)
                    }
                    (MetricKind::Gauge, false) => {
                        metric.value = metric.value.saturating_sub(magnitude)
                    }
                    _ => return Err(Status::BadArgument),
                }
                Ok(())
            }))
        },
    )?;
    wasi(&mut l)?;
    Ok(l)
}

/// The WASI preview1 calls `std` may pull in; time and randomness are virtual and deterministic.
fn wasi(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
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

fn push_log(state: &HostState, level: LogLevel, message: String) {
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

/// Envoy arms the tick timer when a period is first set and re-arms it after every tick; a new
/// period takes effect from the next tick, and period 0 stops ticking after the pending one.
/// Only the users' listener's root context ticks here: a tick set by another listener's plugin
/// traps, loudly, rather than being mixed up with it.
fn set_tick_period(c: &mut Ctx, ms: i32) -> Hostcall {
    let state = c.data_mut();
    if state.listener_roots.contains(&state.effective_context) {
        return Err(Fault::Trap(wasmtime::Error::msg(format!(
            "not emulated by this host: a tick period set by root context {} (only the users' \
             listener's plugin ticks)",
            state.effective_context
        ))));
    }
    let period = Duration::from_millis(u64::from(ms as u32));
    if state.profile == Profile::Nginx && !period.is_zero() && !state.tick_period.is_zero() {
        return trap("tick_period already set".to_string());
    }
    state.tick_period = period;
    if !state.tick_period.is_zero() && !state.tick_scheduled {
        state.tick_scheduled = true;
        let event = Event::Tick { vm: state.vm };
        state
            .process
            .borrow_mut()
            .clock
            .schedule(state.tick_period, event);
    }
    Ok(())
}

fn get_buffer(
    c: &mut Ctx,
    kind: i32,
    start: i32,
    max: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> Hostcall {
    let kind = BufferType::from_raw(kind).ok_or(Status::BadArgument)?;
    let state = c.data();
    let buffer = match kind {
        BufferType::ResponseBody => state.stream().and_then(|s| s.response_body.as_ref()),
        BufferType::CallResponseBody => state.call_response.as_ref().map(|r| &r.body),
        BufferType::GrpcReceive => match &state.grpc_arrival {
            Some(Arrival::Message(message)) => Some(message),
            _ => None,
        },
        BufferType::VmConfiguration | BufferType::PluginConfiguration => state
            .configuration
            .as_ref()
            .filter(|(which, _)| *which == kind)
            .map(|(_, bytes)| bytes),
        BufferType::Absent => None,
    }
    .ok_or(Status::NotFound)?;
    let start = (start as u32 as usize).min(buffer.len());
    let end = start.saturating_add(max as u32 as usize).min(buffer.len());
    let bytes = buffer[start..end].to_vec();
    give(c, &bytes, ptr_ptr, size_ptr)
}

fn set_buffer(c: &mut Ctx, kind: i32, start: i32, size: i32, ptr: i32, len: i32) -> Hostcall {
    let kind = BufferType::from_raw(kind).ok_or(Status::BadArgument)?;
    let bytes = read(c, ptr, len)?;
    let body = match kind {
        BufferType::ResponseBody => c
            .data_mut()
            .stream_mut()
            .and_then(|s| s.response_body.as_mut()),
        _ => None,
    }
    .ok_or(Status::NotFound)?;
    let start = (start as u32 as usize).min(body.len());
    let end = start.saturating_add(size as u32 as usize).min(body.len());
    body.splice(start..end, bytes);
    Ok(())
}

/// Header map `kind` of the effective context.
fn map(state: &HostState, kind: i32) -> Hostcall<&Headers> {
    const NO_TRAILERS: &Headers = &Vec::new();
    let kind = MapType::from_raw(kind).ok_or(Status::BadArgument)?;
    let stream = state.stream();
    let found = match kind {
        MapType::RequestHeaders => stream.map(|s| &s.request_headers),
        MapType::ResponseHeaders => stream.and_then(|s| s.response_headers.as_ref()),
        MapType::CallResponseHeaders => state.call_response.as_ref().map(|r| &r.headers),
        MapType::CallResponseTrailers => state.call_response.as_ref().map(|_| NO_TRAILERS),
        MapType::GrpcInitialMetadata => match &state.grpc_arrival {
            Some(Arrival::InitialMetadata(metadata)) => Some(metadata),
            _ => None,
        },
        MapType::GrpcTrailingMetadata => match &state.grpc_arrival {
            Some(Arrival::TrailingMetadata(metadata)) => Some(metadata),
            _ => None,
        },
        MapType::Absent => None,
    };
    // Envoy: a map that does not exist (yet) is BadArgument, except while logging (NotFound).
    let logging = stream.is_some_and(|s| s.phase == Phase::Logging);
    let missing = if logging {
        Status::NotFound
    } else {
        Status::BadArgument
    };
    Ok(found.ok_or(missing)?)
}

/// Header map `kind` of the effective context, for changing it.
fn map_mut(state: &mut HostState, kind: i32) -> Hostcall<&mut Headers> {
    let kind = MapType::from_raw(kind).ok_or(Status::BadArgument)?;
    let found = match kind {
        MapType::RequestHeaders => state.stream_mut().map(|s| &mut s.request_headers),
        MapType::ResponseHeaders => state.stream_mut().and_then(|s| s.response_headers.as_mut()),
        MapType::CallResponseHeaders => state.call_response.as_mut().map(|r| &mut r.headers),
        MapType::CallResponseTrailers
        | MapType::GrpcInitialMetadata
        | MapType::GrpcTrailingMetadata
        | MapType::Absent => None,
    };
    Ok(found.ok_or(Status::BadArgument)?)
}

fn get_map_pairs(c: &mut Ctx, kind: i32, ptr_ptr: i32, size_ptr: i32) -> Hostcall {
    let bytes = serialize_map(map(c.data(), kind)?);
    give(c, &bytes, ptr_ptr, size_ptr)
}

fn get_map_value(
    c: &mut Ctx,
    kind: i32,
    key_ptr: i32,
    key_len: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> Hostcall {
    let key = read_string(c, key_ptr, key_len)?.to_ascii_lowercase();
    let state = c.data();
    if state.profile == Profile::Nginx && key == ":dispatch_status" {
        if let (Some(MapType::CallResponseHeaders), Some(reply)) =
            (MapType::from_raw(kind), state.call_response.as_ref())
        {
            let why = reply.dispatch_status.unwrap_or("ok");
            return give(c, why.as_bytes(), ptr_ptr, size_ptr);
        }
    }
    let value = map(c.data(), kind)?
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, value)| value.clone())
        .ok_or(Status::NotFound)?;
    give(c, value.as_bytes(), ptr_ptr, size_ptr)
}

enum Edit {
    Add,
    Replace,
    Remove,
}

fn edit_map(
    c: &mut Ctx,
    kind: i32,
    key_ptr: i32,
    key_len: i32,
    value: Option<(i32, i32)>,
    edit: Edit,
) -> Hostcall {
    let key = read_string(c, key_ptr, key_len)?.to_ascii_lowercase();
    let value = match value {
        Some((ptr, len)) => read_string(c, ptr, len)?,
        None => String::new(),
    };
    let headers = map_mut(c.data_mut(), kind)?;
    match edit {
        Edit::Add => headers.push((key, value)),
        Edit::Remove => headers.retain(|(name, _)| *name != key),
        Edit::Replace => match headers.iter().position(|(name, _)| *name == key) {
            Some(first) => {
                headers[first].1 = value;
                let mut index = 0;
                headers.retain(|(name, _)| {
                    index += 1;
                    index - 1 == first || *name != key
                });
            }
            None => headers.push((key, value)),
        },
    }
    Ok(())
}

fn get_property(
    c: &mut Ctx,
    path_ptr: i32,
    path_len: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> Hostcall {
    let raw = read(c, path_ptr, path_len)?;
    let state = c.data();
    // Most guests never set a property: no key to build and hash then.
    let set = if state.properties.is_empty() {
        None
    } else {
        state
            .properties
            .get(&(state.effective_context, raw.clone()))
    };
    let value = match set {
        Some(value) => Some(value.clone()),
        None => {
            let text = String::from_utf8_lossy(&raw);
            let path: Vec<&str> = text.split('\0').collect();
            let stream = state.stream().map(|s| (&s.info, &s.request_headers));
            let known = state.profile == Profile::Envoy || nginx::has_property(&path);
            known.then(|| envoy::property(&path, stream)).flatten()
        }
    };
    give(c, &value.ok_or(Status::NotFound)?, ptr_ptr, size_ptr)
}

/// `proxy_continue_stream` / `proxy_close_stream`: only HTTP request/response streams exist here.
fn stream_intent(c: &mut Ctx, kind: i32, intent: fn(u32) -> Intent) -> Hostcall {
    let state = c.data_mut();
    let context = state.effective_context;
    if state.profile == Profile::Nginx && state.is_root(context) {
        // ngx_wasm_module resumes the root context's own (background) request: nothing.
        return Ok(());
    }
    state.stream().ok_or(Status::BadArgument)?;
    match kind {
        STREAM_HTTP_REQUEST => state.intents.push_back(intent(context)),
        // Responses are never paused by this host (it fails a test that tries), so continuing
        // one is a no-op; closing it resets the stream like closing the request.
        STREAM_HTTP_RESPONSE => {
            if let Intent::Reset(_) = intent(context) {
                state.intents.push_back(intent(context));
            }
        }
        _ => return Err(Status::BadArgument.into()),
    }
    Ok(())
}

/// Dispatches an http call: checks it as Envoy does, counts it at the upstream, and schedules its
/// answer (the backend's, or Envoy's 503/504) on the agenda; or, to a real server's cluster,
/// sends it there ([`crate::loopback`]).
fn http_call(
    state: &HostState,
    cluster: &str,
    headers: &Headers,
    body: Vec<u8>,
    timeout: Duration,
) -> Hostcall<u32> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let nginx = state.profile == Profile::Nginx;
    if nginx && !nginx::DISPATCH_STEPS.contains(&state.callback.as_str()) {
        return trap(format!(
            "can only send HTTP dispatch during {:?}, not {}",
            nginx::DISPATCH_STEPS,
            state.callback
        ));
    }
    let path = header(":path");
    if nginx && (path.is_none() || header(":method").is_none()) {
        return trap("dispatch failed: no :method or :path".to_string());
    }
    let (Some(path), Some(_), Some(_)) = (path, header(":method"), header(":authority")) else {
        return Err(Status::BadArgument.into());
    };
    let mut process = state.process.borrow_mut();
    let now = process.clock.now();
    let wall = process.clock.wall_nanos();
    let timeout = (!timeout.is_zero()).then_some(timeout);
    let token = process.next_token();
    if !nginx && process.loopback.address(cluster).is_some() {
        process.loopback.send(loopback::Call {
            token,
            vm: state.vm,
            context: state.effective_context,
            cluster,
            headers,
            body,
            timeout,
            now,
        });
        process.calls.push(CallRecord {
            token,
            vm: state.vm,
            context: state.effective_context,
            from_request: !state.is_root(state.effective_context),
            cluster: cluster.to_string(),
            path: path.to_string(),
            sent: now,
            status: None,
            details: String::new(),
            delivered: None,
        });
        return Ok(token);
    }
    let (cluster, exchange) = if nginx {
        // ngx_wasm_module connects to the `host:port` it is given.
        let found = process
            .upstreams
            .iter_mut()
            .find(|(_, u)| u.address == cluster);
        match found {
            Some((name, upstream)) => {
                let behaviour = upstream.receive(Sender::Probe, path, now);
                let exchange = nginx::dispatch(behaviour, timeout, name, wall);
                (name.clone(), exchange)
            }
            None => (cluster.to_string(), Some(nginx::unresolved())),
        }
    } else {
        let behaviour = process
            .upstreams
            .get_mut(cluster)
            .ok_or(Status::BadArgument)?
            .receive(Sender::Probe, path, now);
        (
            cluster.to_string(),
            envoy::exchange(behaviour, timeout, cluster, wall),
        )
    };
    process.calls.push(CallRecord {
        token,
        vm: state.vm,
        context: state.effective_context,
        from_request: !state.is_root(state.effective_context),
        cluster,
        path: path.to_string(),
        sent: now,
        status: exchange.as_ref().map(|(_, reply)| reply.status),
        details: exchange
            .as_ref()
            .map(|(_, reply)| reply.details.clone())
            .unwrap_or_default(),
        delivered: None,
    });
    if let Some((after, reply)) = exchange {
        let (vm, context) = (state.vm, state.effective_context);
        let event = Event::CallResponse {
            vm,
            context,
            token,
            reply,
        };
        process.clock.schedule(after, event);
    }
    Ok(token)
}

/// Opens a gRPC stream as Envoy does for a cluster named in place of a `GrpcService`, to a real
/// server's cluster; [`crate::grpc`] says what the other names get, and why.
fn grpc_stream(
    state: &HostState,
    cluster: &str,
    service: &str,
    method: &str,
    metadata: &Headers,
) -> Hostcall<u32> {
    let mut process = state.process.borrow_mut();
    let Some(address) = process.loopback.address(cluster) else {
        let scripted = process.upstreams.contains_key(cluster);
        let status = if scripted {
            Status::InternalFailure
        } else {
            Status::ParseFailure
        };
        return Err(status.into());
    };
    let now = process.clock.now();
    let token = process.next_token();
    process.grpc.open(grpc::Opening {
        token,
        vm: state.vm,
        context: state.effective_context,
        cluster,
        address,
        service,
        method,
        metadata,
        now,
    })?;
    Ok(token)
}

/// The id of metric `name` in this VM (defining it process-wide on first use).
fn define_metric(state: &mut HostState, kind: MetricKind, name: String) -> u32 {
    let index = match state.metric_names.iter().position(|known| *known == name) {
        Some(index) => index,
        None => {
            state.metric_names.push(name.clone());
            state.metric_names.len() - 1
        }
    };
    let mut process = state.process.borrow_mut();
    process.metrics.entry(name).or_insert(Metric {
        kind,
        value: 0,
        samples: Vec::new(),
    });
    index as u32
}

/// Applies `f` to the process-wide stat behind this VM's metric `id`.
fn with_metric<T>(
    state: &HostState,
    id: i32,
    f: impl FnOnce(&mut Metric) -> Result<T, Status>,
) -> Hostcall<T> {
    let name = state
        .metric_names
        .get(id as u32 as usize)
        .ok_or(Status::NotFound)?;
    let mut process = state.process.borrow_mut();
    let metric = process.metrics.get_mut(name).ok_or(Status::NotFound)?;
    Ok(f(metric)?)
}

/// ngx_wasm_module's check before using metric `id`: one of kind `refused` (or no metric at
/// all) traps, with its message.
fn nginx_metric(state: &HostState, id: i32, refused: MetricKind, why: &str) -> Hostcall {
    let kind = with_metric(state, id, |metric| Ok(metric.kind)).ok();
    match kind {
        Some(kind) if kind != refused => Ok(()),
        Some(_) => trap(format!("could not use metric id \"{id}\": metric {why}")),
        None => trap(format!(
            "could not use metric id \"{id}\": metric not found"
        )),
    }
}
