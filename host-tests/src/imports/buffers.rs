//! Buffers: the bodies, configurations and gRPC messages a callback may read, and the response
//! body it may change; each exists only while the callback that delivers it runs, as in Envoy.

use super::{status, Ctx};
use crate::abi::{BufferType, Status};
use crate::grpc::Arrival;
use crate::memory::{give, read, Hostcall};
use crate::state::HostState;
use wasmtime::Linker;

/// The hostcalls of buffers.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
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
