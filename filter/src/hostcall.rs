//! The host calls upcheck makes, on the raw proxy-wasm ABI 0.2.1, each handing back whatever
//! status the host answered.
//!
//! The SDK's own wrappers (proxy-wasm 0.2.5 `hostcalls`) panic on any status they were not
//! written to expect: `set_tick_period`, `define_metric`, `set_shared_data`, `get_map` and most
//! others accept `Ok` alone, and a panic kills the VM. Hosts differ in what they answer: Envoy's
//! statuses are not NGINX's (ngx_wasm_module answers NotFound for a property it lacks and an
//! internal failure where Envoy answers a bad argument). So every call upcheck makes goes
//! through here, with the SDK's signatures so callers read the same, and every status comes back
//! as a value: a number no `Status` names becomes `InternalFailure`, never a panic and never a
//! value the enum cannot hold. Maps and strings from the host are read without trusting their
//! sizes or their encoding. A small header value read only during its call (every response's
//! `:status`) is written by the host into a scratch buffer that the module's allocator hands out
//! for that one call ([`allocate`]), so it costs no allocation.
//!
//! `dispatch_http_call` hands back its status as the others do (Envoy 1.40 answers BadArgument
//! for an unknown cluster or a probe without `:authority`; ngx_wasm_module traps instead for a
//! call made outside the callbacks that may make one, or without `:method` or `:path`, which
//! upcheck never does). Its answer comes to the context that made it ([`crate::callbacks`]), so
//! no token is recorded here.
//!
//! Only what is declared here is imported: the module asks a host for nothing it does not use
//! (no `proxy_get_log_level`, which ngx_wasm_module declares with another signature than the
//! SDK's, so a module importing it does not load there at all).

use crate::abi::{BufferType, Bytes, HeaderMap, HostLogLevel, MetricType, Status};
use std::cell::{Cell, UnsafeCell};
use std::ptr::{null, null_mut};
use std::time::Duration;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_log(level: u32, message: *const u8, size: usize) -> u32;
    fn proxy_get_current_time_nanoseconds(time: *mut u64) -> u32;
    fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
    fn proxy_get_buffer_bytes(
        kind: u32,
        start: usize,
        max: usize,
        data: *mut *mut u8,
        size: *mut usize,
    ) -> u32;
    fn proxy_get_header_map_pairs(kind: u32, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_get_header_map_value(
        kind: u32,
        key: *const u8,
        key_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
    ) -> u32;
    fn proxy_replace_header_map_value(
        kind: u32,
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_remove_header_map_value(kind: u32, key: *const u8, key_size: usize) -> u32;
    fn proxy_get_property(
        path: *const u8,
        path_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
    ) -> u32;
    fn proxy_get_shared_data(
        key: *const u8,
        key_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
        cas: *mut u32,
    ) -> u32;
    fn proxy_set_shared_data(
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
        cas: u32,
    ) -> u32;
    fn proxy_set_effective_context(context: u32) -> u32;
    fn proxy_continue_stream(stream: u32) -> u32;
    fn proxy_send_local_response(
        status: u32,
        details: *const u8,
        details_size: usize,
        body: *const u8,
        body_size: usize,
        headers: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> u32;
    fn proxy_define_metric(kind: u32, name: *const u8, name_size: usize, id: *mut u32) -> u32;
    fn proxy_increment_metric(id: u32, offset: i64) -> u32;
    fn proxy_record_metric(id: u32, value: u64) -> u32;
    fn proxy_get_metric(id: u32, value: *mut u64) -> u32;
    fn proxy_http_call(
        upstream: *const u8,
        upstream_size: usize,
        headers: *const u8,
        headers_size: usize,
        body: *const u8,
        body_size: usize,
        trailers: *const u8,
        trailers_size: usize,
        timeout_ms: u32,
        token: *mut u32,
    ) -> u32;
    fn proxy_grpc_stream(
        upstream: *const u8,
        upstream_size: usize,
        service: *const u8,
        service_size: usize,
        method: *const u8,
        method_size: usize,
        initial_metadata: *const u8,
        initial_metadata_size: usize,
        token: *mut u32,
    ) -> u32;
    fn proxy_grpc_send(token: u32, message: *const u8, message_size: usize, end_stream: u32)
        -> u32;
    fn proxy_grpc_call(
        upstream: *const u8,
        upstream_size: usize,
        service: *const u8,
        service_size: usize,
        method: *const u8,
        method_size: usize,
        initial_metadata: *const u8,
        initial_metadata_size: usize,
        message: *const u8,
        message_size: usize,
        timeout_ms: u32,
        token: *mut u32,
    ) -> u32;
    fn proxy_get_status(code: *mut u32, message: *mut *mut u8, message_size: *mut usize) -> u32;
    fn proxy_grpc_cancel(token: u32) -> u32;
}

/// `proxy_continue_stream`'s number for the HTTP request.
const STREAM_HTTP_REQUEST: u32 = 0;

/// How many bytes a value read through the scratch buffer may have.
const SCRATCH_SIZE: usize = 64;

/// Where the host writes a small value the module reads only during the call that asked for it
/// ([`read_map_value`]): handed out by [`allocate`] for one allocation while a call is armed.
/// The call's answer (where the value is, and its size) is written beside it, at addresses fixed
/// at build time, so that the read needs no room on the stack.
struct Scratch {
    armed: Cell<bool>,
    bytes: UnsafeCell<[u8; SCRATCH_SIZE]>,
    data: Cell<*mut u8>,
    size: Cell<usize>,
}

thread_local! {
    static SCRATCH: Scratch = const {
        Scratch {
            armed: Cell::new(false),
            bytes: UnsafeCell::new([0; SCRATCH_SIZE]),
            data: Cell::new(null_mut()),
            size: Cell::new(0),
        }
    };
}

/// Memory for `size` bytes the host is about to write (`proxy_on_memory_allocate`): the scratch
/// buffer, once, while a read that takes its value from there is in progress and the value fits;
/// else a fresh allocation of exactly `size` bytes, taken back as a `Vec` of that capacity
/// ([`take`]).
pub fn allocate(size: usize) -> *mut u8 {
    let scratch = SCRATCH.with(|s| {
        (s.armed.replace(false) && size <= SCRATCH_SIZE).then(|| s.bytes.get().cast::<u8>())
    });
    scratch.unwrap_or_else(|| {
        let mut memory = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(size));
        memory.as_mut_ptr()
    })
}

/// Takes ownership of `size` bytes the host wrote into memory it had the module allocate
/// (`proxy_on_memory_allocate`); none when it wrote nothing.
///
/// # Safety
/// `data` is null or what the host returned from a call that hands the guest an allocation of
/// `size` bytes, as the ABI promises.
unsafe fn take(data: *mut u8, size: usize) -> Option<Bytes> {
    if data.is_null() {
        return None;
    }
    Some(Vec::from_raw_parts(data, size, size))
}

/// Writes a log line.
pub fn log(level: HostLogLevel, message: &str) -> Result<(), Status> {
    Status::of(unsafe { proxy_log(level as u32, message.as_ptr(), message.len()) })
}

/// The host's wall clock, as the time since the Unix epoch.
pub fn get_current_time() -> Result<Duration, Status> {
    let mut nanos = 0u64;
    Status::of(unsafe { proxy_get_current_time_nanoseconds(&mut nanos) })?;
    Ok(Duration::from_nanos(nanos))
}

/// Sets this root context's tick period (whole milliseconds, at most u32::MAX).
pub fn set_tick_period(period: Duration) -> Result<(), Status> {
    let ms = u32::try_from(period.as_millis()).unwrap_or(u32::MAX);
    Status::of(unsafe { proxy_set_tick_period_milliseconds(ms) })
}

/// Up to `max` bytes of a buffer from `start`; none if the host has none.
pub fn get_buffer(kind: BufferType, start: usize, max: usize) -> Result<Option<Bytes>, Status> {
    let (mut data, mut size) = (null_mut(), 0usize);
    match Status::of(unsafe {
        proxy_get_buffer_bytes(kind as u32, start, max, &mut data, &mut size)
    }) {
        Ok(()) => Ok(unsafe { take(data, size) }),
        Err(Status::NotFound) => Ok(None),
        Err(status) => Err(status),
    }
}

/// Every pair of a header map (lower-case names as the host gives them); a map the host
/// serialized inconsistently reads as far as it is whole.
pub fn get_map(kind: HeaderMap) -> Result<Vec<(String, String)>, Status> {
    let (mut data, mut size) = (null_mut(), 0usize);
    Status::of(unsafe { proxy_get_header_map_pairs(kind as u32, &mut data, &mut size) })?;
    Ok(unsafe { take(data, size) }
        .map(|bytes| deserialize_map(&bytes))
        .unwrap_or_default())
}

/// One header's value; none if the map lacks it.
pub fn get_map_value(kind: HeaderMap, key: &str) -> Result<Option<String>, Status> {
    read_map_value(kind, key, |bytes| {
        String::from_utf8_lossy(bytes).into_owned()
    })
}

/// A header's value as the host gave it, bytes with no check of their encoding, handed to
/// `read`; none if the map lacks it. A value of up to [`SCRATCH_SIZE`] bytes is written into
/// the scratch buffer rather than a fresh allocation, so reading a response's `:status` (every
/// request does) allocates and frees nothing.
pub fn read_map_value<R>(
    kind: HeaderMap,
    key: &str,
    read: impl FnOnce(&[u8]) -> R,
) -> Result<Option<R>, Status> {
    read_value(
        |data, size| unsafe {
            proxy_get_header_map_value(kind as u32, key.as_ptr(), key.len(), data, size)
        },
        read,
    )
}

/// A property's value as the host gave it, handed to `read`; none when the host does not have
/// it. Through the scratch buffer as [`read_map_value`]: for the properties read of every
/// request in `host` routing (the attempt count, eight bytes in Envoy), which would otherwise
/// cost an allocation and its release each.
pub fn read_property<R>(path: &str, read: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, Status> {
    read_value(
        |data, size| unsafe { proxy_get_property(path.as_ptr(), path.len(), data, size) },
        read,
    )
}

/// The value host call `call` hands back (given where to write where the value is and its
/// size), handed to `read`: from the scratch buffer if the host wrote it there, else from the
/// allocation it had the module make; none for NotFound.
#[inline(always)]
fn read_value<R>(
    call: impl FnOnce(*mut *mut u8, *mut usize) -> u32,
    read: impl FnOnce(&[u8]) -> R,
) -> Result<Option<R>, Status> {
    let (data, size) = SCRATCH.with(|s| {
        s.armed.set(true);
        s.data.set(null_mut());
        s.size.set(0);
        (s.data.as_ptr(), s.size.as_ptr())
    });
    let raw = call(data, size);
    let (scratch, data, size) = SCRATCH.with(|s| {
        s.armed.set(false);
        (s.bytes.get().cast::<u8>(), s.data.get(), s.size.get())
    });
    match Status::of(raw) {
        Ok(()) if !data.is_null() && data == scratch => {
            // Written by the host into the scratch buffer during the call, never more than it
            // holds (`allocate` hands it out for at most that much).
            let bytes = unsafe { std::slice::from_raw_parts(data, size.min(SCRATCH_SIZE)) };
            Ok(Some(read(bytes)))
        }
        Ok(()) => Ok(Some(read(&unsafe { take(data, size) }.unwrap_or_default()))),
        Err(Status::NotFound) => Ok(None),
        Err(status) => Err(status),
    }
}

/// Removes every value of a header.
pub fn remove_map_value(kind: HeaderMap, key: &str) -> Result<(), Status> {
    Status::of(unsafe { proxy_remove_header_map_value(kind as u32, key.as_ptr(), key.len()) })
}

/// Replaces every value of a header with `value`, or removes it (`None`).
pub fn set_map_value(kind: HeaderMap, key: &str, value: Option<&str>) -> Result<(), Status> {
    set_map_bytes(kind, key, value.map(str::as_bytes))
}

/// Replaces every value of a header with the bytes `value`, or removes it (`None`).
pub fn set_map_bytes(kind: HeaderMap, key: &str, value: Option<&[u8]>) -> Result<(), Status> {
    let Some(value) = value else {
        return remove_map_value(kind, key);
    };
    Status::of(unsafe {
        proxy_replace_header_map_value(
            kind as u32,
            key.as_ptr(),
            key.len(),
            value.as_ptr(),
            value.len(),
        )
    })
}

/// A property's value; none when the host does not have it (NotFound). Any other refusal comes
/// back as its status, which callers take as "unknown" too. `path` is the property's segments
/// separated by NUL, as the ABI takes it (`"upstream\0address"`): written so, it is a constant.
pub fn get_property(path: &str) -> Result<Option<Bytes>, Status> {
    let (mut data, mut size) = (null_mut(), 0usize);
    match Status::of(unsafe { proxy_get_property(path.as_ptr(), path.len(), &mut data, &mut size) })
    {
        Ok(()) => Ok(unsafe { take(data, size) }),
        Err(Status::NotFound) => Ok(None),
        Err(status) => Err(status),
    }
}

/// Only the compare-and-swap number of a shared-data value (none if the key does not exist or
/// the host refuses): for a value whose number is all it says, read on every request. The
/// host allocates nothing for an empty value; anything it did hand over is freed.
pub fn shared_data_cas(key: &str) -> Option<u32> {
    let (mut data, mut size, mut cas) = (null_mut(), 0usize, 0u32);
    let raw =
        unsafe { proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas) };
    if !data.is_null() {
        drop(unsafe { take(data, size) });
    }
    (Status::of(raw).is_ok() && cas != 0).then_some(cas)
}

/// A shared-data value and its compare-and-swap number; neither if the key does not exist.
pub fn get_shared_data(key: &str) -> Result<(Option<Bytes>, Option<u32>), Status> {
    let (mut data, mut size, mut cas) = (null_mut(), 0usize, 0u32);
    let raw =
        unsafe { proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas) };
    match Status::of(raw) {
        Ok(()) => Ok((unsafe { take(data, size) }, (cas != 0).then_some(cas))),
        Err(Status::NotFound) => Ok((None, None)),
        Err(status) => Err(status),
    }
}

/// Writes a shared-data value if its compare-and-swap number is still `cas` (any, if none).
pub fn set_shared_data(key: &str, value: Option<&[u8]>, cas: Option<u32>) -> Result<(), Status> {
    Status::of(unsafe {
        proxy_set_shared_data(
            key.as_ptr(),
            key.len(),
            value.map_or(null(), <[u8]>::as_ptr),
            value.map_or(0, <[u8]>::len),
            cas.unwrap_or(0),
        )
    })
}

/// Makes `context` the one later calls are about.
pub fn set_effective_context(context: u32) -> Result<(), Status> {
    Status::of(unsafe { proxy_set_effective_context(context) })
}

/// Resumes the paused request of the effective context.
pub fn resume_http_request() -> Result<(), Status> {
    Status::of(unsafe { proxy_continue_stream(STREAM_HTTP_REQUEST) })
}

/// Answers the current request from the filter.
pub fn send_http_response(
    status: u32,
    headers: Vec<(&str, &str)>,
    body: Option<&[u8]>,
) -> Result<(), Status> {
    let headers = serialize_map(&headers);
    Status::of(unsafe {
        proxy_send_local_response(
            status,
            null(),
            0,
            body.map_or(null(), <[u8]>::as_ptr),
            body.map_or(0, <[u8]>::len),
            headers.as_ptr(),
            headers.len(),
            -1,
        )
    })
}

/// Sends an HTTP request to the cluster `upstream`, answered within `timeout` (whole
/// milliseconds, at most u32::MAX) at `proxy_on_http_call_response`: its token.
pub fn dispatch_http_call(
    upstream: &str,
    headers: Vec<(&str, &str)>,
    body: Option<&[u8]>,
    trailers: Vec<(&str, &str)>,
    timeout: Duration,
) -> Result<u32, Status> {
    let headers = serialize_map(&headers);
    let trailers = serialize_map(&trailers);
    let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    let mut token = 0u32;
    Status::of(unsafe {
        proxy_http_call(
            upstream.as_ptr(),
            upstream.len(),
            headers.as_ptr(),
            headers.len(),
            body.map_or(null(), <[u8]>::as_ptr),
            body.map_or(0, <[u8]>::len),
            trailers.as_ptr(),
            trailers.len(),
            timeout_ms,
            &mut token,
        )
    })?;
    Ok(token)
}

/// Opens a gRPC stream to `service`/`method` through the cluster `upstream` with
/// `initial_metadata`, and sends its first `message` (`last`: the request side ends with it): its
/// token, for [`grpc_cancel`] and the stream callbacks. A stream whose message
/// could not go is cancelled.
pub fn open_grpc_stream(
    upstream: &str,
    (service, method): (&str, &str),
    initial_metadata: &[(&str, &str)],
    (message, last): (&[u8], bool),
) -> Result<u32, Status> {
    let metadata = serialize_map(initial_metadata);
    let mut token = 0u32;
    Status::of(unsafe {
        proxy_grpc_stream(
            upstream.as_ptr(),
            upstream.len(),
            service.as_ptr(),
            service.len(),
            method.as_ptr(),
            method.len(),
            metadata.as_ptr(),
            metadata.len(),
            &mut token,
        )
    })?;
    let end_of_stream = u32::from(last);
    let sent = unsafe { proxy_grpc_send(token, message.as_ptr(), message.len(), end_of_stream) };
    if let Err(status) = Status::of(sent) {
        let _ = grpc_cancel(token);
        return Err(status);
    }
    Ok(token)
}

/// Calls `service`/`method` once through the cluster `upstream` with `initial_metadata` and
/// `message`, giving up after `timeout`: its token, for `proxy_on_grpc_receive` (the answer)
/// and `proxy_on_grpc_close` (its end).
pub fn grpc_call(
    upstream: &str,
    (service, method): (&str, &str),
    initial_metadata: &[(&str, &str)],
    message: &[u8],
    timeout: Duration,
) -> Result<u32, Status> {
    let metadata = serialize_map(initial_metadata);
    let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    let mut token = 0u32;
    Status::of(unsafe {
        proxy_grpc_call(
            upstream.as_ptr(),
            upstream.len(),
            service.as_ptr(),
            service.len(),
            method.as_ptr(),
            method.len(),
            metadata.as_ptr(),
            metadata.len(),
            message.as_ptr(),
            message.len(),
            timeout_ms,
            &mut token,
        )
    })?;
    Ok(token)
}

/// The gRPC status and message of the call or stream whose `proxy_on_grpc_close` is running.
pub fn grpc_status() -> Result<(u32, String), Status> {
    let mut code = 0u32;
    let mut data: *mut u8 = null_mut();
    let mut size = 0usize;
    Status::of(unsafe { proxy_get_status(&mut code, &mut data, &mut size) })?;
    // SAFETY: what proxy_get_status handed over, as the ABI promises.
    let message = unsafe { take(data, size) }.unwrap_or_default();
    Ok((code, String::from_utf8_lossy(&message).into_owned()))
}

/// Ends gRPC stream `token` at once: no callback of it follows.
pub fn grpc_cancel(token: u32) -> Result<(), Status> {
    Status::of(unsafe { proxy_grpc_cancel(token) })
}

/// Defines a metric; its id.
pub fn define_metric(kind: MetricType, name: &str) -> Result<u32, Status> {
    let mut id = 0u32;
    Status::of(unsafe { proxy_define_metric(kind as u32, name.as_ptr(), name.len(), &mut id) })?;
    Ok(id)
}

/// Adds `offset` to a counter.
pub fn increment_metric(id: u32, offset: i64) -> Result<(), Status> {
    Status::of(unsafe { proxy_increment_metric(id, offset) })
}

/// Sets a gauge.
pub fn record_metric(id: u32, value: u64) -> Result<(), Status> {
    Status::of(unsafe { proxy_record_metric(id, value) })
}

/// A metric's value as the host keeps it: a counter's total over every VM, a gauge's last value.
pub fn get_metric(id: u32) -> Result<u64, Status> {
    let mut value = 0u64;
    Status::of(unsafe { proxy_get_metric(id, &mut value) })?;
    Ok(value)
}

/// A header map in the ABI's form: a u32 count, a (name length, value length) pair of u32 per
/// entry, then each name and value followed by a NUL.
fn serialize_map(pairs: &[(&str, &str)]) -> Bytes {
    let len = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
    let mut bytes = Vec::with_capacity(
        4 + pairs
            .iter()
            .map(|(n, v)| n.len() + v.len() + 10)
            .sum::<usize>(),
    );
    bytes.extend_from_slice(&len(pairs.len()));
    for (name, value) in pairs {
        bytes.extend_from_slice(&len(name.len()));
        bytes.extend_from_slice(&len(value.len()));
    }
    for (name, value) in pairs {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
    }
    bytes
}

/// Reads a header map in the ABI's form, up to the first entry whose sizes point outside it.
fn deserialize_map(bytes: &[u8]) -> Vec<(String, String)> {
    let word = |at: usize| -> Option<usize> {
        let raw: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(raw)).ok()
    };
    let Some(count) = word(0) else {
        return Vec::new();
    };
    let Some(mut at) = count.checked_mul(8).and_then(|n| n.checked_add(4)) else {
        return Vec::new();
    };
    let mut pairs = Vec::with_capacity(count.min(bytes.len() / 10));
    let mut text = |len: usize| -> Option<String> {
        let end = at.checked_add(len)?;
        let part = bytes.get(at..end)?;
        at = end.checked_add(1)?;
        Some(String::from_utf8_lossy(part).into_owned())
    };
    for i in 0..count {
        let sizes = (|| Some((word(4 + i * 8)?, word(8 + i * 8)?)))();
        let Some((name, value)) = sizes else {
            break;
        };
        let (Some(name), Some(value)) = (text(name), text(value)) else {
            break;
        };
        pairs.push((name, value));
    }
    pairs
}
