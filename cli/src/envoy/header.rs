//! The comment the file opens with: what the deployment is, what it was written from, how to
//! deploy it and how it fits together.

use upcheck_policy::duration::display;
use upcheck_policy::RoutingMode;

use super::Settings;
use crate::deployment::{probe_text, Deployment, POOL};
use crate::tree::comment;

/// Writes the opening comment of `d`'s file, as `s` asks, to `out`.
pub(super) fn write(out: &mut String, d: &Deployment, s: &Settings) {
    let active = &d.config.health_checks.active;
    let passive = &d.config.health_checks.passive;
    let header = d.config.route_header.to_ascii_lowercase();
    let backends: Vec<String> = d
        .backends
        .iter()
        .map(|b| {
            if b.probe == b.address {
                format!("{} at {}", b.name, b.address)
            } else {
                format!(
                    "{} at {} (probed at port {})",
                    b.name,
                    b.address,
                    b.probe.port()
                )
            }
        })
        .collect();
    let (intro, places, other) = match d.routing {
        RoutingMode::Host => (
            "Envoy 1.40 on the load balancer, with upcheck deciding which app server gets each \
             request, and Envoy retrying a request whose backend failed it on another backend \
             (\"invisible failover\").",
            "Each address is in three places below (the pool, the backend's probe cluster, the \
             plugin configuration) and they must agree",
            "`upcheck envoy --routing cluster` writes the same deployment without retries.",
        ),
        RoutingMode::Cluster => (
            "The simple deployment: Envoy 1.40 on the load balancer, with upcheck deciding which \
             app server gets each request; one cluster per backend, no retries. A request that \
             reaches a backend as it breaks fails for its user. `upcheck envoy --routing host` \
             writes the recommended deployment, which retries those requests on another \
             backend.",
            "Each backend's address is in its cluster below",
            "",
        ),
    };
    let how = match d.routing {
        RoutingMode::Host => format!(
            "How it fits together: Envoy itself runs no health checks and ejects nothing. The \
             upcheck filter probes every backend ({probe}, through the backend's own probe \
             cluster), watches every response, picks one trusted backend per request and writes \
             its address, then the address of the backend a retry should go to, into the \
             `{header}` request header (`routing: host`). Every request goes to the one `{POOL}` \
             cluster, whose override_host load balancer sends each attempt to the next address \
             in that header. If the first attempt fails in a way that is safe to repeat, the \
             route's retry policy sends the request once more, to another backend; the user \
             sees only the second answer. The filter reads how many attempts a request took and \
             counts the failed first attempt against the backend it picked, so {fails} such \
             failures within {window} still eject it, as they do without retries.",
            probe = probe_text(active),
            fails = passive.max_fails,
            window = display(passive.fail_duration),
        ),
        RoutingMode::Cluster => format!(
            "How it fits together: Envoy itself runs no health checks and ejects nothing. The \
             upcheck filter probes every backend ({probe}), watches every response, picks one \
             trusted backend per request and names its cluster in the `{header}` request header; \
             the route sends the request to the cluster of that name ({fails} failures within \
             {window} eject a backend). A cluster per backend is what lets the filter both probe \
             and route by name.",
            probe = probe_text(active),
            fails = passive.max_fails,
            window = display(passive.fail_duration),
        ),
    };
    let change = match &s.membership {
        None => format!(
            "The backends: {}. {places}: to change one, change the input and run `upcheck \
             envoy` again.",
            backends.join(", ")
        ),
        Some(dir) => format!(
            "The backends when it was written: {}. They live in files of {}, which Envoy reads \
             while it runs: `upcheck backends --config FILE add`, `drain`, `remove` change them \
             with no restart, and `list` says which there are now. Running `upcheck envoy` again \
             starts them over from its input.",
            backends.join(", "),
            dir.display()
        ),
    };
    let text = format!(
        "{intro}\n\
         \n\
         Written by `upcheck envoy` from {input}. {change}\n\
         \n\
         To deploy: copy upcheck.wasm (`make build` writes target/upcheck.wasm) to {wasm}, then\n\
         \x20 envoy -c envoy.yaml --concurrency {concurrency}\n\
         Check the file first with `envoy --mode validate -c envoy.yaml`. {other}\n\
         \n\
         {how}\n\
         \n\
         The status page, on the load balancer:\n\
         \x20 curl http://{status}{path}\n\
         (and {path}.json, {path}.html in a browser). It is served on a listener of its \
         own{closed}.",
        input = s.input,
        wasm = s.wasm,
        concurrency = s.concurrency,
        status = s.status,
        path = d.page.path,
        closed = if s.status.ip().is_loopback() {
            ", bound to loopback: no user request pays for it, and no other machine reaches it"
        } else {
            ": no user request pays for it"
        },
    );
    comment(out, 0, &text);
}
