//! The guest's hold on its HTTP streams and contexts: continuing or closing a stream, a local
//! response, and the effective context. What it asks of a stream is carried out once the guest
//! call returns, as Envoy defers it.

use super::{status, Ctx};
use crate::abi::{deserialize_map, Status, STREAM_HTTP_REQUEST, STREAM_HTTP_RESPONSE};
use crate::envoy::Reply;
use crate::memory::{read, read_string, Hostcall};
use crate::options::Profile;
use crate::state::{HostState, Intent};
use wasmtime::Linker;

/// The hostcalls of streams and contexts.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
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
    l.func_wrap("env", "proxy_done", |_: Ctx| status(Ok(())))?;
    Ok(())
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
