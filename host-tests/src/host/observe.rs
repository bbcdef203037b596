//! What a test reads of the process and its VMs: metrics, log lines, shared data, memory, fuel
//! and each VM's status. Reading only, so an assertion never changes what it looks at.

use super::Host;
use crate::abi::MetricKind;
use crate::process::{LogLine, SharedDataUsage};
use crate::vm::{Fuel, VmStatus};
use std::collections::BTreeMap;

impl Host {
    /// The value of counter or gauge `name` (with or without Envoy's `wasmcustom.` prefix).
    pub fn metric(&self, name: &str) -> Option<u64> {
        let name = name.strip_prefix("wasmcustom.").unwrap_or(name);
        let process = self.process.borrow();
        let metric = process.metrics.get(name)?;
        (metric.kind != MetricKind::Histogram).then_some(metric.value)
    }

    /// The values recorded in histogram `name`.
    pub fn histogram(&self, name: &str) -> Vec<u64> {
        let name = name.strip_prefix("wasmcustom.").unwrap_or(name);
        let process = self.process.borrow();
        process
            .metrics
            .get(name)
            .map(|metric| metric.samples.clone())
            .unwrap_or_default()
    }

    /// Every counter and gauge by name.
    pub fn metrics(&self) -> BTreeMap<String, u64> {
        let process = self.process.borrow();
        process
            .metrics
            .iter()
            .filter(|(_, metric)| metric.kind != MetricKind::Histogram)
            .map(|(name, metric)| (name.clone(), metric.value))
            .collect()
    }

    /// Every line the guests logged, in order.
    pub fn logs(&self) -> Vec<LogLine> {
        self.process.borrow().logs.clone()
    }

    pub(super) fn vm_logs(&self, vm: usize) -> Vec<LogLine> {
        let process = self.process.borrow();
        process
            .logs
            .iter()
            .filter(|line| line.vm == vm)
            .cloned()
            .collect()
    }

    /// The value and CAS stored under shared-data `key`.
    pub fn shared_data(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.process.borrow().get_shared(key).cloned()
    }

    /// How many shared-data keys the process holds, and their bytes (keys and values).
    pub fn shared_data_usage(&self) -> SharedDataUsage {
        self.process.borrow().shared_data_usage()
    }

    /// The size of VM `vm`'s linear memory, in 64 KiB wasm pages.
    pub fn memory_pages(&mut self, vm: usize) -> u64 {
        self.vms[vm].memory_pages()
    }

    /// Calls and fuel per export, summed over all VMs.
    pub fn fuel(&self) -> BTreeMap<String, Fuel> {
        let mut total: BTreeMap<String, Fuel> = BTreeMap::new();
        for vm in &self.vms {
            for (name, fuel) in &vm.fuel {
                let sum = total.entry(name.clone()).or_default();
                sum.calls += fuel.calls;
                sum.fuel += fuel.fuel;
            }
        }
        total
    }

    /// Calls and fuel per export of VM `vm`.
    pub fn vm_fuel(&self, vm: usize) -> BTreeMap<String, Fuel> {
        self.vms[vm].fuel.clone()
    }

    /// Number of VMs (main thread + workers).
    pub fn vm_count(&self) -> usize {
        self.vms.len()
    }

    /// Whether VM `vm` still gets callbacks.
    pub fn vm_status(&self, vm: usize) -> VmStatus {
        self.vms[vm].status.clone()
    }
}
