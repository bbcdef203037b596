//! The host's callbacks: the module's exports on the proxy-wasm ABI 0.2.1, each handed to the
//! context it names.
//!
//! The host names a context by number in every callback. Root contexts (one per plugin
//! configuration, a handful per VM) are kept in a list; streams, one per request and gone at
//! its end, by value in a table keyed by their number ([`Contexts`]), so a request allocates
//! nothing here and the table grows only with the VM's concurrency. The Rust SDK's dispatcher
//! looks each callback's context up in a SipHash map of boxed trait objects and boxes every
//! request's: about 1,250 instructions a request, more than upcheck's own routing and counting
//! (docs/benchmarks.md).
//!
//! A callback for a context the host never created, or already deleted, does nothing and
//! answers what a context with nothing to do answers (Continue, true). Roots and streams are
//! separate cells, so a host that runs a stream's callback from within a root's (a request
//! parked at cold start resumed from the tick, on a host that resumes at once) reaches it; a
//! callback for a cell already in use is skipped with a log line, never a panic.
//!
//! An answer to `dispatch_http_call` comes to the context that made the call: mostly a root
//! (probes and etcd's calls go out from ticks, configurations and answers), and a request only
//! for the probe it sent while held at cold start on a proxy that resumes a request only on its
//! own calls' answers (ngx_wasm_module; [`Http::on_http_call_response`]). ngx_wasm_module names
//! the root context in that answer (its host calls act on the request meanwhile), so a root
//! first hands a held request's answer on to it.

use crate::abi::Action;
use crate::http::Http;
use crate::logger;
use crate::root::Root;
use crate::status_page::PageContext;
use std::cell::RefCell;
use upcheck_policy::contexts::Contexts;

/// One request's context: routed traffic, or the status page's.
pub enum Context {
    /// A request of the traffic listener.
    Request(Http),
    /// A request of the status page's listener.
    Page(PageContext),
}

thread_local! {
    static ROOTS: RefCell<Vec<(u32, Root)>> = const { RefCell::new(Vec::new()) };
    static STREAMS: RefCell<Contexts<Context>> = const { RefCell::new(Contexts::new()) };
}

/// Runs `f` on root context `id`, if it exists and no other callback holds the roots.
fn with_root<R>(id: u32, f: impl FnOnce(&mut Root) -> R) -> Option<R> {
    ROOTS.with(|roots| {
        let Ok(mut roots) = roots.try_borrow_mut() else {
            logger::busy("root contexts", None);
            return None;
        };
        roots.iter_mut().find(|(i, _)| *i == id).map(|(_, r)| f(r))
    })
}

/// Runs `f` on stream `id`, if it exists and no other callback holds the streams.
fn with_stream<R>(id: u32, f: impl FnOnce(&mut Context) -> R) -> Option<R> {
    STREAMS.with(|streams| {
        let Ok(mut streams) = streams.try_borrow_mut() else {
            logger::busy("stream contexts", None);
            return None;
        };
        streams.get_mut(id).map(f)
    })
}

/// The ABI version this module speaks.
#[no_mangle]
pub extern "C" fn proxy_abi_version_0_2_1() {}

/// Memory the host fills for the module (a map, a buffer, a value): `size` bytes
/// ([`crate::hostcall::allocate`]). Exported as `malloc` on wasm32-unknown-unknown, the name
/// hosts look for first.
#[cfg_attr(
    all(target_arch = "wasm32", target_os = "unknown"),
    export_name = "malloc"
)]
#[cfg_attr(not(all(target_arch = "wasm32", target_os = "unknown")), no_mangle)]
pub extern "C" fn proxy_on_memory_allocate(size: usize) -> *mut u8 {
    crate::hostcall::allocate(size)
}

/// A context is created: a root (`root_context_id` 0) for a plugin configuration, or a stream
/// of root `root_context_id` for a request.
#[no_mangle]
pub extern "C" fn proxy_on_context_create(context_id: u32, root_context_id: u32) {
    if root_context_id == 0 {
        ROOTS.with(|roots| match roots.try_borrow_mut() {
            Ok(mut roots) => {
                roots.retain(|(i, _)| *i != context_id);
                roots.push((context_id, Root::default()));
            }
            Err(_) => logger::busy("root contexts", Some(context_id)),
        });
        return;
    }
    // The status page's on its listener, else routed; made in its slot, never moved there.
    let create = |root: &mut Root| match root.serves_page() {
        true => Context::Page(PageContext::new(root.vm())),
        false => Context::Request(Http::new(context_id, root.vm())),
    };
    with_root(root_context_id, |root| {
        STREAMS.with(|streams| match streams.try_borrow_mut() {
            Ok(mut streams) => streams.insert_with(context_id, || create(root)),
            Err(_) => logger::busy("stream contexts", Some(context_id)),
        })
    });
}

/// The VM starts, in root context `context_id`.
#[no_mangle]
pub extern "C" fn proxy_on_vm_start(context_id: u32, _vm_configuration_size: usize) -> bool {
    with_root(context_id, |root| root.on_vm_start()).unwrap_or(false)
}

/// Root context `context_id` gets its plugin configuration: whether it took it.
#[no_mangle]
pub extern "C" fn proxy_on_configure(context_id: u32, _plugin_configuration_size: usize) -> bool {
    with_root(context_id, Root::on_configure).unwrap_or(false)
}

/// Root context `context_id`'s timer.
#[no_mangle]
pub extern "C" fn proxy_on_tick(context_id: u32) {
    with_root(context_id, Root::on_tick);
}

/// The answer to call `token`, made by context `context_id`: a root's probe or etcd call, or
/// the probe a request held at cold start waits on, which ngx_wasm_module hands to the root
/// context (a host that names the request itself reaches it too; Envoy holds no request on a
/// probe). The request is resumed once its stream is no longer borrowed, so a host that runs
/// its next callbacks at once reaches it.
#[no_mangle]
pub extern "C" fn proxy_on_http_call_response(
    context_id: u32,
    token: u32,
    _num_headers: usize,
    body_size: usize,
    _num_trailers: usize,
) {
    let request = match with_root(context_id, |root| root.held_request(token)) {
        Some(Some(request)) => request,
        Some(None) => {
            with_root(context_id, |root| {
                root.on_http_call_response(token, body_size)
            });
            return;
        }
        None => context_id,
    };
    let resume = with_stream(request, |stream| match stream {
        Context::Request(http) => http.on_http_call_response(token, body_size),
        Context::Page(_) => false,
    });
    if resume == Some(true) {
        crate::http::resume();
    }
}

/// A message of gRPC stream `token` (a health check's answer, a backend's health Watch, etcd's
/// watch), opened by root `context_id`.
#[no_mangle]
pub extern "C" fn proxy_on_grpc_receive(context_id: u32, token: u32, message_size: usize) {
    with_root(context_id, |root| root.on_grpc_receive(token, message_size));
}

/// gRPC stream `token` ended with `status`.
#[no_mangle]
pub extern "C" fn proxy_on_grpc_close(context_id: u32, token: u32, status: u32) {
    with_root(context_id, |root| root.on_grpc_close(token, status));
}

/// A request's headers.
#[no_mangle]
pub extern "C" fn proxy_on_request_headers(
    context_id: u32,
    _num_headers: usize,
    _end_of_stream: bool,
) -> Action {
    with_stream(context_id, |stream| match stream {
        Context::Request(http) => http.on_request_headers(),
        Context::Page(page) => page.on_request_headers(),
    })
    .unwrap_or(Action::Continue)
}

/// The response's headers.
#[no_mangle]
pub extern "C" fn proxy_on_response_headers(
    context_id: u32,
    _num_headers: usize,
    _end_of_stream: bool,
) -> Action {
    with_stream(context_id, |stream| match stream {
        Context::Request(http) => http.on_response_headers(),
        Context::Page(_) => Action::Continue,
    })
    .unwrap_or(Action::Continue)
}

/// A request's body: passed on untouched (upcheck routes on headers alone).
#[no_mangle]
pub extern "C" fn proxy_on_request_body(
    _context_id: u32,
    _body_size: usize,
    _end_of_stream: bool,
) -> Action {
    Action::Continue
}

/// A request's trailers: passed on untouched.
#[no_mangle]
pub extern "C" fn proxy_on_request_trailers(_context_id: u32, _num_trailers: usize) -> Action {
    Action::Continue
}

/// A response's body: passed on untouched.
#[no_mangle]
pub extern "C" fn proxy_on_response_body(
    _context_id: u32,
    _body_size: usize,
    _end_of_stream: bool,
) -> Action {
    Action::Continue
}

/// A response's trailers: passed on untouched, read for a gRPC call's `grpc-status`.
#[no_mangle]
pub extern "C" fn proxy_on_response_trailers(context_id: u32, _num_trailers: usize) -> Action {
    with_stream(context_id, |stream| match stream {
        Context::Request(http) => http.on_response_trailers(),
        Context::Page(_) => Action::Continue,
    })
    .unwrap_or(Action::Continue)
}

/// A TCP connection's first callback. upcheck is an HTTP filter: a listener that loads it as a
/// network filter by mistake fails its VM here, loudly (Envoy logs the trap and reloads the VM
/// at the next connection), rather than passing connections through with no filter. The one
/// trap the module has, on purpose.
#[no_mangle]
pub extern "C" fn proxy_on_new_connection(_context_id: u32) -> Action {
    std::process::abort()
}

/// A stream's access log: its request has ended.
#[no_mangle]
pub extern "C" fn proxy_on_log(context_id: u32) {
    with_stream(context_id, |stream| {
        if let Context::Request(http) = stream {
            http.on_log();
        }
    });
}

/// A context is done: whether it may be deleted now (always: nothing here waits).
#[no_mangle]
pub extern "C" fn proxy_on_done(context_id: u32) -> bool {
    with_root(context_id, Root::on_done);
    true
}

/// A context is deleted.
#[no_mangle]
pub extern "C" fn proxy_on_delete(context_id: u32) {
    let stream = STREAMS.with(|streams| match streams.try_borrow_mut() {
        Ok(mut streams) => streams.remove(context_id),
        Err(_) => false,
    });
    if stream {
        return;
    }
    ROOTS.with(|roots| {
        if let Ok(mut roots) = roots.try_borrow_mut() {
            roots.retain(|(i, _)| *i != context_id);
        }
    });
}
