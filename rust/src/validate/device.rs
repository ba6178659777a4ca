//! The rules of a device: attributes, capacities and their request policy, taints, counter
//! consumption, binding conditions, node allocatable resources; and a list of devices
//! checked one by one, each valid one rendered as canonical JSON into the desired state.
use std::collections::HashSet;

use super::scalars::{
    check_named, check_quantity, check_required_named, check_scalar, check_unique_names,
    is_allocatable, is_dns_label, is_label_name, is_label_value, member_quantity,
};
use super::slice::{check_counters, check_per_device, CounterSets, NODE_FIELDS};
use super::{
    check_bool, check_dict, check_generic, check_list, check_max, check_others, check_str, Errors,
    Seg, BAD_DNS_LABEL, BAD_LABEL_NAME, BAD_LABEL_VALUE, DUPLICATE, NANO, NEGATIVE, POLICY_LIMIT,
    REQUIRED,
};
use crate::canonical::{self, Tree};
use crate::input::{get, list_len, present, Input};
use crate::model::{DeviceEntry, DeviceList, SLICE_OVERHEAD};
use crate::quantity;

const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
const MAX_ATTRIBUTE_VALUES: usize = 48;
const MAX_TAINTS: usize = 16;
const MAX_CONSUMES_COUNTERS: usize = 2;
const MAX_BINDING_CONDITIONS: usize = 4;
const MAX_COMPATIBILITY_GROUPS: usize = 2;
const MAX_VALID_VALUES: usize = 10;
const INT64: i128 = 1 << 63;

// The messages (the same words as the pure-Python core).
const ATTRIBUTE_ONE_TYPE: &str =
    "must have exactly one of bool, int, string, version, bools, ints, strings, versions";
const EMPTY_LIST: &str = "must not be empty";
const BAD_EFFECT: &str = "must be one of NoSchedule, NoExecute, None";
const BAD_TIME: &str = "must be an RFC 3339 time";
const NOT_POSITIVE: &str = "must be positive";
const POLICY_NEEDS_MULTIPLE: &str = "requestPolicy needs allowMultipleAllocations: true";
const ONE_POLICY: &str = "at most one of validValues and validRange";
const NOT_SORTED: &str = "must be sorted in ascending order";
const OVER_CAPACITY: &str = "must not exceed the capacity's value";
const DEFAULT_NOT_VALID: &str = "the default must be one of validValues";
const DEFAULT_OUT_OF_RANGE: &str = "the default must be within the range";
const MIN_OVER_MAX: &str = "must not be less than min";
const OFF_STEP: &str = "min plus a multiple of step must give the default and max";
const NOT_MILLI: &str = "must be a whole number of thousandths in 64 bits";
const OVER_INT64: &str = "must not exceed 9223372036854775807";
const TOO_LARGE_FOR_POLICY: &str = "must be below 10^20 in a request policy";
const BAD_ALLOCATABLE: &str = "must be cpu, memory or hugepages-<size>";
const MAPPING_OR_OVERHEAD: &str = "at least one of mapping and overhead is required";
const KEY_OR_MULTIPLIER: &str = "exactly one of capacityKey and deviceMultiplier is required";
const UNKNOWN_CAPACITY: &str = "must name a capacity of the device";
const PER_POD_OR_CONTAINER: &str = "at least one of perPod and perContainer is required";
const CONDITIONS_NEED_BOTH: &str = "bindingConditions and bindingFailureConditions go together";
const CONDITION_OVERLAP: &str = "must not also be a binding condition";

const ATTRIBUTE_TYPES: [&str; 8] = [
    "bool", "bools", "int", "ints", "string", "strings", "version", "versions",
];

/// How many values an attribute holds towards the device's limit: its list items, or one
/// for a scalar.
fn attribute_values(attribute: &Input<'_>) -> usize {
    let Input::Dict(entries) = attribute else {
        return 1;
    };
    let items: usize = ["bools", "ints", "strings", "versions"]
        .iter()
        .map(|k| list_len(get(entries, k)))
        .sum();
    items.max(1)
}

/// Checks one attribute; true when it is a list attribute.
fn check_attribute<'i>(e: &mut Errors<'i>, v: &Input<'i>) -> bool {
    let Some(entries) = check_dict(e, v) else {
        return false;
    };
    // An empty list is there for one reading of the rule and absent for the other (the
    // server applies both): it never makes the one value.
    let mut types = present(entries).filter(|(k, _)| ATTRIBUTE_TYPES.contains(k));
    let one = match (types.next(), types.next()) {
        (Some((_, value)), None) => !matches!(value, Input::List(l) if l.is_empty()),
        _ => false,
    };
    if !one {
        e.report(ATTRIBUTE_ONE_TYPE);
    }
    let mut list = false;
    for (k, item) in present(entries) {
        e.field(k, |e| match k {
            "bool" | "int" | "string" | "version" => check_scalar(e, k, item),
            "bools" | "ints" | "strings" | "versions" => {
                list = true;
                let Some(items) = check_list(e, item) else {
                    return;
                };
                if items.is_empty() {
                    e.report(EMPTY_LIST);
                }
                for (i, x) in items.iter().enumerate() {
                    e.at(Seg::Index(i), |e| check_scalar(e, &k[..k.len() - 1], x));
                }
            }
            _ => check_generic(e, item),
        });
    }
    list
}

fn check_capacity<'i>(e: &mut Errors<'i>, v: &Input<'i>, multiple: bool) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    // A missing value is zero, as the server reads it.
    let (value, mut ok) = member_quantity(e, entries, "value");
    let capacity = value.unwrap_or(0);
    if multiple && get(entries, "requestPolicy").is_some() && capacity.abs() >= POLICY_LIMIT {
        e.report_at("value", TOO_LARGE_FOR_POLICY);
        ok = false;
    }
    for (k, item) in present(entries) {
        if k == "value" {
            continue;
        }
        e.field(k, |e| {
            if k != "requestPolicy" {
                check_generic(e, item);
            } else if !multiple {
                e.report(POLICY_NEEDS_MULTIPLE);
                check_request_policy(e, item, None);
            } else {
                check_request_policy(e, item, ok.then_some(capacity));
            }
        });
    }
}

fn policy_value(e: &mut Errors<'_>, raw: &Input<'_>) -> (Option<i128>, bool) {
    let q = check_quantity(e, raw);
    match q {
        Some(q) if q.abs() >= POLICY_LIMIT => {
            e.report(TOO_LARGE_FOR_POLICY);
            (None, false)
        }
        _ => (q, q.is_some()),
    }
}

fn policy_member<'i>(
    e: &mut Errors<'i>,
    entries: &[(&'i str, Input<'i>)],
    key: &'static str,
) -> (Option<i128>, bool) {
    match get(entries, key) {
        None => (None, true),
        Some(raw) => e.field(key, |e| policy_value(e, raw)),
    }
}

/// A consumable capacity's policy; its rules need the capacity's value (None: only the
/// formats are checked).
fn check_request_policy<'i>(e: &mut Errors<'i>, v: &Input<'i>, capacity: Option<i128>) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    check_others(e, entries, &["default", "validValues", "validRange"]);
    let (default, mut ok) = policy_member(e, entries, "default");
    let mut values = Vec::new();
    if let Some(raw) = get(entries, "validValues") {
        e.field("validValues", |e| {
            for (i, x) in check_list(e, raw).unwrap_or_default().iter().enumerate() {
                let (q, q_ok) = e.at(Seg::Index(i), |e| policy_value(e, x));
                ok &= q_ok;
                values.push(q.unwrap_or(0));
            }
        });
    }
    let mut bounds: [Option<i128>; 3] = [None; 3];
    let raw_range = get(entries, "validRange");
    let mut has_range = false;
    if let Some(raw) = raw_range {
        e.field("validRange", |e| {
            let Some(range) = check_dict(e, raw) else {
                return;
            };
            has_range = true;
            for (k, x) in present(range) {
                match ["min", "max", "step"].iter().position(|b| *b == k) {
                    Some(i) => {
                        let (q, q_ok) = e.at(Seg::Field(k), |e| policy_value(e, x));
                        ok &= q_ok;
                        bounds[i] = q;
                    }
                    None => e.field(k, |e| check_generic(e, x)),
                }
            }
        });
    }
    let Some(capacity) = capacity.filter(|_| ok) else {
        return;
    };
    if !values.is_empty() && raw_range.is_some() {
        e.report(ONE_POLICY);
    } else if !values.is_empty() {
        match default {
            None => e.report_at("default", REQUIRED),
            Some(d) => e.field("validValues", |e| {
                check_valid_values(e, &values, d, capacity)
            }),
        }
    } else if has_range {
        match default {
            None => e.report_at("default", REQUIRED),
            Some(d) => e.field("validRange", |e| check_valid_range(e, bounds, d, capacity)),
        }
    }
}

fn check_valid_values(e: &mut Errors<'_>, values: &[i128], default: i128, capacity: i128) {
    for i in 1..values.len() {
        if values[i - 1] > values[i] {
            e.at(Seg::Index(i), |e| e.report(NOT_SORTED));
        }
    }
    if !check_max(e, values, MAX_VALID_VALUES, "values") {
        e.report(DEFAULT_NOT_VALID);
        return;
    }
    let mut seen = HashSet::new();
    for (i, value) in values.iter().enumerate() {
        e.at(Seg::Index(i), |e| {
            if *value > capacity {
                e.report(OVER_CAPACITY);
            }
            if !seen.insert(*value) {
                e.report(DUPLICATE);
            }
        });
    }
    if !seen.contains(&default) {
        e.report(DEFAULT_NOT_VALID);
    }
}

/// The server's range rules: bounds within the capacity, the default within the bounds, and
/// with a step, the default and max on the grid of min + k * step, computed in whole units
/// (or in thousandths when anything is fractional) that must fit in 64 bits.
fn check_valid_range(e: &mut Errors<'_>, bounds: [Option<i128>; 3], default: i128, capacity: i128) {
    let [low, high, step] = bounds;
    let Some(low) = low else {
        e.report_at("min", REQUIRED);
        return;
    };
    if low > capacity {
        e.report_at("min", OVER_CAPACITY);
    }
    if default < low {
        e.report_at("default", DEFAULT_OUT_OF_RANGE);
    }
    if let Some(high) = high {
        if low > high {
            e.report_at("max", MIN_OVER_MAX);
        }
        if high > capacity {
            e.report_at("max", OVER_CAPACITY);
        }
        if default > high {
            e.report_at("default", DEFAULT_OUT_OF_RANGE);
        }
    }
    let checked = [
        ("default", Some(default)),
        ("min", Some(low)),
        ("max", high),
        ("step", step),
    ];
    let present_values = || checked.iter().filter_map(|(k, q)| q.map(|q| (*k, q)));
    let milli = present_values().any(|(_, q)| q % NANO != 0);
    if milli {
        let unit = NANO / 1000;
        let mut unsafe_value = false;
        for (k, q) in present_values() {
            if q % unit != 0 || q.abs() / unit >= INT64 {
                e.report_at(k, NOT_MILLI);
                unsafe_value = true;
            }
        }
        if unsafe_value {
            return;
        }
    }
    let Some(step) = step else {
        return;
    };
    if step <= 0 {
        e.report_at("step", NOT_POSITIVE);
        return;
    }
    if low + step > capacity {
        e.report_at("step", OVER_CAPACITY);
    }
    if !milli {
        let mut unsafe_value = false;
        for (k, q) in present_values() {
            if q < 0 || q / NANO >= INT64 {
                e.report_at(k, if q < 0 { NEGATIVE } else { OVER_INT64 });
                unsafe_value = true;
            }
        }
        if unsafe_value {
            return;
        }
    }
    e.field("step", |e| {
        for value in [Some(default), high].into_iter().flatten() {
            if (value - low) % step != 0 {
                e.report(OFF_STEP);
            }
        }
    });
}

fn check_taint<'i>(e: &mut Errors<'i>, v: &Input<'i>) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    if get(entries, "key").is_none() {
        e.report_at("key", REQUIRED);
    }
    if matches!(get(entries, "effect"), None | Some(Input::Str(""))) {
        e.report_at("effect", REQUIRED);
    }
    for (k, item) in present(entries) {
        e.field(k, |e| match k {
            "key" => {
                check_named(e, item, is_label_name, BAD_LABEL_NAME);
            }
            "value" => {
                check_named(e, item, is_label_value, BAD_LABEL_VALUE);
            }
            "effect" => {
                check_named(
                    e,
                    item,
                    |s| matches!(s, "" | "NoSchedule" | "NoExecute" | "None"),
                    BAD_EFFECT,
                );
            }
            "timeAdded" => {
                check_named(
                    e,
                    item,
                    |s| canonical::normalise_time(s).is_some(),
                    BAD_TIME,
                );
            }
            _ => check_generic(e, item),
        });
    }
}

fn check_binding_conditions<'i>(e: &mut Errors<'i>, entries: &[(&'i str, Input<'i>)]) {
    let mut conditions: Vec<&str> = Vec::new();
    for k in ["bindingConditions", "bindingFailureConditions"] {
        let Some(raw) = get(entries, k) else { continue };
        e.field(k, |e| {
            let found = check_unique_names(
                e,
                raw,
                is_label_name,
                BAD_LABEL_NAME,
                Some((MAX_BINDING_CONDITIONS, "conditions")),
            );
            if k == "bindingConditions" {
                conditions = found;
            } else {
                for (i, s) in found.iter().enumerate() {
                    if conditions.contains(s) {
                        e.at(Seg::Index(i), |e| e.report(CONDITION_OVERLAP));
                    }
                }
            }
        });
    }
    for (k, other) in [
        ("bindingConditions", "bindingFailureConditions"),
        ("bindingFailureConditions", "bindingConditions"),
    ] {
        if list_len(get(entries, other)) > 0 && list_len(get(entries, k)) == 0 {
            e.report_at(k, CONDITIONS_NEED_BOTH);
        }
    }
}

/// `nodeAllocatableResources`: node resources (cpu, memory, hugepages) that a device
/// brings, mapped from one of its capacities or per device, and overheads.
fn check_allocatable<'i>(e: &mut Errors<'i>, v: &Input<'i>, capacity: Option<&Input<'i>>) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    for (name, item) in entries {
        e.at(Seg::Key(name), |e| {
            if !is_allocatable(name) {
                e.report(BAD_ALLOCATABLE);
            }
            let Some(resource) = check_dict(e, item) else {
                return;
            };
            if get(resource, "mapping").is_none() && get(resource, "overhead").is_none() {
                e.report(MAPPING_OR_OVERHEAD);
            }
            for (k, x) in present(resource) {
                e.field(k, |e| match k {
                    "mapping" => check_mapping(e, x, capacity),
                    "overhead" => check_overhead(e, x),
                    _ => check_generic(e, x),
                });
            }
        });
    }
}

fn check_mapping<'i>(e: &mut Errors<'i>, v: &Input<'i>, capacity: Option<&Input<'i>>) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    let multipliers =
        ["capacityMultiplier", "deviceMultiplier"].map(|k| (k, member_quantity(e, entries, k).0));
    let key = get(entries, "capacityKey");
    if let Some(key) = key {
        e.field("capacityKey", |e| match check_str(e, key) {
            Some("") => e.report(REQUIRED),
            Some(s) => {
                let known =
                    matches!(capacity, Some(Input::Dict(c)) if c.iter().any(|(k, _)| *k == s));
                if !known {
                    e.report(UNKNOWN_CAPACITY);
                }
            }
            None => {}
        });
        if get(entries, "capacityMultiplier").is_none() {
            e.report_at("capacityMultiplier", REQUIRED);
        }
    } else if get(entries, "capacityMultiplier").is_some() {
        e.report_at("capacityKey", REQUIRED);
    }
    for (k, q) in multipliers {
        if q.is_some_and(|q| q <= 0) {
            e.report_at(k, NOT_POSITIVE);
        }
    }
    if key.is_none() == get(entries, "deviceMultiplier").is_none() {
        e.report(KEY_OR_MULTIPLIER);
    }
    check_others(
        e,
        entries,
        &["capacityKey", "capacityMultiplier", "deviceMultiplier"],
    );
}

fn check_overhead<'i>(e: &mut Errors<'i>, v: &Input<'i>) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    let values = ["perContainer", "perPod"].map(|k| (k, member_quantity(e, entries, k).0));
    if get(entries, "perPod").is_none() && get(entries, "perContainer").is_none() {
        e.report(PER_POD_OR_CONTAINER);
    }
    for (k, q) in values {
        if q.is_some_and(|q| q < 0) {
            e.report_at(k, NEGATIVE);
        }
    }
    check_others(e, entries, &["perContainer", "perPod"]);
}

/// The device names of a pool, for uniqueness. Fx hashing: a pool has up to hundreds of
/// thousands of names, chosen by the driver (nothing to guard against), and SipHash was a
/// tenth of `prepare_desired`'s time.
pub(super) type NameSet<'i> = rustc_hash::FxHashSet<&'i str>;

/// Where a device sits: what its node selection and counter references may be.
pub(super) struct DeviceContext<'c, 'i> {
    pub(super) per_device_node_selection: bool,
    pub(super) counter_sets: &'c CounterSets<'i>,
}

/// Checks one device; true when it uses advanced features.
fn check_device<'i>(e: &mut Errors<'i>, v: &Input<'i>, ctx: &DeviceContext<'_, 'i>) -> bool {
    let Some(entries) = check_dict(e, v) else {
        return false;
    };
    if get(entries, "name").is_none() {
        e.report_at("name", REQUIRED);
    }
    let ids = ["attributes", "capacity"]
        .iter()
        .map(|k| match get(entries, k) {
            Some(Input::Dict(d)) => d.len(),
            _ => 0,
        })
        .sum::<usize>();
    if ids > MAX_ATTRIBUTES_AND_CAPACITIES {
        e.report(format!(
            "at most {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities together, got {ids}"
        ));
    }
    if let Some(Input::Dict(attributes)) = get(entries, "attributes") {
        let values: usize = attributes.iter().map(|(_, a)| attribute_values(a)).sum();
        if values > MAX_ATTRIBUTE_VALUES {
            e.report(format!("at most {MAX_ATTRIBUTE_VALUES} attribute values (list items count one each), got {values}"));
        }
    }
    check_per_device(e, entries, ctx.per_device_node_selection);
    let multiple = matches!(
        get(entries, "allowMultipleAllocations"),
        Some(Input::Bool(true))
    );
    let mut advanced = false;
    for (k, item) in present(entries) {
        if NODE_FIELDS.contains(&k) {
            continue;
        }
        e.field(k, |e| match k {
            "name" => {
                check_named(e, item, is_dns_label, BAD_DNS_LABEL);
            }
            "attributes" | "capacity" => {
                let Some(members) = check_dict(e, item) else {
                    return;
                };
                for (name, x) in members {
                    e.at(Seg::Key(name), |e| {
                        for problem in e.name_problems(name) {
                            e.report(problem);
                        }
                        if k == "attributes" {
                            advanced |= check_attribute(e, x);
                        } else {
                            check_capacity(e, x, multiple);
                        }
                    });
                }
            }
            "taints" => {
                let Some(taints) = check_list(e, item) else {
                    return;
                };
                advanced |= !taints.is_empty();
                check_max(e, taints, MAX_TAINTS, "taints");
                for (i, t) in taints.iter().enumerate() {
                    e.at(Seg::Index(i), |e| check_taint(e, t));
                }
            }
            "consumesCounters" => {
                let Some(list) = check_list(e, item) else {
                    return;
                };
                advanced |= !list.is_empty();
                check_max(e, list, MAX_CONSUMES_COUNTERS, "counter consumptions");
                let mut seen = HashSet::new();
                for (i, c) in list.iter().enumerate() {
                    e.at(Seg::Index(i), |e| {
                        check_consumption(e, c, ctx.counter_sets, &mut seen)
                    });
                }
            }
            "bindingConditions" | "bindingFailureConditions" => {}
            "nodeAllocatableResources" => check_allocatable(e, item, get(entries, "capacity")),
            "bindsToNode" | "allowMultipleAllocations" => {
                check_bool(e, item);
            }
            _ => check_generic(e, item),
        });
    }
    check_binding_conditions(e, entries);
    advanced
}

fn check_consumption<'i>(
    e: &mut Errors<'i>,
    v: &Input<'i>,
    sets: &CounterSets<'i>,
    seen: &mut HashSet<&'i str>,
) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    let set_name = check_required_named(e, entries, "counterSet", is_dns_label, BAD_DNS_LABEL);
    if let Some(name) = set_name {
        if !seen.insert(name) {
            e.report(format!("duplicate counter set {}", canonical::quote(name)));
        }
        if !sets.contains_key(name) {
            e.report_at(
                "counterSet",
                format!("unknown counter set {}", canonical::quote(name)),
            );
        }
    }
    if get(entries, "counters").is_none() {
        e.report_at("counters", REQUIRED);
    }
    for (k, item) in present(entries) {
        if k == "counterSet" {
            continue;
        }
        e.field(k, |e| match k {
            "compatibilityGroups" => {
                check_unique_names(
                    e,
                    item,
                    is_dns_label,
                    BAD_DNS_LABEL,
                    Some((MAX_COMPATIBILITY_GROUPS, "groups")),
                );
            }
            "counters" => {
                let names = check_counters(e, item);
                let Some(known) = set_name.and_then(|n| sets.get(n)) else {
                    return;
                };
                for name in names {
                    if !known.contains(name) {
                        e.at(Seg::Key(name), |e| {
                            e.report(format!(
                                "unknown counter {} in counter set",
                                canonical::quote(name)
                            ))
                        });
                    }
                }
            }
            _ => check_generic(e, item),
        });
    }
}

/// Canonical forms of the quantity strings of one device list, by content: the devices of
/// a pool mostly share their capacities' values, and parsing and printing a quantity took
/// a tenth of `prepare_desired`'s time. Bounded, for lists of all different values.
#[derive(Default)]
struct QuantityMemo(rustc_hash::FxHashMap<String, Option<String>>);

impl QuantityMemo {
    const MAX: usize = 1024;

    fn canonical(&mut self, s: &str) -> Option<String> {
        if let Some(known) = self.0.get(s) {
            return known.clone();
        }
        let canonical = quantity::canonical(s);
        if self.0.len() < Self::MAX {
            self.0.insert(s.to_owned(), canonical.clone());
        }
        canonical
    }
}

/// Adds a device that passed its checks to `out`, as canonical JSON; an error instead when
/// it is too large. `buffer`: where the JSON is written, reused from device to device.
fn push_device(
    e: &mut Errors<'_>,
    v: &Input<'_>,
    advanced: bool,
    max_slice_bytes: usize,
    (buffer, quantities): (&mut Vec<u8>, &mut QuantityMemo),
    out: &mut DeviceList,
) {
    let subs = canonical::device_subs(v, &mut |q| quantities.canonical(q));
    let taints = v.member("taints").map(Tree::items).unwrap_or_default();
    let untimed_taints = taints.iter().any(|t| t.member("timeAdded").is_none());
    let name = match v.member("name") {
        Some(Input::Str(s)) => *s,
        _ => "",
    };
    buffer.clear();
    if !canonical::write(v, &subs, buffer) {
        buffer.extend_from_slice(b"null");
    }
    if buffer.len() > max_slice_bytes.saturating_sub(SLICE_OVERHEAD) {
        e.report("device too large");
        return;
    }
    out.push(DeviceEntry {
        name,
        json: std::str::from_utf8(buffer).expect("JSON written from str is UTF-8"),
        advanced,
        untimed_taints,
    });
}

/// The devices of one list (a flat pool or one slice), with name uniqueness across `names`,
/// and whether any of them uses advanced features.
pub(super) fn check_devices<'i>(
    e: &mut Errors<'i>,
    v: &Input<'i>,
    ctx: &DeviceContext<'_, 'i>,
    names: &mut NameSet<'i>,
    max_slice_bytes: usize,
) -> (DeviceList, bool) {
    let mut out = DeviceList::default();
    let mut any_advanced = false;
    let mut buffer = Vec::with_capacity(1024);
    let mut quantities = QuantityMemo::default();
    if let Input::Lazy(items) = v {
        // Growing the set would rehash it about twice over for a large pool.
        names.reserve(items.count());
    }
    let mut check = |e: &mut Errors<'i>, i: usize, item: &Input<'i>| {
        e.at(Seg::Index(i), |e| {
            let before = e.count();
            let advanced = check_device(e, item, ctx);
            any_advanced |= advanced;
            if let Input::Dict(entries) = item {
                if let Some(Input::Str(name)) = get(entries, "name") {
                    if !names.insert(name) {
                        e.report(format!("duplicate device name {}", canonical::quote(name)));
                    }
                }
            }
            if e.count() == before {
                push_device(
                    e,
                    item,
                    advanced,
                    max_slice_bytes,
                    (&mut buffer, &mut quantities),
                    &mut out,
                );
            }
        });
    };
    if let Input::Lazy(items) = v {
        for i in 0..items.count() {
            check(e, i, &items.item(i));
        }
    } else if let Some(items) = check_list(e, v) {
        for (i, item) in items.iter().enumerate() {
            check(e, i, item);
        }
    }
    out.shrink_to_fit();
    (out, any_advanced)
}
