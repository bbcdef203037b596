//! Header maps: the request's and response's headers, an http call's answer, a gRPC stream's
//! metadata; read whole or by name, replaced, added to and removed from, with Envoy's statuses
//! for a map the callback has not got.

use super::{status, Ctx};
use crate::abi::{deserialize_map, header, serialize_map, Headers, MapType, Status};
use crate::grpc::Arrival;
use crate::memory::{give, read, read_string, Hostcall};
use crate::options::Profile;
use crate::state::{HostState, Phase};
use wasmtime::Linker;

/// The hostcalls of header maps.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
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
    let value = header(map(c.data(), kind)?, &key)
        .map(str::to_string)
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
