//! gRPC from the guest: unary calls, answered by scripted upstreams ([`grpc::call_answer`]), and
//! streams, opened to a real server's cluster and run by [`crate::grpc`]; sending, closing,
//! cancelling, and the status a close is delivered with.

use super::{status, Ctx};
use crate::abi::{deserialize_map, Headers, Status};
use crate::clock::Event;
use crate::grpc::{self, Arrival};
use crate::memory::{give, read, read_string, write_u32, Fault, Hostcall};
use crate::state::HostState;
use crate::upstream::Sender;
use std::time::Duration;
use wasmtime::Linker;

/// The hostcalls of gRPC calls and streams.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    l.func_wrap(
        "env",
        "proxy_grpc_call",
        |mut c: Ctx,
         cluster_ptr: i32,
         cluster_len: i32,
         service_ptr: i32,
         service_len: i32,
         method_ptr: i32,
         method_len: i32,
         metadata_ptr: i32,
         metadata_len: i32,
         message_ptr: i32,
         message_len: i32,
         timeout_ms: i32,
         token_ptr: i32| {
            status((|| {
                let cluster = read_string(&mut c, cluster_ptr, cluster_len)?;
                let service = read_string(&mut c, service_ptr, service_len)?;
                let method = read_string(&mut c, method_ptr, method_len)?;
                deserialize_map(&read(&mut c, metadata_ptr, metadata_len)?)
                    .ok_or(Status::SerializationFailure)?;
                read(&mut c, message_ptr, message_len)?;
                write_u32(&mut c, token_ptr, 0)?;
                let timeout = Duration::from_millis(u64::from(timeout_ms as u32));
                let path = format!("/{service}/{method}");
                let token = grpc_call(c.data(), &cluster, &path, timeout)?;
                write_u32(&mut c, token_ptr, token)
            })())
        },
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
    Ok(())
}

/// Makes a unary gRPC call to `path` of a scripted upstream's cluster, its end scheduled on the
/// virtual clock ([`grpc::call_answer`]); a real server's cluster is not called so
/// (InternalFailure), and a name that is no cluster is ParseFailure, as for a stream. A `timeout`
/// of zero is none.
fn grpc_call(state: &HostState, cluster: &str, path: &str, timeout: Duration) -> Hostcall<u32> {
    let mut process = state.process.borrow_mut();
    if process.loopback.address(cluster).is_some() {
        return Err(Status::InternalFailure.into());
    }
    let now = process.clock.now();
    let wall = process.clock.wall_nanos();
    let Some(upstream) = process.upstreams.get_mut(cluster) else {
        return Err(Status::ParseFailure.into());
    };
    let behaviour = upstream.receive(Sender::Probe, path, now);
    let token = process.next_token();
    let timeout = (!timeout.is_zero()).then_some(timeout);
    if let Some((after, arrival)) = grpc::call_answer(behaviour, timeout, cluster, wall) {
        let (vm, context) = (state.vm, state.effective_context);
        let event = Event::GrpcCallEnd {
            vm,
            context,
            token,
            arrival,
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
