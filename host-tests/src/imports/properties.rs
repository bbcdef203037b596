//! Properties: what the guest set, per context, else what the proxy knows of the stream and
//! itself ([`crate::envoy::property`]; NGINX's profile lacks some).

use super::{status, Ctx};
use crate::abi::Status;
use crate::envoy;
use crate::memory::{give, read, Hostcall};
use crate::nginx;
use crate::options::Profile;
use crate::state::HostState;
use wasmtime::Linker;

/// The hostcalls of properties.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
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
