//! What lies behind the clusters: scripted upstreams, real servers named for a cluster, and what
//! each was sent, so a test sets up the backends' behaviour and checks what reached them.

use super::Host;
use crate::grpc::RealStream;
use crate::loopback::RealCall;
use crate::process::CallRecord;
use crate::upstream::{Counts, Script, Upstream};
use std::cell::RefMut;
use std::net::SocketAddr;

impl Host {
    /// Scripts upstream (cluster) `name`, creating it on first use at `127.0.0.1:3001`,
    /// `127.0.0.1:3002`... in order of creation. An unscripted upstream answers 200 everywhere.
    pub fn upstream(&mut self, name: &str) -> Script<'_> {
        let upstream = RefMut::map(self.process.borrow_mut(), |process| {
            let port = 3001 + process.upstreams.len() as u16;
            process
                .upstreams
                .entry(name.to_string())
                .or_insert_with(|| Upstream::new(port))
        });
        Script::new(upstream)
    }

    /// The `127.0.0.1:port` address of upstream `name`, if it exists: what an NGINX
    /// configuration names it by ([`Profile::Nginx`] dispatches and routes by address).
    pub fn address(&self, name: &str) -> Option<String> {
        let process = self.process.borrow();
        process.upstreams.get(name).map(|u| u.address.clone())
    }

    /// Http calls to cluster `name` go to the real HTTP/1.1 server at `address` (etcd's client
    /// URL, say) from now on, instead of a scripted upstream ([`crate::loopback`]), and gRPC
    /// streams to it over HTTP/2 in plaintext ([`crate::grpc`]). Each answer, and each thing
    /// arriving on a stream, is delivered at the first [`Host::advance`] after it arrived, at that
    /// virtual instant: the caller paces the virtual clock to real time.
    pub fn real_cluster(&mut self, name: &str, address: SocketAddr) {
        self.process.borrow_mut().loopback.serve(name, address);
    }

    /// Every call to a real server's cluster answered so far, in the order taken in.
    pub fn real_calls(&self) -> Vec<RealCall> {
        self.process.borrow().loopback.answered.clone()
    }

    /// Every gRPC stream opened to a real server's cluster so far ([`crate::grpc`]), in order,
    /// with what went each way and how it ended.
    pub fn real_streams(&self) -> Vec<RealStream> {
        self.process.borrow().grpc.records.clone()
    }

    /// What upstream `cluster` was sent so far (zero counts if it does not exist).
    pub fn counts(&self, cluster: &str) -> Counts {
        let process = self.process.borrow();
        process
            .upstreams
            .get(cluster)
            .map(|upstream| upstream.counts.clone())
            .unwrap_or_default()
    }

    /// Http calls (probes) dispatched to `cluster` so far, all paths.
    pub fn probes_sent(&self, cluster: &str) -> u64 {
        self.counts(cluster).probes.values().sum()
    }

    /// Every http call (probe) the guests dispatched so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.process.borrow().calls.clone()
    }

    /// User requests routed to `cluster` so far, all paths.
    pub fn requests_routed(&self, cluster: &str) -> u64 {
        self.counts(cluster).requests.values().sum()
    }
}
