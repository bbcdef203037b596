//! What one Envoy process shares between all VMs of a `vm_id`: shared data, shared queues, stats,
//! the log, the clusters, the clock, the gRPC streams and the token counter of calls and streams.
//!
//! Semantics follow proxy-wasm-cpp-host's `SharedData` and `SharedQueue` as Envoy uses them: one
//! CAS counter for the whole process that starts at 1 and moves on every set (so a CAS is never
//! reused, across keys too); a set with CAS 0 always succeeds, a set with a stale CAS fails with
//! CasMismatch, a set of a missing key succeeds whatever the CAS. Stats are shared by name: every
//! VM's increments go to the same counter, and a gauge holds what the last writer set.

use crate::abi::{LogLevel, MetricKind, Status};
use crate::clock::{Clock, Event};
use crate::grpc::Streams;
use crate::loopback::Loopback;
use crate::upstream::Upstream;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

/// One `proxy_log` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Virtual time since the host started.
    pub at: Duration,
    /// The VM that logged (0 = main thread, 1.. = workers).
    pub vm: usize,
    /// Level the guest gave.
    pub level: LogLevel,
    /// The message.
    pub message: String,
}

impl fmt::Display for LogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:>9.3}s vm{} {:?}] {}",
            self.at.as_secs_f64(),
            self.vm,
            self.level,
            self.message
        )
    }
}

/// One http call (probe) a guest dispatched, and what became of it. Times are virtual, since
/// the host started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRecord {
    /// The token the guest got for it.
    pub token: u32,
    /// The VM that dispatched it.
    pub vm: usize,
    /// The context that dispatched it.
    pub context: u32,
    /// Whether that context is a request's (a probe a request held at cold start sent), not a
    /// root's.
    pub from_request: bool,
    /// The cluster it was sent to.
    pub cluster: String,
    /// Its `:path`.
    pub path: String,
    /// When it was dispatched.
    pub sent: Duration,
    /// The status of the answer it gets: the backend's, or Envoy's own 503 (connection refused)
    /// or 504 (timeout); `None` if no answer ever comes (no timeout, a backend that hangs), or,
    /// for a real server's cluster ([`crate::Host::real_cluster`]), until its answer is taken.
    pub status: Option<u16>,
    /// Envoy's response code details of that answer: `via_upstream` for the backend's own.
    pub details: String,
    /// When the answer was handed to the guest (`proxy_on_http_call_response`); `None` while it
    /// is on its way, or if it never was (its VM had stopped, or was replaced).
    pub delivered: Option<Duration>,
}

/// A stat defined by the guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Metric {
    pub kind: MetricKind,
    /// Counter or gauge value.
    pub value: u64,
    /// Recorded values of a histogram.
    pub samples: Vec<u64>,
}

/// How much the process holds in shared data, summed over all keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedDataUsage {
    /// Number of keys.
    pub keys: usize,
    /// Bytes of the keys and their values together.
    pub bytes: usize,
}

struct Queue {
    owner_vm: usize,
    owner_context: u32,
    items: VecDeque<Vec<u8>>,
}

/// Process-wide state, shared by every VM's store.
#[derive(Default)]
pub(crate) struct Process {
    pub clock: Clock,
    shared_data: HashMap<String, (Vec<u8>, u32)>,
    last_cas: u32,
    queue_ids: HashMap<String, u32>,
    queues: Vec<Queue>,
    pub metrics: BTreeMap<String, Metric>,
    pub logs: Vec<LogLine>,
    pub upstreams: BTreeMap<String, Upstream>,
    /// The clusters served by a real server, and their calls.
    pub loopback: Loopback,
    /// The gRPC streams to those servers.
    pub grpc: Streams,
    /// Every http call dispatched, in order (so by token).
    pub calls: Vec<CallRecord>,
    last_token: u32,
}

impl Process {
    /// The value and CAS stored under `key`.
    pub(crate) fn get_shared(&self, key: &str) -> Option<&(Vec<u8>, u32)> {
        self.shared_data.get(key)
    }

    /// The number of keys and the bytes they and their values take.
    pub(crate) fn shared_data_usage(&self) -> SharedDataUsage {
        SharedDataUsage {
            keys: self.shared_data.len(),
            bytes: self
                .shared_data
                .iter()
                .map(|(key, (value, _))| key.len() + value.len())
                .sum(),
        }
    }

    /// Stores `value` under `key` unless `cas` is non-zero and stale.
    pub(crate) fn set_shared(&mut self, key: &str, value: Vec<u8>, cas: u32) -> Result<(), Status> {
        if let Some((_, current)) = self.shared_data.get(key) {
            if cas != 0 && cas != *current {
                return Err(Status::CasMismatch);
            }
        }
        // As cpp-host's nextCas: 1, 2, ... and never 0 after wrapping.
        self.last_cas = self.last_cas.wrapping_add(1).max(1);
        self.shared_data
            .insert(key.to_string(), (value, self.last_cas));
        Ok(())
    }

    /// The queue `name`, registered by `context` of `vm` if new.
    pub(crate) fn register_queue(&mut self, name: &str, vm: usize, context: u32) -> u32 {
        if let Some(id) = self.queue_ids.get(name) {
            return *id;
        }
        self.queues.push(Queue {
            owner_vm: vm,
            owner_context: context,
            items: VecDeque::new(),
        });
        let id = self.queues.len() as u32;
        self.queue_ids.insert(name.to_string(), id);
        id
    }

    /// The id of the queue `name`, if registered.
    pub(crate) fn resolve_queue(&self, name: &str) -> Option<u32> {
        self.queue_ids.get(name).copied()
    }

    fn queue(&mut self, id: u32) -> Result<&mut Queue, Status> {
        let index = usize::try_from(id).ok().and_then(|id| id.checked_sub(1));
        index
            .and_then(|index| self.queues.get_mut(index))
            .ok_or(Status::NotFound)
    }

    /// Appends to queue `id` and tells its owner, at once, that it is ready.
    pub(crate) fn enqueue(&mut self, id: u32, value: Vec<u8>) -> Result<(), Status> {
        let queue = self.queue(id)?;
        queue.items.push_back(value);
        let event = Event::QueueReady {
            vm: queue.owner_vm,
            context: queue.owner_context,
            queue: id,
        };
        self.clock.schedule(Duration::ZERO, event);
        Ok(())
    }

    /// Takes the oldest item of queue `id`.
    pub(crate) fn dequeue(&mut self, id: u32) -> Result<Vec<u8>, Status> {
        self.queue(id)?.items.pop_front().ok_or(Status::Empty)
    }

    /// The record of the http call with `token`.
    pub(crate) fn call_mut(&mut self, token: u32) -> Option<&mut CallRecord> {
        let at = self.calls.binary_search_by_key(&token, |c| c.token).ok()?;
        self.calls.get_mut(at)
    }

    /// A token no other http call or gRPC stream of the process has.
    pub(crate) fn next_token(&mut self) -> u32 {
        self.last_token += 1;
        self.last_token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_values_start_at_one_and_grow_across_keys() {
        let mut process = Process::default();
        process.set_shared("a", b"1".to_vec(), 0).unwrap();
        process.set_shared("b", b"1".to_vec(), 0).unwrap();
        assert_eq!(process.get_shared("a").map(|v| v.1), Some(1));
        assert_eq!(process.get_shared("b").map(|v| v.1), Some(2));
        assert_eq!(
            process.set_shared("a", b"2".to_vec(), 2),
            Err(Status::CasMismatch)
        );
        assert_eq!(process.set_shared("a", b"2".to_vec(), 1), Ok(()));
        assert_eq!(process.get_shared("a").map(|v| v.1), Some(3));
    }
}
