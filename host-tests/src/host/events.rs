//! The event loop: the virtual clock moved forward, and each event that falls due delivered to
//! its VM (ticks, http-call answers, gRPC arrivals, queues, the users' requests and their
//! upstreams' answers), with what real servers sent since the last look put on the agenda first.

use super::Host;
use crate::clock::Event;
use crate::error::HostError;
use crate::grpc::Arrival;
use crate::options::Profile;
use crate::state::ROOT_CONTEXT;
use crate::vm::VmStatus;
use std::time::Duration;
use wasmtime::Val;

impl Host {
    /// Moves the virtual clock forward by `by`, delivering everything that falls due on the way.
    pub fn advance(&mut self, by: Duration) -> Result<(), HostError> {
        let deadline = self.now() + by;
        self.advance_to(deadline)
    }

    pub(super) fn advance_to(&mut self, deadline: Duration) -> Result<(), HostError> {
        self.take_real_answers();
        loop {
            let event = self.process.borrow_mut().clock.pop_due(deadline);
            let Some(event) = event else { break };
            self.handle(event)?;
        }
        self.process.borrow_mut().clock.settle_at(deadline);
        Ok(())
    }

    fn handle(&mut self, event: Event) -> Result<(), HostError> {
        match event {
            Event::Tick { vm } => {
                let state = self.vms[vm].state_mut();
                state.tick_scheduled = false;
                let period = state.tick_period;
                if self.vms[vm].status != VmStatus::Running {
                    return Ok(());
                }
                if !period.is_zero() {
                    // Envoy re-arms the timer before running the tick handler.
                    self.vms[vm].state_mut().tick_scheduled = true;
                    self.process
                        .borrow_mut()
                        .clock
                        .schedule(period, Event::Tick { vm });
                }
                self.callback(vm, "proxy_on_tick", ROOT_CONTEXT, &[])?;
                self.settle(vm)
            }
            Event::VmUp { vm } => self.vm_up(vm),
            Event::CallResponse {
                vm,
                context,
                token,
                reply,
            } => {
                let state = self.vms[vm].state_mut();
                if !state.is_root(context) && !state.streams.contains_key(&context) {
                    return Ok(()); // Envoy cancels the calls of a finished stream.
                }
                // ngx_wasm_module names the filter's root context in the answer to a request's
                // own call, while the host calls made meanwhile act on the request.
                let named = match self.options.profile {
                    Profile::Nginx => state.streams.get(&context).map_or(context, |s| s.root),
                    Profile::Envoy => context,
                };
                let args = [
                    token as i32,
                    reply.headers.len() as i32,
                    reply.body.len() as i32,
                    0,
                ];
                state.call_response = Some(reply);
                if self.vms[vm].status == VmStatus::Running {
                    let now = self.now();
                    if let Some(call) = self.process.borrow_mut().call_mut(token) {
                        call.delivered = Some(now);
                    }
                }
                let args: Vec<Val> = std::iter::once(named as i32)
                    .chain(args)
                    .map(Val::I32)
                    .collect();
                let delivered = self.guest(vm, "proxy_on_http_call_response", context, &args);
                self.vms[vm].state_mut().call_response = None;
                delivered?;
                self.settle(vm)?;
                if self.options.profile == Profile::Nginx {
                    self.resume_after_calls(vm, context)?;
                }
                Ok(())
            }
            Event::GrpcArrival {
                vm,
                context,
                token,
                arrival,
            } => self.deliver_grpc(vm, context, token, arrival),
            Event::GrpcCallEnd {
                vm,
                context,
                token,
                arrival,
            } => self.hand_grpc_arrival(vm, context, token, arrival),
            Event::QueueReady { vm, context, queue } => {
                self.callback(vm, "proxy_on_queue_ready", context, &[queue as i32])?;
                self.settle(vm)
            }
            Event::RequestArrives { record } => self.arrive(record),
            Event::UpstreamReply { vm, context, reply } => {
                self.upstream_replied(vm, context, reply)
            }
            Event::ClientGivesUp { vm, context } => self.give_up(vm, context),
        }
    }

    /// Hands `arrival` (a message or a close) of unary gRPC call or stream `token` to `context`,
    /// unless the context is gone (Envoy cancels the calls and resets the streams of a finished
    /// one).
    fn hand_grpc_arrival(
        &mut self,
        vm: usize,
        context: u32,
        token: u32,
        arrival: Arrival,
    ) -> Result<(), HostError> {
        let state = self.vms[vm].state_mut();
        if !state.is_root(context) && !state.streams.contains_key(&context) {
            return Ok(());
        }
        let (export, last) = arrival.callback();
        state.grpc_arrival = Some(arrival);
        let delivered = self.callback(vm, export, context, &[token as i32, last]);
        self.vms[vm].state_mut().grpc_arrival = None;
        delivered?;
        self.settle(vm)
    }

    /// Hands what arrived on gRPC stream `token` to the context that opened it, unless the
    /// stream was cancelled or the context is gone (Envoy resets the streams of a finished one).
    fn deliver_grpc(
        &mut self,
        vm: usize,
        context: u32,
        token: u32,
        arrival: Arrival,
    ) -> Result<(), HostError> {
        if !self.process.borrow_mut().grpc.deliver(token, &arrival) {
            return Ok(());
        }
        self.hand_grpc_arrival(vm, context, token, arrival)
    }

    /// Puts what the real servers sent since the last look on the agenda, due now: http call
    /// answers, then what arrived on gRPC streams, in order.
    pub(super) fn take_real_answers(&mut self) {
        let mut process = self.process.borrow_mut();
        let arrivals = process.grpc.take_arrivals();
        for (vm, context, token, reply) in process.loopback.take_answers() {
            if let Some(call) = process.call_mut(token) {
                call.status = Some(reply.status);
                call.details.clone_from(&reply.details);
            }
            let event = Event::CallResponse {
                vm,
                context,
                token,
                reply,
            };
            process.clock.schedule(Duration::ZERO, event);
        }
        for (vm, context, token, arrival) in arrivals {
            let event = Event::GrpcArrival {
                vm,
                context,
                token,
                arrival,
            };
            process.clock.schedule(Duration::ZERO, event);
        }
    }
}
