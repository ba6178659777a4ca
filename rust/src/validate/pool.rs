//! The rules of a pool (name, generation, maxDevicesPerSlice, node selection, devices or
//! slices), and `prepare_desired`, the entry: a driver's pools validated into a `Desired`.
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::device::{check_devices, DeviceContext, NameSet};
use super::scalars::{is_driver_name, is_pool_name};
use super::slice::{
    check_carried, check_node_name, check_node_selector, check_shared_counters, pool_counter_sets,
    CounterSets,
};
use super::{
    check_bool, check_dict, check_int, check_list, check_str, to_value, Errors, Seg,
    MAX_DRIVER_LENGTH, MAX_POOL_NAME_LENGTH, NEGATIVE,
};
use crate::input::{get, list_len, Input};
use crate::model::{
    Desired, DesiredPool, DeviceList, PoolDevices, SliceSpec, MAX_DEVICES, MAX_DEVICES_ADVANCED,
};

// The messages (the same words as the pure-Python core).
const NODE_SELECTION_REQUIRED: &str = "no node selection: a Node owner, nodeSelector, allNodes, or slices with perDeviceNodeSelection is required";
const NODE_SELECTION_CONFLICT: &str =
    "at most one of a Node owner, nodeSelector, allNodes and perDeviceNodeSelection";
const BAD_DEVICES_PER_SLICE: &str = "must be from 1 to 128";
const PACKED_ONLY: &str = "only a flat devices list is packed: not allowed with slices";
const DEVICES_AND_COUNTERS: &str = "a slice has devices or sharedCounters, not both";

fn optional_bool<'i>(
    e: &mut Errors<'i>,
    entries: &[(&'i str, Input<'i>)],
    key: &'static str,
) -> bool {
    match get(entries, key) {
        None => false,
        Some(v) => e.field(key, |e| check_bool(e, v)).unwrap_or(false),
    }
}

/// The node selection a pool gives each of its slices: a Node owner's name, a node
/// selector, all nodes. The API wants exactly one per slice (perDeviceNodeSelection being
/// the fourth choice).
struct Selection {
    count: usize,
    node_selector: Option<Value>,
    all_nodes: bool,
}

impl Selection {
    fn new<'i>(e: &mut Errors<'i>, entries: &[(&'i str, Input<'i>)]) -> Selection {
        let mut count = 0;
        if let Some(raw) = get(entries, "nodeName") {
            e.field("nodeName", |e| check_node_name(e, raw));
            count += usize::from(!matches!(raw, Input::Str("")));
        }
        let all_nodes = optional_bool(e, entries, "allNodes");
        count += usize::from(all_nodes);
        let mut node_selector = None;
        if let Some(raw) = get(entries, "nodeSelector") {
            count += 1;
            e.field("nodeSelector", |e| {
                let before = e.count();
                check_node_selector(e, raw, true);
                if e.count() == before {
                    node_selector = to_value(raw, &|_, _| {});
                }
            });
        }
        Selection {
            count,
            node_selector,
            all_nodes,
        }
    }

    fn check(&self, e: &mut Errors<'_>, per_device: bool) {
        match self.count + usize::from(per_device) {
            0 => e.report(NODE_SELECTION_REQUIRED),
            1 => {}
            _ => e.report(NODE_SELECTION_CONFLICT),
        }
    }
}

fn check_pool<'i>(
    e: &mut Errors<'i>,
    driver: &str,
    name: &'i str,
    v: &Input<'i>,
    max_slice_bytes: usize,
) -> Option<DesiredPool> {
    if !is_pool_name(name) {
        e.report(format!("pool name must be at most {MAX_POOL_NAME_LENGTH} characters of /-separated DNS subdomains"));
    }
    let entries = check_dict(e, v)?;
    let devices = get(entries, "devices");
    let slices = get(entries, "slices");
    if devices.is_some() == slices.is_some() {
        e.report("exactly one of devices and slices is required");
    }
    let generation = match get(entries, "generation") {
        None => 0,
        Some(v) => e.field("generation", |e| {
            let g = check_int(e, v)?;
            if g < 0 {
                e.report(NEGATIVE);
            }
            Some(g)
        })?,
    };
    let max_devices_per_slice = match get(entries, "maxDevicesPerSlice") {
        None => MAX_DEVICES,
        Some(v) => e
            .field("maxDevicesPerSlice", |e| {
                let n = check_int(e, v)?;
                if slices.is_some() {
                    e.report(PACKED_ONLY);
                }
                match usize::try_from(n) {
                    Ok(n) if (1..=MAX_DEVICES).contains(&n) => Some(n),
                    _ => {
                        e.report(BAD_DEVICES_PER_SLICE);
                        None
                    }
                }
            })
            .unwrap_or(MAX_DEVICES),
    };
    let selection = Selection::new(e, entries);
    let mut names = NameSet::default();
    let no_counters = CounterSets::new();
    let pool_devices = match (devices, slices) {
        (None, Some(s)) => PoolDevices::Slices(e.field("slices", |e| {
            check_slices(e, s, driver, &selection, &mut names, max_slice_bytes)
        })),
        _ => {
            selection.check(e, false);
            match devices {
                Some(d) => {
                    let ctx = DeviceContext {
                        per_device_node_selection: false,
                        counter_sets: &no_counters,
                    };
                    PoolDevices::Flat(e.field("devices", |e| {
                        check_devices(e, d, &ctx, &mut names, max_slice_bytes).0
                    }))
                }
                None => PoolDevices::Flat(DeviceList::default()),
            }
        }
    };
    Some(DesiredPool {
        devices: pool_devices,
        node_selector: selection.node_selector,
        all_nodes: selection.all_nodes,
        generation,
        max_devices_per_slice,
    })
}

fn check_slices<'i>(
    e: &mut Errors<'i>,
    v: &Input<'i>,
    driver: &str,
    selection: &Selection,
    names: &mut NameSet<'i>,
    max_slice_bytes: usize,
) -> Vec<SliceSpec> {
    let Some(items) = check_list(e, v) else {
        return Vec::new();
    };
    let pool_sets = pool_counter_sets(items);
    // Counter set names are unique in the whole pool.
    let mut set_names: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        e.at(Seg::Index(i), |e| {
            let Some(entries) = check_dict(e, item) else {
                return;
            };
            let devices = get(entries, "devices");
            let shared = get(entries, "sharedCounters");
            let per_device = optional_bool(e, entries, "perDeviceNodeSelection");
            selection.check(e, per_device);
            if list_len(devices) > 0 && list_len(shared) > 0 {
                e.report(DEVICES_AND_COUNTERS);
            }
            let shared_value = shared.and_then(|s| {
                e.field("sharedCounters", |e| {
                    check_shared_counters(e, s, &mut set_names)
                })
            });
            let ctx = DeviceContext {
                per_device_node_selection: per_device,
                counter_sets: &pool_sets,
            };
            let (slice_devices, advanced) = match devices {
                None => (DeviceList::default(), false),
                Some(d) => e.field("devices", |e| {
                    check_devices(e, d, &ctx, names, max_slice_bytes)
                }),
            };
            let limit = if advanced {
                MAX_DEVICES_ADVANCED
            } else {
                MAX_DEVICES
            };
            if let Some(Input::List(l)) = devices {
                if l.len() > limit {
                    e.report_at(
                        "devices",
                        format!("at most {limit} devices in a slice, got {}", l.len()),
                    );
                }
            }
            let carried = check_carried(e, entries, driver, devices);
            out.push(SliceSpec {
                devices: slice_devices,
                shared_counters: shared_value,
                per_device_node_selection: per_device,
                carried,
            });
        });
    }
    out
}

/// Validates and canonicalises; the errors in traversal order when anything is wrong.
pub fn prepare_desired<'i>(
    driver: &Input<'i>,
    pools: &[(&'i str, Input<'i>)],
    max_slice_bytes: usize,
) -> Result<Desired, Vec<String>> {
    let mut e = Errors {
        path: Vec::new(),
        list: Vec::new(),
        good_names: Default::default(),
    };
    let driver = e.field("driver", |e| {
        let d = check_str(e, driver)?;
        if !is_driver_name(d) {
            e.report(format!(
                "must be a DNS subdomain of at most {MAX_DRIVER_LENGTH} characters"
            ));
        }
        Some(d.to_owned())
    });
    let driver_name = driver.as_deref().unwrap_or("");
    let mut out = BTreeMap::new();
    for (name, pool) in pools {
        let checked = e.field("pools", |e| {
            e.at(Seg::Key(name), |e| {
                check_pool(e, driver_name, name, pool, max_slice_bytes)
            })
        });
        if let Some(p) = checked {
            out.insert((*name).to_owned(), Arc::new(p));
        }
    }
    match driver {
        Some(driver) if e.list.is_empty() => Ok(Desired {
            driver,
            pools: out,
            max_slice_bytes,
        }),
        _ => Err(e.list),
    }
}
