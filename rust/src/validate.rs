//! `prepare_desired`: limits and formats of `resource.k8s.io/v1` (docs/core.md §3), and the
//! canonical desired state they guard.
//!
//! The input arrives as an `Input` tree that the glue builds over Python data; every problem
//! is collected with its path, in traversal order, and a device's canonical JSON is rendered
//! only once it is known to be valid.
use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use crate::canonical::{self, Tree, View};
use crate::quantity;
use crate::strlist::StrList;

/// A list that the glue converts one item at a time: a flat pool's devices. Why: the input
/// tree of 100,000 devices at once takes several times the memory of the desired state.
pub trait Items<'a> {
    fn count(&self) -> usize;
    fn item(&self, index: usize) -> Input<'a>;
}

/// Plain data as Python handed it over. Dict entries are sorted by key.
pub enum Input<'a> {
    Null,
    Bool(bool),
    Int(i64),
    /// An int outside int64.
    BigInt,
    Float,
    Str(&'a str),
    /// A str that does not encode as UTF-8 (lone surrogates).
    BadStr,
    List(Vec<Input<'a>>),
    /// A list read item by item (see `Items`).
    Lazy(Box<dyn Items<'a> + 'a>),
    Dict(Vec<(&'a str, Input<'a>)>),
    /// Any other type, by its Python type name.
    Other(String),
}

/// One device of the desired state, canonical: a view into its `DeviceList`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceEntry<'a> {
    pub name: &'a str,
    pub json: &'a str,
    /// Taints, consumesCounters or a list attribute: the slice limit drops to 64.
    pub advanced: bool,
    /// Has a taint without `timeAdded` (the stored time is carried over).
    pub untimed_taints: bool,
}

/// The devices of one list (a flat pool or an explicit slice), in order, their strings
/// packed in two buffers (see `StrList`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceList {
    names: StrList,
    jsons: StrList,
    /// `(advanced, untimed_taints)` of each device.
    flags: Vec<(bool, bool)>,
}

impl DeviceList {
    fn push(&mut self, device: DeviceEntry<'_>) {
        self.names.push(device.name);
        self.jsons.push(device.json);
        self.flags.push((device.advanced, device.untimed_taints));
    }

    fn shrink_to_fit(&mut self) {
        self.names.shrink_to_fit();
        self.jsons.shrink_to_fit();
        self.flags.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.flags.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    pub fn get(&self, index: usize) -> DeviceEntry<'_> {
        let (advanced, untimed_taints) = self.flags[index];
        DeviceEntry {
            name: self.names.get(index),
            json: self.jsons.get(index),
            advanced,
            untimed_taints,
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = DeviceEntry<'_>> {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// An explicit slice.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceSpec {
    pub devices: DeviceList,
    pub shared_counters: Option<Value>,
    pub per_device_node_selection: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PoolDevices {
    Flat(DeviceList),
    Slices(Vec<SliceSpec>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct DesiredPool {
    pub devices: PoolDevices,
    pub node_selector: Option<Value>,
    pub all_nodes: bool,
    pub generation: i64,
}

impl DesiredPool {
    pub fn device_count(&self) -> usize {
        match &self.devices {
            PoolDevices::Flat(d) => d.len(),
            PoolDevices::Slices(s) => s.iter().map(|s| s.devices.len()).sum(),
        }
    }
}

/// A validated desired state of one driver.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub driver: String,
    pub pools: BTreeMap<String, DesiredPool>,
    pub max_slice_bytes: usize,
}

/// Per-object overhead the packer reserves for metadata and the header (docs/core.md §4).
pub const SLICE_OVERHEAD: usize = 4096;
pub const MAX_DEVICES: usize = 128;
pub const MAX_DEVICES_ADVANCED: usize = 64;
const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
const MAX_VALUE_LENGTH: usize = 64;
const MAX_TAINTS: usize = 16;
const MAX_CONSUMES_COUNTERS: usize = 2;
const MAX_COUNTERS: usize = 32;
const MAX_COUNTER_SETS: usize = 8;
const MAX_BINDING_CONDITIONS: usize = 4;
const MAX_DRIVER_LENGTH: usize = 63;
const MAX_POOL_NAME_LENGTH: usize = 253;

/// An error path: rendered only when a problem is reported.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Field(&'a str),
    Key(&'a str),
    Index(usize),
}

struct Errors<'a> {
    path: Vec<Seg<'a>>,
    list: Vec<String>,
}

impl<'a> Errors<'a> {
    fn report(&mut self, problem: impl AsRef<str>) {
        let mut s = String::new();
        for (i, seg) in self.path.iter().enumerate() {
            match seg {
                Seg::Field(f) if i == 0 => s.push_str(f),
                Seg::Field(f) => {
                    s.push('.');
                    s.push_str(f);
                }
                Seg::Key(k) => {
                    s.push('[');
                    s.push_str(&canonical::quote(k));
                    s.push(']');
                }
                Seg::Index(n) => s.push_str(&format!("[{n}]")),
            }
        }
        s.push_str(": ");
        s.push_str(problem.as_ref());
        self.list.push(s);
    }

    fn at<R>(&mut self, seg: Seg<'a>, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(seg);
        let r = f(self);
        self.path.pop();
        r
    }

    fn count(&self) -> usize {
        self.list.len()
    }
}

fn get<'i, 'a>(entries: &'i [(&'a str, Input<'a>)], key: &str) -> Option<&'i Input<'a>> {
    entries
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .filter(|v| !matches!(v, Input::Null))
}

fn is_alnum_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && is_alnum_lower(b[0])
        && is_alnum_lower(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn is_c_identifier(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A label value's body: `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_label_body(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_label_value(s: &str) -> bool {
    s.is_empty() || (s.len() <= 63 && is_label_body(s))
}

/// A qualified name (label key): `[<DNS subdomain>/]<name ≤ 63>`.
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(|p| !p.is_empty() && is_dns_subdomain(p))
        && name.len() <= 63
        && is_label_body(name)
}

/// Semantic Versioning 2.0.0.
fn is_semver(s: &str) -> bool {
    let numeric = |p: &str| {
        !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) && (p == "0" || !p.starts_with('0'))
    };
    let ident =
        |p: &str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
    let (rest, build) = match s.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    core.split('.').count() == 3
        && core.split('.').all(numeric)
        && pre.is_none_or(|p| {
            p.split('.')
                .all(|id| ident(id) && (!id.bytes().all(|c| c.is_ascii_digit()) || numeric(id)))
        })
        && build.is_none_or(|b| b.split('.').all(ident))
}

/// Attribute / capacity / counter names: C identifier ≤ 32, optionally `<domain ≤ 63>/`.
fn check_device_id(e: &mut Errors<'_>, name: &str) {
    let (domain, id) = match name.split_once('/') {
        Some((d, i)) => (Some(d), i),
        None => (None, name),
    };
    if let Some(d) = domain {
        if d.len() > 63 || !is_dns_subdomain(d) {
            e.report("the domain must be a DNS subdomain of at most 63 characters");
        }
    }
    if id.len() > 32 || !is_c_identifier(id) {
        e.report("the name must be a C identifier of at most 32 characters");
    }
}

fn check_str<'i>(e: &mut Errors<'_>, v: &Input<'i>) -> Option<&'i str> {
    match v {
        Input::Str(s) => Some(*s),
        Input::BadStr => {
            e.report("not valid UTF-8");
            None
        }
        _ => {
            e.report("must be a string");
            None
        }
    }
}

fn check_bool(e: &mut Errors<'_>, v: &Input<'_>) -> Option<bool> {
    match v {
        Input::Bool(b) => Some(*b),
        _ => {
            e.report("must be a boolean");
            None
        }
    }
}

fn check_int(e: &mut Errors<'_>, v: &Input<'_>) -> Option<i64> {
    match v {
        Input::Int(i) => Some(*i),
        Input::BigInt => {
            e.report("out of range for a 64-bit integer");
            None
        }
        Input::Float => {
            e.report("must not be a float");
            None
        }
        _ => {
            e.report("must be an integer");
            None
        }
    }
}

fn check_dict<'x, 'i>(e: &mut Errors<'_>, v: &'x Input<'i>) -> Option<&'x [(&'i str, Input<'i>)]> {
    match v {
        Input::Dict(d) => Some(d),
        _ => {
            e.report("must be an object");
            None
        }
    }
}

fn check_list<'x, 'i>(e: &mut Errors<'_>, v: &'x Input<'i>) -> Option<&'x [Input<'i>]> {
    match v {
        Input::List(l) => Some(l),
        _ => {
            e.report("must be a list");
            None
        }
    }
}

/// The generic rules, for members passed through as they are.
fn check_generic<'i>(e: &mut Errors<'i>, v: &Input<'i>) {
    match v {
        Input::Null | Input::Bool(_) | Input::Int(_) | Input::Str(_) => {}
        Input::BigInt | Input::Float => {
            check_int(e, v);
        }
        Input::BadStr => e.report("not valid UTF-8"),
        Input::List(items) => {
            for (i, item) in items.iter().enumerate() {
                e.at(Seg::Index(i), |e| check_generic(e, item));
            }
        }
        Input::Lazy(items) => {
            for i in 0..items.count() {
                e.at(Seg::Index(i), |e| check_generic(e, &items.item(i)));
            }
        }
        Input::Dict(entries) => {
            for (k, item) in entries {
                e.at(Seg::Key(k), |e| check_generic(e, item));
            }
        }
        Input::Other(t) => e.report(format!("unsupported type {t}")),
    }
}

fn check_quantity(e: &mut Errors<'_>, v: &Input<'_>) {
    match v {
        Input::Int(_) => {}
        Input::Str(s) => {
            if quantity::Quantity::parse(s).is_none() {
                e.report(format!("invalid quantity {}", canonical::quote(s)));
            }
        }
        _ => {
            check_str(e, v);
        }
    }
}

fn check_max<T>(e: &mut Errors<'_>, items: &[T], max: usize, what: &str) {
    if items.len() > max {
        e.report(format!("at most {max} {what}, got {}", items.len()));
    }
}

fn check_string_list<'i>(
    e: &mut Errors<'i>,
    v: &Input<'i>,
    max: usize,
    what: &str,
    each: impl Fn(&mut Errors<'i>, &str),
) {
    let Some(items) = check_list(e, v) else {
        return;
    };
    check_max(e, items, max, what);
    for (i, item) in items.iter().enumerate() {
        e.at(Seg::Index(i), |e| {
            if let Some(s) = check_str(e, item) {
                each(e, s);
            }
        });
    }
}

fn check_value_length(e: &mut Errors<'_>, s: &str) {
    if s.chars().count() > MAX_VALUE_LENGTH {
        e.report(format!("must be at most {MAX_VALUE_LENGTH} characters"));
    }
}

fn check_version(e: &mut Errors<'_>, s: &str) {
    if !is_semver(s) {
        e.report("must be a semantic version (semver 2.0.0)");
    }
    check_value_length(e, s);
}

const ATTRIBUTE_TYPES: [&str; 8] = [
    "bool", "bools", "int", "ints", "string", "strings", "version", "versions",
];

fn check_attribute<'i>(e: &mut Errors<'i>, v: &Input<'i>) -> bool {
    let Some(entries) = check_dict(e, v) else {
        return false;
    };
    let present = || entries.iter().filter(|(_, v)| !matches!(v, Input::Null));
    let typed = present()
        .filter(|(k, _)| ATTRIBUTE_TYPES.contains(k))
        .count();
    if typed != 1 {
        e.report(
            "must have exactly one of bool, int, string, version, bools, ints, strings, versions",
        );
    }
    let mut list = false;
    for (k, item) in present() {
        e.at(Seg::Field(k), |e| match *k {
            "bool" => {
                check_bool(e, item);
            }
            "int" => {
                check_int(e, item);
            }
            "string" => {
                if let Some(s) = check_str(e, item) {
                    check_value_length(e, s);
                }
            }
            "version" => {
                if let Some(s) = check_str(e, item) {
                    check_version(e, s);
                }
            }
            "bools" | "ints" | "strings" | "versions" => {
                list = true;
                let Some(items) = check_list(e, item) else {
                    return;
                };
                for (i, x) in items.iter().enumerate() {
                    e.at(Seg::Index(i), |e| match *k {
                        "bools" => {
                            check_bool(e, x);
                        }
                        "ints" => {
                            check_int(e, x);
                        }
                        "strings" => {
                            if let Some(s) = check_str(e, x) {
                                check_value_length(e, s);
                            }
                        }
                        _ => {
                            if let Some(s) = check_str(e, x) {
                                check_version(e, s);
                            }
                        }
                    });
                }
            }
            _ => check_generic(e, item),
        });
    }
    list
}

fn check_capacity<'i>(e: &mut Errors<'i>, v: &Input<'i>) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    if get(entries, "value").is_none() {
        e.report("value is required");
    }
    for (k, item) in entries {
        e.at(Seg::Field(k), |e| match *k {
            "value" => check_quantity(e, item),
            "requestPolicy" => check_request_policy(e, item),
            _ => check_generic(e, item),
        });
    }
}

fn check_request_policy<'i>(e: &mut Errors<'i>, v: &Input<'i>) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    for (k, item) in entries {
        e.at(Seg::Field(k), |e| match *k {
            "default" => check_quantity(e, item),
            "validValues" => {
                if let Some(items) = check_list(e, item) {
                    for (i, x) in items.iter().enumerate() {
                        e.at(Seg::Index(i), |e| check_quantity(e, x));
                    }
                }
            }
            "validRange" => {
                if let Some(range) = check_dict(e, item) {
                    for (rk, x) in range {
                        e.at(Seg::Field(rk), |e| match *rk {
                            "min" | "max" | "step" => check_quantity(e, x),
                            _ => check_generic(e, x),
                        });
                    }
                }
            }
            _ => check_generic(e, item),
        });
    }
}

/// `{name: {"value": quantity}}`, at most 32.
fn check_counters<'i>(e: &mut Errors<'i>, v: &Input<'i>) -> Vec<&'i str> {
    let Some(entries) = check_dict(e, v) else {
        return Vec::new();
    };
    check_max(e, entries, MAX_COUNTERS, "counters");
    for (name, counter) in entries {
        e.at(Seg::Key(name), |e| {
            check_device_id(e, name);
            let Some(c) = check_dict(e, counter) else {
                return;
            };
            if get(c, "value").is_none() {
                e.report("value is required");
            }
            for (k, x) in c {
                e.at(Seg::Field(k), |e| {
                    if *k == "value" {
                        check_quantity(e, x)
                    } else {
                        check_generic(e, x)
                    }
                });
            }
        });
    }
    entries.iter().map(|(k, _)| *k).collect()
}

/// The counter sets a slice shares: name -> counter names.
type CounterSets<'i> = HashMap<&'i str, HashSet<&'i str>>;

fn check_taint<'i>(e: &mut Errors<'i>, v: &Input<'i>) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    if get(entries, "key").is_none() {
        e.report("key is required");
    }
    if get(entries, "effect").is_none() {
        e.report("effect is required");
    }
    for (k, item) in entries {
        e.at(Seg::Field(k), |e| match *k {
            "key" => {
                if let Some(s) = check_str(e, item) {
                    if !is_qualified_name(s) {
                        e.report("must be a label name");
                    }
                }
            }
            "value" => {
                if let Some(s) = check_str(e, item) {
                    if !is_label_value(s) {
                        e.report("must be a label value");
                    }
                }
            }
            "effect" => {
                if let Some(s) = check_str(e, item) {
                    if !matches!(s, "NoSchedule" | "NoExecute" | "None") {
                        e.report("must be one of NoSchedule, NoExecute, None");
                    }
                }
            }
            "timeAdded" => {
                if let Some(s) = check_str(e, item) {
                    if canonical::normalise_time(s).is_none() {
                        e.report("must be an RFC 3339 time");
                    }
                }
            }
            _ => check_generic(e, item),
        });
    }
}

/// Where a device sits: what its node selection and counter references may be.
struct DeviceContext<'c, 'i> {
    per_device_node_selection: bool,
    counter_sets: &'c CounterSets<'i>,
}

/// Checks one device; true when it uses advanced features.
fn check_device<'i>(e: &mut Errors<'i>, v: &Input<'i>, ctx: &DeviceContext<'_, 'i>) -> bool {
    let Some(entries) = check_dict(e, v) else {
        return false;
    };
    if get(entries, "name").is_none() {
        e.report("name is required");
    }
    let ids = [get(entries, "attributes"), get(entries, "capacity")]
        .iter()
        .map(|v| match v {
            Some(Input::Dict(d)) => d.len(),
            _ => 0,
        })
        .sum::<usize>();
    if ids > MAX_ATTRIBUTES_AND_CAPACITIES {
        e.report(format!(
            "at most {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities together, got {ids}"
        ));
    }
    let selections = ["nodeName", "nodeSelector", "allNodes"]
        .iter()
        .filter(|k| get(entries, k).is_some())
        .count();
    if ctx.per_device_node_selection && selections != 1 {
        e.report("exactly one of nodeName, nodeSelector, allNodes is required with perDeviceNodeSelection");
    } else if !ctx.per_device_node_selection && selections > 0 {
        e.report("nodeName, nodeSelector and allNodes are only allowed in a slice with perDeviceNodeSelection");
    }
    let mut advanced = false;
    for (k, item) in entries {
        if matches!(item, Input::Null) {
            continue;
        }
        e.at(Seg::Field(k), |e| match *k {
            "name" => {
                if let Some(s) = check_str(e, item) {
                    if !is_dns_label(s) {
                        e.report("must be a DNS label");
                    }
                }
            }
            "attributes" => {
                let Some(attrs) = check_dict(e, item) else {
                    return;
                };
                for (name, a) in attrs {
                    e.at(Seg::Key(name), |e| {
                        check_device_id(e, name);
                        advanced |= check_attribute(e, a);
                    });
                }
            }
            "capacity" => {
                let Some(caps) = check_dict(e, item) else {
                    return;
                };
                for (name, c) in caps {
                    e.at(Seg::Key(name), |e| {
                        check_device_id(e, name);
                        check_capacity(e, c);
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
            "bindingConditions" | "bindingFailureConditions" => {
                check_string_list(e, item, MAX_BINDING_CONDITIONS, "conditions", |e, s| {
                    if !is_qualified_name(s) {
                        e.report("must be a qualified name");
                    }
                });
            }
            "nodeName" => {
                if let Some(s) = check_str(e, item) {
                    if !is_dns_subdomain(s) {
                        e.report("must be a DNS subdomain");
                    }
                }
            }
            "nodeSelector" => {
                if check_dict(e, item).is_some() {
                    check_generic(e, item);
                }
            }
            "allNodes" | "bindsToNode" | "allowMultipleAllocations" => {
                check_bool(e, item);
            }
            _ => check_generic(e, item),
        });
    }
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
    let set_name = match get(entries, "counterSet") {
        None => {
            e.report("counterSet is required");
            None
        }
        Some(s) => e.at(Seg::Field("counterSet"), |e| check_str(e, s)),
    };
    if let Some(name) = set_name {
        if !seen.insert(name) {
            e.at(Seg::Field("counterSet"), |e| {
                e.report(format!("duplicate counter set {}", canonical::quote(name)))
            });
        }
        if !sets.contains_key(name) {
            e.at(Seg::Field("counterSet"), |e| {
                e.report(format!("unknown counter set {}", canonical::quote(name)))
            });
        }
    }
    for (k, item) in entries {
        if *k == "counterSet" {
            continue;
        }
        e.at(Seg::Field(k), |e| {
            if *k != "counters" {
                return check_generic(e, item);
            }
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
        });
    }
}

/// Adds a device that passed its checks to `out`, as canonical JSON; an error instead when
/// it is too large.
fn push_device(
    e: &mut Errors<'_>,
    v: &Input<'_>,
    advanced: bool,
    max_slice_bytes: usize,
    out: &mut DeviceList,
) {
    let subs = canonical::device_subs(v, quantity::canonical);
    let taints = v.member("taints").map(Tree::items).unwrap_or_default();
    let untimed_taints = taints.iter().any(|t| t.member("timeAdded").is_none());
    let name = match v.member("name") {
        Some(Input::Str(s)) => *s,
        _ => "",
    };
    let json = canonical::to_json_with(v, &subs);
    if json.len() > max_slice_bytes.saturating_sub(SLICE_OVERHEAD) {
        e.report("device too large");
        return;
    }
    out.push(DeviceEntry {
        name,
        json: &json,
        advanced,
        untimed_taints,
    });
}

impl Tree for Input<'_> {
    fn view(&self) -> View<'_, Self> {
        match self {
            Input::Bool(b) => View::Bool(*b),
            Input::Int(i) => View::Int(*i),
            Input::Str(s) => View::Str(s),
            Input::List(items) => View::List(items),
            Input::Dict(_) => View::Map,
            // Reported as errors; nothing is written from an invalid state. A lazy list is
            // a flat pool's devices, which are rendered one by one, never as a whole.
            Input::Null
            | Input::BigInt
            | Input::Float
            | Input::BadStr
            | Input::Other(_)
            | Input::Lazy(_) => View::Null,
        }
    }
    fn for_each_member<'a>(&'a self, f: &mut dyn FnMut(&'a str, &'a Self)) {
        if let Input::Dict(entries) = self {
            entries.iter().for_each(|(k, v)| f(k, v));
        }
    }
    fn member(&self, key: &str) -> Option<&Self> {
        match self {
            Input::Dict(entries) => get(entries, key),
            _ => None,
        }
    }
}

/// A checked subtree as a pruned JSON value, its quantities (`quantities`) canonical.
/// Walks the quantities of a subtree.
type QuantityWalk<'x, 'i> = dyn Fn(&'x Input<'i>, &mut dyn FnMut(&'x Input<'i>));

fn to_value<'x, 'i>(v: &'x Input<'i>, quantities: &QuantityWalk<'x, 'i>) -> Option<Value> {
    let mut subs = Vec::new();
    quantities(v, &mut |q| {
        canonical::quantity_sub(&mut subs, q, quantity::canonical)
    });
    let json = canonical::to_json_with(v, &subs);
    canonical::prune(serde_json::from_str(&json).expect("JSON written by this crate"))
}

/// The devices of one list (a flat pool or one slice), with name uniqueness across `names`.
fn check_devices<'i>(
    e: &mut Errors<'i>,
    v: &Input<'i>,
    ctx: &DeviceContext<'_, 'i>,
    names: &mut HashSet<&'i str>,
    max_slice_bytes: usize,
) -> DeviceList {
    let mut out = DeviceList::default();
    let mut check = |e: &mut Errors<'i>, i: usize, item: &Input<'i>| {
        e.at(Seg::Index(i), |e| {
            let before = e.count();
            let advanced = check_device(e, item, ctx);
            if let Input::Dict(entries) = item {
                if let Some(Input::Str(name)) = get(entries, "name") {
                    if !names.insert(name) {
                        e.at(Seg::Field("name"), |e| {
                            e.report(format!("duplicate device name {}", canonical::quote(name)))
                        });
                    }
                }
            }
            if e.count() == before {
                push_device(e, item, advanced, max_slice_bytes, &mut out);
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
    out
}

fn check_pool<'i>(
    e: &mut Errors<'i>,
    name: &'i str,
    v: &Input<'i>,
    max_slice_bytes: usize,
) -> Option<DesiredPool> {
    if name.is_empty()
        || name.len() > MAX_POOL_NAME_LENGTH
        || !name.split('/').all(is_dns_subdomain)
    {
        e.report(format!("pool name must be at most {MAX_POOL_NAME_LENGTH} characters of /-separated DNS subdomains"));
    }
    let entries = check_dict(e, v)?;
    let devices = get(entries, "devices");
    let slices = get(entries, "slices");
    if devices.is_some() == slices.is_some() {
        e.report("exactly one of devices and slices is required");
    }
    let node_selector = get(entries, "nodeSelector");
    let all_nodes = match get(entries, "allNodes") {
        None => false,
        Some(v) => e
            .at(Seg::Field("allNodes"), |e| check_bool(e, v))
            .unwrap_or(false),
    };
    if node_selector.is_some() && all_nodes {
        e.report("at most one of nodeSelector and allNodes");
    }
    let generation = match get(entries, "generation") {
        None => 0,
        Some(v) => e.at(Seg::Field("generation"), |e| {
            let g = check_int(e, v)?;
            if g < 0 {
                e.report("must not be negative");
            }
            Some(g)
        })?,
    };
    let node_selector = node_selector.and_then(|ns| {
        e.at(Seg::Field("nodeSelector"), |e| {
            check_dict(e, ns)?;
            check_generic(e, ns);
            to_value(ns, &|_, _| {})
        })
    });
    let mut names = HashSet::new();
    let no_counters = CounterSets::new();
    let pool_devices = if let Some(d) = devices {
        let ctx = DeviceContext {
            per_device_node_selection: false,
            counter_sets: &no_counters,
        };
        PoolDevices::Flat(e.at(Seg::Field("devices"), |e| {
            check_devices(e, d, &ctx, &mut names, max_slice_bytes)
        }))
    } else if let Some(s) = slices {
        PoolDevices::Slices(e.at(Seg::Field("slices"), |e| {
            check_slices(e, s, &mut names, max_slice_bytes)
        }))
    } else {
        PoolDevices::Flat(DeviceList::default())
    };
    Some(DesiredPool {
        devices: pool_devices,
        node_selector,
        all_nodes,
        generation,
    })
}

/// Every counter set the pool's slices share, read without reporting (the checks that
/// report come later, in traversal order): the API keeps sharedCounters and devices in
/// different slices, so a device refers to counter sets across the pool.
fn pool_counter_sets<'i>(slices: &[Input<'i>]) -> CounterSets<'i> {
    let mut sets = CounterSets::new();
    for item in slices {
        let Input::Dict(entries) = item else { continue };
        let Some(Input::List(shared)) = get(entries, "sharedCounters") else {
            continue;
        };
        for set in shared {
            let Input::Dict(set) = set else { continue };
            let Some(Input::Str(name)) = get(set, "name") else {
                continue;
            };
            let counters = sets.entry(*name).or_default();
            if let Some(Input::Dict(c)) = get(set, "counters") {
                counters.extend(c.iter().map(|(k, _)| *k));
            }
        }
    }
    sets
}

fn check_slices<'i>(
    e: &mut Errors<'i>,
    v: &Input<'i>,
    names: &mut HashSet<&'i str>,
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
            let per_device = match get(entries, "perDeviceNodeSelection") {
                None => false,
                Some(p) => e
                    .at(Seg::Field("perDeviceNodeSelection"), |e| check_bool(e, p))
                    .unwrap_or(false),
            };
            let has_devices = matches!(devices, Some(Input::List(l)) if !l.is_empty());
            let has_counters = matches!(shared, Some(Input::List(l)) if !l.is_empty());
            if has_devices && has_counters {
                e.report("a slice has devices or sharedCounters, not both");
            }
            let shared_value = shared.and_then(|s| {
                e.at(Seg::Field("sharedCounters"), |e| {
                    let list = check_list(e, s)?;
                    check_max(e, list, MAX_COUNTER_SETS, "counter sets");
                    for (j, set) in list.iter().enumerate() {
                        e.at(Seg::Index(j), |e| {
                            let Some(entries) = check_dict(e, set) else {
                                return;
                            };
                            match get(entries, "name") {
                                None => e.report("name is required"),
                                Some(n) => e.at(Seg::Field("name"), |e| {
                                    let Some(n) = check_str(e, n) else {
                                        return;
                                    };
                                    if !is_dns_label(n) {
                                        e.report("must be a DNS label");
                                    }
                                    if !set_names.insert(n) {
                                        e.report(format!(
                                            "duplicate counter set name {}",
                                            canonical::quote(n)
                                        ));
                                    }
                                }),
                            }
                            if let Some(c) = get(entries, "counters") {
                                e.at(Seg::Field("counters"), |e| {
                                    check_counters(e, c);
                                });
                            }
                            for (k, x) in entries {
                                if *k != "name" && *k != "counters" {
                                    e.at(Seg::Field(k), |e| check_generic(e, x));
                                }
                            }
                        });
                    }
                    to_value(s, &|v, f| {
                        v.items()
                            .iter()
                            .for_each(|set| canonical::counter_quantities(set, f))
                    })
                })
            });
            let ctx = DeviceContext {
                per_device_node_selection: per_device,
                counter_sets: &pool_sets,
            };
            let slice_devices = match devices {
                None => DeviceList::default(),
                Some(d) => e.at(Seg::Field("devices"), |e| {
                    check_devices(e, d, &ctx, names, max_slice_bytes)
                }),
            };
            let advanced = slice_devices.iter().any(|d| d.advanced);
            let limit = if advanced {
                MAX_DEVICES_ADVANCED
            } else {
                MAX_DEVICES
            };
            if let Some(Input::List(l)) = devices {
                if l.len() > limit {
                    e.at(Seg::Field("devices"), |e| {
                        e.report(format!(
                            "at most {limit} devices in a slice, got {}",
                            l.len()
                        ))
                    });
                }
            }
            out.push(SliceSpec {
                devices: slice_devices,
                shared_counters: shared_value,
                per_device_node_selection: per_device,
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
    };
    let driver = e.at(Seg::Field("driver"), |e| {
        let d = check_str(e, driver)?;
        if d.len() > MAX_DRIVER_LENGTH || !is_dns_subdomain(d) {
            e.report(format!(
                "must be a DNS subdomain of at most {MAX_DRIVER_LENGTH} characters"
            ));
        }
        Some(d.to_owned())
    });
    let mut out = BTreeMap::new();
    for (name, pool) in pools {
        let checked = e.at(Seg::Field("pools"), |e| {
            e.at(Seg::Key(name), |e| {
                check_pool(e, name, pool, max_slice_bytes)
            })
        });
        if let Some(p) = checked {
            out.insert((*name).to_owned(), p);
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
