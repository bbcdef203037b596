//! Calls into the guest: every callback runs through here, which makes the called context the
//! effective one, books the fuel a request's callbacks spend on its record, and turns a trap
//! into an error or a crashed VM as [`crate::OnTrap`] says.

use super::Host;
use crate::error::HostError;
use crate::options::OnTrap;
use crate::process::LogLine;
use crate::state::ROOT_CONTEXT;
use crate::vm::VmStatus;
use wasmtime::Val;

/// How many of a VM's log lines a trap error quotes.
const TRAP_LOG_LINES: usize = 20;

impl Host {
    /// Runs callback `name(context, args...)` on `vm` if it is running and exports it; returns
    /// its i32 result. A trap is handled per [`OnTrap`]. Fuel spent in a request's context is
    /// booked on the request's record.
    pub(super) fn callback(
        &mut self,
        vm: usize,
        name: &str,
        context: u32,
        args: &[i32],
    ) -> Result<Option<i32>, HostError> {
        let args: Vec<Val> = std::iter::once(context as i32)
            .chain(args.iter().copied())
            .map(Val::I32)
            .collect();
        let results = self.guest(vm, name, context, &args)?;
        Ok(results.and_then(|results| results.first().and_then(Val::i32)))
    }

    pub(super) fn guest(
        &mut self,
        vm: usize,
        name: &str,
        context: u32,
        args: &[Val],
    ) -> Result<Option<Vec<Val>>, HostError> {
        let instance = &mut self.vms[vm];
        if instance.status != VmStatus::Running {
            return Ok(None);
        }
        let state = instance.state_mut();
        state.effective_context = context;
        state.callback.clear();
        state.callback.push_str(name);
        match instance.invoke(name, args) {
            Ok(None) => Ok(None),
            Ok(Some(called)) => {
                let record = instance.state().streams.get(&context).map(|s| s.record);
                if let Some(record) = record.and_then(|record| self.record_mut(record)) {
                    record.fuel += called.fuel;
                }
                Ok(Some(called.results))
            }
            Err(error) => {
                let message = format!("{error:?}");
                instance.status = VmStatus::Crashed(format!("{name}: {message}"));
                let log: Vec<LogLine> = self.vm_logs(vm);
                let start = log.len().saturating_sub(TRAP_LOG_LINES);
                let trap = HostError::Trap {
                    vm,
                    callback: name.to_string(),
                    message,
                    log: log[start..].to_vec(),
                };
                match self.options.on_trap {
                    OnTrap::Fail => Err(trap),
                    OnTrap::Crash => {
                        eprintln!("{trap}");
                        Ok(None)
                    }
                }
            }
        }
    }

    /// Calls any export of VM `vm` with the root context effective, then carries out what it
    /// asked for. An escape hatch for tests of the host itself, with hand-written guests.
    pub fn call(
        &mut self,
        vm: usize,
        export: &str,
        args: &[Val],
    ) -> Result<Option<Vec<Val>>, HostError> {
        let results = self.guest(vm, export, ROOT_CONTEXT, args)?;
        self.settle(vm)?;
        Ok(results)
    }
}
