//! The gRPC streams of one process as the guests see them: opened, sent on, closed or cancelled
//! by the context that opened them, and what arrived taken in and booked on each stream's record.

use super::wire::{frame, request, run, Command, Report};
use super::{Arrival, RealStream, MAX_MESSAGE, MAX_STREAMS};
use crate::abi::{Headers, Status};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// A stream the guest may still address.
struct Open {
    vm: usize,
    context: u32,
    commands: UnboundedSender<Command>,
    /// The request side has ended (a send with end of stream, or a close).
    ended: bool,
    /// The guest closed it.
    closed: bool,
    /// The server closed it (delivered).
    remote_closed: bool,
    /// Index of its record.
    record: usize,
}

/// A stream to open, as the guest asked for it.
pub(crate) struct Opening<'a> {
    pub token: u32,
    pub vm: usize,
    pub context: u32,
    pub cluster: &'a str,
    pub address: SocketAddr,
    pub service: &'a str,
    pub method: &'a str,
    pub metadata: &'a Headers,
    /// Virtual time of the opening.
    pub now: Duration,
}

/// The gRPC streams of one process.
pub(crate) struct Streams {
    open: BTreeMap<u32, Open>,
    /// Where the streams' threads send what arrived, and where the host takes it.
    report_to: mpsc::Sender<(u32, Arrival)>,
    arrived: mpsc::Receiver<(u32, Arrival)>,
    /// Every stream opened, in order (so by token).
    pub records: Vec<RealStream>,
}

impl Default for Streams {
    fn default() -> Self {
        let (report_to, arrived) = mpsc::channel();
        Streams {
            open: BTreeMap::new(),
            report_to,
            arrived,
            records: Vec::new(),
        }
    }
}

impl Streams {
    /// Opens `opening` on a thread of its own. InternalFailure when [`MAX_STREAMS`] are open or
    /// the names or metadata make no HTTP/2 request (as Envoy when its client cannot start one).
    pub(crate) fn open(&mut self, opening: Opening<'_>) -> Result<(), Status> {
        if self.open.values().filter(|s| !s.remote_closed).count() >= MAX_STREAMS {
            return Err(Status::InternalFailure);
        }
        let request = request(
            opening.cluster,
            opening.service,
            opening.method,
            opening.metadata,
        )
        .ok_or(Status::InternalFailure)?;
        let (commands, receiver) = unbounded_channel();
        let report = Report {
            token: opening.token,
            to: self.report_to.clone(),
        };
        let address = opening.address;
        std::thread::spawn(move || run(address, request, receiver, report));
        self.open.insert(
            opening.token,
            Open {
                vm: opening.vm,
                context: opening.context,
                commands,
                ended: false,
                closed: false,
                remote_closed: false,
                record: self.records.len(),
            },
        );
        self.records.push(RealStream {
            token: opening.token,
            vm: opening.vm,
            cluster: opening.cluster.to_string(),
            service: opening.service.to_string(),
            method: opening.method.to_string(),
            opened: opening.now,
            messages_out: 0,
            bytes_out: 0,
            messages_in: 0,
            bytes_in: 0,
            status: None,
            cancelled: false,
        });
        Ok(())
    }

    /// The stream `token` of `context` in `vm`.
    fn find(&mut self, vm: usize, context: u32, token: u32) -> Option<&mut Open> {
        self.open
            .get_mut(&token)
            .filter(|s| (s.vm, s.context) == (vm, context))
    }

    /// `proxy_grpc_send`: NotFound for a stream the context does not have; BadArgument after
    /// its request side ended (Envoy asserts) or for a message over [`MAX_MESSAGE`].
    pub(crate) fn send(
        &mut self,
        vm: usize,
        context: u32,
        token: u32,
        message: &[u8],
        end: bool,
    ) -> Result<(), Status> {
        let stream = self.find(vm, context, token).ok_or(Status::NotFound)?;
        if stream.ended || message.len() > MAX_MESSAGE {
            return Err(Status::BadArgument);
        }
        stream.ended = end;
        // A stream whose thread is over takes no more; the close tells the guest why.
        let _ = stream.commands.send(Command::Send(frame(message), end));
        let record = stream.record;
        if let Some(record) = self.records.get_mut(record) {
            record.messages_out += 1;
            record.bytes_out += message.len() as u64;
        }
        Ok(())
    }

    /// `proxy_grpc_close`: ends the request side; the stream is forgotten once the server has
    /// closed it too.
    pub(crate) fn close(&mut self, vm: usize, context: u32, token: u32) -> Result<(), Status> {
        let stream = self.find(vm, context, token).ok_or(Status::NotFound)?;
        if !stream.ended {
            stream.ended = true;
            let _ = stream.commands.send(Command::End);
        }
        stream.closed = true;
        if stream.remote_closed {
            self.open.remove(&token);
        }
        Ok(())
    }

    /// `proxy_grpc_cancel`: resets the stream; nothing more is delivered.
    pub(crate) fn cancel(&mut self, vm: usize, context: u32, token: u32) -> Result<(), Status> {
        self.find(vm, context, token).ok_or(Status::NotFound)?;
        self.forget(token);
        Ok(())
    }

    /// Drops stream `token`, which resets it if it is still running.
    fn forget(&mut self, token: u32) {
        if let Some(stream) = self.open.remove(&token) {
            if let Some(record) = self.records.get_mut(stream.record) {
                record.cancelled = !stream.remote_closed;
            }
        }
    }

    /// Resets every stream of `vm`, as Envoy does when it destroys a VM's contexts.
    pub(crate) fn forget_vm(&mut self, vm: usize) {
        let tokens: Vec<u32> = self
            .open
            .iter()
            .filter(|(_, s)| s.vm == vm)
            .map(|(token, _)| *token)
            .collect();
        for token in tokens {
            self.forget(token);
        }
    }

    /// What arrived since the last look, for streams still open: (vm, context, token, arrival).
    pub(crate) fn take_arrivals(&mut self) -> Vec<(usize, u32, u32, Arrival)> {
        let mut arrivals = Vec::new();
        while let Ok((token, arrival)) = self.arrived.try_recv() {
            if let Some(stream) = self.open.get(&token) {
                arrivals.push((stream.vm, stream.context, token, arrival));
            }
        }
        arrivals
    }

    /// Books `arrival` on stream `token` as it is delivered; false if the stream was cancelled
    /// since it arrived (then nothing is delivered).
    pub(crate) fn deliver(&mut self, token: u32, arrival: &Arrival) -> bool {
        let Some(stream) = self.open.get_mut(&token) else {
            return false;
        };
        let record = self.records.get_mut(stream.record);
        match (arrival, record) {
            (Arrival::Message(message), Some(record)) => {
                record.messages_in += 1;
                record.bytes_in += message.len() as u64;
            }
            (Arrival::Close { status, .. }, record) => {
                if let Some(record) = record {
                    record.status = Some(*status);
                }
                stream.remote_closed = true;
                if stream.closed {
                    self.open.remove(&token);
                }
            }
            _ => {}
        }
        true
    }
}
