//! Shared data and shared queues: what every VM of the process reads and writes, with
//! compare-and-swap on the data and queues resolved by name.

use super::{status, Ctx};
use crate::abi::Status;
use crate::envoy;
use crate::memory::{give, read, read_string, write_u32};
use crate::state::HostState;
use wasmtime::Linker;

/// The hostcalls of shared data and queues.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
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
    Ok(())
}
