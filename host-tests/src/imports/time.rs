//! Time: the guest's clock and its tick timer, both on the virtual clock, so a test decides when
//! every tick falls and what time the guest reads.

use super::{status, trap, Ctx};
use crate::clock::Event;
use crate::memory::{write, Fault, Hostcall};
use crate::options::Profile;
use crate::state::HostState;
use std::time::Duration;
use wasmtime::Linker;

/// The hostcalls of time and the tick.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    l.func_wrap(
        "env",
        "proxy_get_current_time_nanoseconds",
        |mut c: Ctx, ptr: i32| {
            let now = c.data().process.borrow().clock.wall_nanos();
            status(write(&mut c, ptr, &now.to_le_bytes()))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_set_tick_period_milliseconds",
        |mut c: Ctx, ms: i32| status(set_tick_period(&mut c, ms)),
    )?;
    Ok(())
}

/// Envoy arms the tick timer when a period is first set and re-arms it after every tick; a new
/// period takes effect from the next tick, and period 0 stops ticking after the pending one.
/// Only the users' listener's root context ticks here: a tick set by another listener's plugin
/// traps, loudly, rather than being mixed up with it.
fn set_tick_period(c: &mut Ctx, ms: i32) -> Hostcall {
    let state = c.data_mut();
    if state.listener_roots.contains(&state.effective_context) {
        return Err(Fault::Trap(wasmtime::Error::msg(format!(
            "not emulated by this host: a tick period set by root context {} (only the users' \
             listener's plugin ticks)",
            state.effective_context
        ))));
    }
    let period = Duration::from_millis(u64::from(ms as u32));
    if state.profile == Profile::Nginx && !period.is_zero() && !state.tick_period.is_zero() {
        return trap("tick_period already set".to_string());
    }
    state.tick_period = period;
    if !state.tick_period.is_zero() && !state.tick_scheduled {
        state.tick_scheduled = true;
        let event = Event::Tick { vm: state.vm };
        state
            .process
            .borrow_mut()
            .clock
            .schedule(state.tick_period, event);
    }
    Ok(())
}
