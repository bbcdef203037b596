//! Bounds-checked access to a guest's linear memory.
//!
//! Every pointer and length a guest passes is untrusted. A pair that does not fit inside the
//! guest's memory becomes `Status::InvalidMemoryAccess` for the guest, never a host panic; only a
//! trap of the guest's own allocator aborts the hostcall (as a trap of that guest).

use crate::abi::{len32, Status};
use crate::state::HostState;
use wasmtime::{Caller, Memory};

/// Why a hostcall did not succeed: a status for the guest, or a trap that ends the guest call.
pub(crate) enum Fault {
    Status(Status),
    Trap(wasmtime::Error),
}

impl From<Status> for Fault {
    fn from(status: Status) -> Fault {
        Fault::Status(status)
    }
}

impl From<wasmtime::Error> for Fault {
    fn from(error: wasmtime::Error) -> Fault {
        Fault::Trap(error)
    }
}

/// What a hostcall body returns.
pub(crate) type Hostcall<T = ()> = Result<T, Fault>;

fn memory(caller: &mut Caller<'_, HostState>) -> Hostcall<Memory> {
    let memory = caller.data().exports.memory;
    memory.ok_or(Status::InvalidMemoryAccess.into())
}

/// The byte range `[ptr, ptr + len)` if it lies inside a memory of `size` bytes.
fn range(ptr: i32, len: usize, size: usize) -> Hostcall<std::ops::Range<usize>> {
    let start = ptr as u32 as usize;
    match start.checked_add(len) {
        Some(end) if end <= size => Ok(start..end),
        _ => Err(Status::InvalidMemoryAccess.into()),
    }
}

/// Copies `len` guest bytes at `ptr`.
pub(crate) fn read(caller: &mut Caller<'_, HostState>, ptr: i32, len: i32) -> Hostcall<Vec<u8>> {
    let memory = memory(caller)?;
    let data = memory.data(&*caller);
    let range = range(ptr, len as u32 as usize, data.len())?;
    Ok(data[range].to_vec())
}

/// Reads guest bytes as text (invalid UTF-8 is replaced, as header names and keys are ASCII).
pub(crate) fn read_string(
    caller: &mut Caller<'_, HostState>,
    ptr: i32,
    len: i32,
) -> Hostcall<String> {
    Ok(String::from_utf8_lossy(&read(caller, ptr, len)?).into_owned())
}

/// Writes `bytes` at guest address `ptr`.
pub(crate) fn write(caller: &mut Caller<'_, HostState>, ptr: i32, bytes: &[u8]) -> Hostcall {
    let memory = memory(caller)?;
    let data = memory.data_mut(&mut *caller);
    let range = range(ptr, bytes.len(), data.len())?;
    data[range].copy_from_slice(bytes);
    Ok(())
}

/// Writes a 32-bit word (a guest `usize`, pointer or u32).
pub(crate) fn write_u32(caller: &mut Caller<'_, HostState>, ptr: i32, value: u32) -> Hostcall {
    write(caller, ptr, &value.to_le_bytes())
}

/// Checks that a 4-byte return slot is writable, before the host allocates anything for it.
fn check_slot(caller: &mut Caller<'_, HostState>, ptr: i32) -> Hostcall {
    let memory = memory(caller)?;
    range(ptr, 4, memory.data_size(&*caller)).map(|_| ())
}

/// Hands `bytes` to the guest as proxy-wasm hosts do: allocate with the guest's `malloc` (or
/// `proxy_on_memory_allocate`), copy, and store the pointer and size in the guest's return slots.
/// Empty values are returned as a null pointer and size 0 without allocating (Envoy's
/// `copyToPointerSize`), which the SDK reads as "present but empty".
pub(crate) fn give(
    caller: &mut Caller<'_, HostState>,
    bytes: &[u8],
    ptr_ptr: i32,
    size_ptr: i32,
) -> Hostcall {
    check_slot(caller, ptr_ptr)?;
    check_slot(caller, size_ptr)?;
    let mut pointer = 0u32;
    if !bytes.is_empty() {
        let malloc = match caller.data().exports.malloc.clone() {
            Some(Ok(malloc)) => malloc,
            Some(Err(mismatch)) => return Err(Fault::Trap(wasmtime::Error::msg(mismatch))),
            None => return Err(Status::InternalFailure.into()),
        };
        let guest_ptr = malloc.call(&mut *caller, len32(bytes.len()) as i32)?;
        if guest_ptr == 0 {
            return Err(Status::InternalFailure.into());
        }
        write(caller, guest_ptr, bytes)?;
        pointer = guest_ptr as u32;
    }
    write_u32(caller, ptr_ptr, pointer)?;
    write_u32(caller, size_ptr, len32(bytes.len()))
}
