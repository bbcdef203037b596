//! The calls on the wire and what comes of them: each call goes out as a [`Request`], is
//! remembered by the adapter's token until its answer, or the proxy's refusal to send it, comes
//! back, and is then settled by the concern it belongs to. A failure is remembered as the reason
//! given when this balancer falls back to local; one that names the token drops it, so the
//! next tick authenticates again.

use super::{gateway, Call, FleetPart, Request};
use crate::time::Time;

impl FleetPart {
    /// Whether `token` is one of this fleet's calls (not a probe's).
    pub fn owns(&self, token: u32) -> bool {
        self.on_wire.iter().any(|(t, _)| *t == token)
    }

    /// `call` is on the wire as `token`.
    pub fn sent(&mut self, call: Call, token: u32) {
        self.on_wire.push((token, call));
    }

    /// The proxy refused to send `call`, saying `why`.
    pub fn refused(&mut self, call: Call, why: &str, now: Time) {
        self.settle(
            call,
            Err(format!("the proxy refused the call ({why})")),
            now,
        );
    }

    /// The answer to `token` (status `None` if the call was reset or timed out): true if it was
    /// this fleet's.
    pub fn answered(&mut self, token: u32, status: Option<u16>, body: &[u8], now: Time) -> bool {
        let Some(at) = self.on_wire.iter().position(|(t, _)| *t == token) else {
            return false;
        };
        let (_, call) = self.on_wire.swap_remove(at);
        self.settle(call, Ok((status, body)), now);
        true
    }

    /// Whether a call `wanted` picks out is on the wire.
    pub(super) fn busy(&self, wanted: impl Fn(&Call) -> bool) -> bool {
        self.on_wire.iter().any(|(_, call)| wanted(call))
    }

    /// `call` to `path` with `body`, as a request with the token and the timeout in force.
    pub(super) fn request(&self, call: Call, path: &'static str, body: String) -> Request {
        Request {
            call,
            path,
            body,
            token: self.join.auth.clone(),
            timeout: self.timeout(),
        }
    }

    /// A call failed, saying `why`.
    pub(super) fn failed(&mut self, why: String) {
        if self.settings.credentials().is_some() && why.contains("token") {
            self.join.auth = None; // expired or revoked: authenticate again
        }
        self.why = why;
    }

    /// What came of `call`: its answer (status and body), or why it never went out.
    fn settle(&mut self, call: Call, answer: Result<(Option<u16>, &[u8]), String>, now: Time) {
        let (status, body) = match &answer {
            Ok((status, body)) => (*status, *body),
            Err(_) => (None, &[][..]),
        };
        let fail = |why: String| match &answer {
            Err(refused) => refused.clone(),
            Ok(_) => why,
        };
        match call {
            Call::Authenticate => self.authenticated(gateway::token(status, body).map_err(fail)),
            Call::Grant => self.granted(gateway::granted(status, body).map_err(fail), now),
            Call::KeepAlive => self.kept_alive(gateway::kept(status, body).map_err(fail), now),
            Call::Register => self.put_registered(gateway::put_taken(status, body).map_err(fail)),
            Call::Read => self.read_answered(gateway::kvs(status, body).map_err(fail), now),
            Call::Claim(key) => self.claimed(key, gateway::succeeded(status, body).map_err(fail)),
            Call::Release(key) => {
                self.released(key, gateway::succeeded(status, body).map_err(fail));
            }
            Call::Publish(key, health) => {
                self.published(key, health, gateway::put_taken(status, body).map_err(fail));
            }
            Call::Evidence(key, value) => match gateway::put_taken(status, body) {
                Ok(()) => self.told(key, value),
                Err(why) => self.failed(fail(why)),
            },
            Call::Traffic(counts) => match gateway::put_taken(status, body) {
                Ok(()) => self.traffic.told = Some((now, counts)),
                Err(why) => self.failed(fail(why)),
            },
            Call::GrantEjection(key, standing) => match gateway::granted(status, body) {
                Ok(lease) => self.ejection_granted(key, standing, Some(lease)),
                Err(why) => {
                    self.ejection_granted(key, standing, None);
                    self.failed(fail(why));
                }
            },
            Call::Eject(key, until) => match gateway::put_taken(status, body) {
                Ok(()) => self.ejection_told(key, until, None),
                Err(why) => {
                    let why = fail(why);
                    self.ejection_told(key, until, Some(&why));
                    self.failed(why);
                }
            },
        }
    }
}
