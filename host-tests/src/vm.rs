//! One instance of the module: a wasmtime `Store` whose data is what Envoy keeps per VM
//! ([`crate::state`]), plus fuel metering.
//!
//! Every call into the guest goes through [`Vm::invoke`], which gives the call a fresh fuel budget
//! and books what it spent under the export's name: fuel is wasmtime's deterministic instruction
//! count, so "instructions per request" does not depend on the machine. A budget that runs out
//! (a guest stuck in a loop) traps instead of hanging the test.

use crate::state::{Exports, HostState, ROOT_CONTEXT};
use std::collections::{BTreeMap, HashMap};
use wasmtime::{Func, Instance, Linker, Module, Store, Val};

/// Fuel one guest call may spend before it is stopped as runaway.
const FUEL_PER_CALL: u64 = 1_000_000_000;

/// Calls and fuel spent in one guest export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fuel {
    /// How many times it was called.
    pub calls: u64,
    /// Fuel (≈ wasm instructions) spent in those calls, including the guest allocator's.
    pub fuel: u64,
}

/// Whether a VM still gets callbacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmStatus {
    /// Compiling the module at start ([`crate::HostOptions::compile`]): the requests that reach
    /// its worker wait until it is up, and are then handed to it at once.
    Compiling,
    /// Ticks, responses and requests are delivered.
    Running,
    /// Stopped by the test (`Host::stop_vm`): nothing is delivered any more.
    Stopped,
    /// The guest trapped; the message says where. Nothing is delivered any more.
    Crashed(String),
}

/// What a guest call returned.
pub(crate) struct Called {
    pub results: Vec<Val>,
    pub fuel: u64,
}

/// One instance of the module.
pub(crate) struct Vm {
    store: Store<HostState>,
    instance: Instance,
    pub status: VmStatus,
    pub fuel: BTreeMap<String, Fuel>,
    /// The requests (record indexes) that reached this VM's worker while it compiled.
    pub queued: Vec<usize>,
    last_context: u32,
    /// Callbacks looked up so far: the export (if any) and how many results it returns.
    callbacks: HashMap<String, Option<(Func, usize)>>,
}

impl Vm {
    /// Instantiates the module (every import must resolve) and runs its initializers.
    pub(crate) fn new(
        linker: &Linker<HostState>,
        module: &Module,
        state: HostState,
    ) -> wasmtime::Result<Vm> {
        let mut store = Store::new(module.engine(), state);
        store.set_fuel(FUEL_PER_CALL)?;
        let instance = linker.instantiate(&mut store, module)?;
        if instance
            .get_func(&mut store, "proxy_abi_version_0_2_1")
            .is_none()
        {
            wasmtime::bail!("the module does not export proxy_abi_version_0_2_1 (ABI 0.2.1)");
        }
        let memory = instance.get_memory(&mut store, "memory");
        let malloc = ["malloc", "proxy_on_memory_allocate"]
            .iter()
            .find_map(|name| instance.get_func(&mut store, name))
            .map(|malloc| {
                malloc
                    .typed::<i32, i32>(&store)
                    .map_err(|e| format!("{e:?}"))
            });
        store.data_mut().exports = Exports { memory, malloc };
        let mut vm = Vm {
            store,
            instance,
            status: VmStatus::Running,
            fuel: BTreeMap::new(),
            queued: Vec::new(),
            last_context: ROOT_CONTEXT,
            callbacks: HashMap::new(),
        };
        for init in ["_initialize", "_start"] {
            vm.invoke(init, &[])?;
        }
        Ok(vm)
    }

    /// Calls export `name`; `Ok(None)` if the module does not export it, else its results and
    /// the fuel the call spent.
    pub(crate) fn invoke(&mut self, name: &str, args: &[Val]) -> wasmtime::Result<Option<Called>> {
        let callback = match self.callbacks.get(name) {
            Some(known) => *known,
            None => {
                let func = self.instance.get_func(&mut self.store, name);
                let found = func.map(|func| (func, func.ty(&self.store).results().len()));
                self.callbacks.insert(name.to_string(), found);
                found
            }
        };
        let Some((func, results)) = callback else {
            return Ok(None);
        };
        let mut results = vec![Val::I32(0); results];
        self.store.set_fuel(FUEL_PER_CALL)?;
        let outcome = func.call(&mut self.store, args, &mut results);
        let spent = FUEL_PER_CALL.saturating_sub(self.store.get_fuel().unwrap_or(0));
        let fuel = match self.fuel.get_mut(name) {
            Some(fuel) => fuel,
            None => self.fuel.entry(name.to_string()).or_default(),
        };
        fuel.calls += 1;
        fuel.fuel += spent;
        outcome.map(|()| {
            Some(Called {
                results,
                fuel: spent,
            })
        })
    }

    /// The size of the module's linear memory `memory`, in 64 KiB pages (0 if it exports none).
    pub(crate) fn memory_pages(&mut self) -> u64 {
        let memory = self.state().exports.memory;
        memory.map_or(0, |memory| memory.size(&self.store))
    }

    pub(crate) fn state(&self) -> &HostState {
        self.store.data()
    }

    pub(crate) fn state_mut(&mut self) -> &mut HostState {
        self.store.data_mut()
    }

    /// A context id not used before in this VM.
    pub(crate) fn new_context(&mut self) -> u32 {
        self.last_context += 1;
        self.last_context
    }
}
