//! Metrics: counters, gauges and histograms defined per VM by name and kept process-wide, as
//! Envoy's stats are; NGINX's profile traps on a metric used as the other kind, and on reading one
//! it does not know (`ngx_proxy_wasm_hfuncs_get_metric`).

use super::{status, trap, Ctx};
use crate::abi::{MetricKind, Status};
use crate::memory::{read_string, write, write_u32, Hostcall};
use crate::options::Profile;
use crate::process::Metric;
use crate::state::HostState;
use wasmtime::Linker;

/// The hostcalls of metrics.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    l.func_wrap(
        "env",
        "proxy_define_metric",
        |mut c: Ctx, kind: i32, name_ptr: i32, name_len: i32, id_ptr: i32| {
            status((|| {
                let kind = MetricKind::from_raw(kind).ok_or(Status::BadArgument)?;
                let name = read_string(&mut c, name_ptr, name_len)?;
                let id = define_metric(c.data_mut(), kind, name);
                write_u32(&mut c, id_ptr, id)
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_get_metric",
        |mut c: Ctx, id: i32, ptr: i32| {
            if c.data().profile == Profile::Nginx && with_metric(c.data(), id, |_| Ok(())).is_err()
            {
                status(trap::<()>(format!("could not retrieve metric id \"{id}\"")))?;
            }
            status((|| {
                let value = with_metric(c.data(), id, |metric| match metric.kind {
                    MetricKind::Histogram => Err(Status::BadArgument),
                    _ => Ok(metric.value),
                })?;
                write(&mut c, ptr, &value.to_le_bytes())
            })())
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_record_metric",
        |c: Ctx, id: i32, value: i64| {
            let value = value as u64;
            if c.data().profile == Profile::Nginx {
                status(nginx_metric(
                    c.data(),
                    id,
                    MetricKind::Counter,
                    "is a counter",
                ))?;
            }
            status(with_metric(c.data(), id, |metric| {
                match metric.kind {
                    MetricKind::Counter => metric.value = metric.value.saturating_add(value),
                    MetricKind::Gauge => metric.value = value,
                    MetricKind::Histogram => metric.samples.push(value),
                }
                Ok(())
            }))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_increment_metric",
        |c: Ctx, id: i32, offset: i64| {
            if c.data().profile == Profile::Nginx {
                status(nginx_metric(
                    c.data(),
                    id,
                    MetricKind::Gauge,
                    "not a counter",
                ))?;
            }
            status(with_metric(c.data(), id, |metric| {
                let magnitude = offset.unsigned_abs();
                match (metric.kind, offset > 0) {
                    (MetricKind::Counter, true) | (MetricKind::Gauge, true) => {
                        metric.value = metric.value.saturating_add(magnitude)
                    }
                    (MetricKind::Gauge, false) => {
                        metric.value = metric.value.saturating_sub(magnitude)
                    }
                    _ => return Err(Status::BadArgument),
                }
                Ok(())
            }))
        },
    )?;
    Ok(())
}

/// The id of metric `name` in this VM (defining it process-wide on first use).
fn define_metric(state: &mut HostState, kind: MetricKind, name: String) -> u32 {
    let index = match state.metric_names.iter().position(|known| *known == name) {
        Some(index) => index,
        None => {
            state.metric_names.push(name.clone());
            state.metric_names.len() - 1
        }
    };
    let mut process = state.process.borrow_mut();
    process.metrics.entry(name).or_insert(Metric {
        kind,
        value: 0,
        samples: Vec::new(),
    });
    index as u32
}

/// Applies `f` to the process-wide stat behind this VM's metric `id`.
fn with_metric<T>(
    state: &HostState,
    id: i32,
    f: impl FnOnce(&mut Metric) -> Result<T, Status>,
) -> Hostcall<T> {
    let name = state
        .metric_names
        .get(id as u32 as usize)
        .ok_or(Status::NotFound)?;
    let mut process = state.process.borrow_mut();
    let metric = process.metrics.get_mut(name).ok_or(Status::NotFound)?;
    Ok(f(metric)?)
}

/// ngx_wasm_module's check before using metric `id`: one of kind `refused` (or no metric at
/// all) traps, with its message.
fn nginx_metric(state: &HostState, id: i32, refused: MetricKind, why: &str) -> Hostcall {
    let kind = with_metric(state, id, |metric| Ok(metric.kind)).ok();
    match kind {
        Some(kind) if kind != refused => Ok(()),
        Some(_) => trap(format!("could not use metric id \"{id}\": metric {why}")),
        None => trap(format!(
            "could not use metric id \"{id}\": metric not found"
        )),
    }
}
