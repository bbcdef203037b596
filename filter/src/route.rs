//! The route header: the core's pick written for the proxy, every copy the client sent
//! replaced. In `host` routing the value names the retry's backend too, kept written per pick
//! ([`RouteValues`]) so that a request allocates nothing for it.

use crate::abi::HeaderMap;
use crate::hostcall as hostcalls;
use upcheck_policy::{Pool, RoutingMode};

/// Sets the current request's route header to `backend`'s pick, replacing every client-supplied
/// copy (a replace drops all values of the name, which the host matches case-insensitively, in
/// Envoy as in the test host). With no backend the header is only removed. In `host` routing
/// the header lists a second address after the pick, the backend whose turn is next (the pick
/// again when it is alone): Envoy's `override_host` policy takes one address per attempt, so a
/// retry goes where upcheck says, not to a backend it took out of rotation. The two are joined
/// in `joined` ([`RouteValues`]), so a request allocates nothing for its header; a single name goes
/// to the host as the configuration holds it.
pub fn route<H>(pool: &Pool<H>, backend: Option<usize>, joined: &mut RouteValues) {
    let config = pool.config();
    let header = config.route_header.as_str();
    let Some(up) = backend.and_then(|i| config.upstreams.get(i)) else {
        let _ = hostcalls::remove_map_value(HeaderMap::Request, header);
        return;
    };
    let pick = up.route_value(config.routing);
    let retry = match (config.routing, backend) {
        (RoutingMode::Host, Some(i)) => Some((i, pool.retry_choice(i))),
        _ => None,
    };
    let value = match retry {
        Some((i, retry)) => joined.value(pool, i, retry),
        None => Some(pick),
    };
    let _ = hostcalls::set_map_value(HeaderMap::Request, header, value);
}

/// The host routing header's values as written, one per backend picked: its address, a comma,
/// and the address of the backend its retry goes to. The rotation's order repeats, so a
/// backend's next pick mostly has the same retry as its last: its value is then handed to the
/// host as it stands, nothing copied.
#[derive(Debug, Default)]
pub struct RouteValues {
    /// The configuration they were written under ([`Pool::generation`]).
    generation: u32,
    /// By the pick's position: the retry's position and the value.
    by_pick: Vec<Option<(usize, String)>>,
}

impl RouteValues {
    /// The header's value for a pick of `pick` whose retry goes to `retry`, both backends of
    /// `pool`; none if either is not configured.
    fn value<H>(&mut self, pool: &Pool<H>, pick: usize, retry: usize) -> Option<&str> {
        let config = pool.config();
        if self.generation != pool.generation() || self.by_pick.len() != config.upstreams.len() {
            self.generation = pool.generation();
            self.by_pick.clear();
            self.by_pick.resize_with(config.upstreams.len(), || None);
        }
        let slot = self.by_pick.get_mut(pick)?;
        if slot.as_ref().is_none_or(|(written, _)| *written != retry) {
            let address = |i: usize| Some(config.upstreams.get(i)?.route_value(config.routing));
            let value = slot.get_or_insert_with(|| (retry, String::new()));
            value.0 = retry;
            value.1.clear();
            value.1.push_str(address(pick)?);
            value.1.push(',');
            value.1.push_str(address(retry)?);
        }
        slot.as_ref().map(|(_, value)| value.as_str())
    }
}
