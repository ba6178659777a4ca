//! `prepare_desired`: limits and formats of `resource.k8s.io/v1` (docs/core.md §3), and the
//! canonical desired state they guard.
//!
//! The input arrives as an `Input` tree that the glue builds over Python data; every problem
//! is collected with its path, in traversal order, and a device's canonical JSON is rendered
//! only once it is known to be valid.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::canonical::{self, Tree};
use crate::input::{get, list_len, present, Input};
use crate::model::{
    Desired, DesiredPool, DeviceEntry, DeviceList, PoolDevices, SliceSpec, MAX_DEVICES,
    MAX_DEVICES_ADVANCED, SLICE_OVERHEAD,
};
use crate::quantity;

const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
const MAX_ATTRIBUTE_VALUES: usize = 48;
const MAX_VALUE_LENGTH: usize = 64;
const MAX_TAINTS: usize = 16;
const MAX_CONSUMES_COUNTERS: usize = 2;
const MAX_COUNTERS: usize = 32;
const MAX_COUNTER_SETS: usize = 8;
const MAX_BINDING_CONDITIONS: usize = 4;
const MAX_COMPATIBILITY_GROUPS: usize = 2;
const MAX_VALID_VALUES: usize = 10;
const MAX_DRIVER_LENGTH: usize = 63;
const MAX_POOL_NAME_LENGTH: usize = 253;
const MAX_ID_LENGTH: usize = 32;
const INT64: i128 = 1 << 63;
/// Quantities in the rules of a request policy are counted in nano units; the policy's
/// numbers must be below 10^20 (a client-side limit: exact arithmetic in 128 bits).
const NANO: i128 = 1_000_000_000;
const POLICY_LIMIT: i128 = 100_000_000_000_000_000_000 * NANO;

// The messages (the same words as the pure-Python core).
const NOT_UTF8: &str = "not valid UTF-8";
const BAD_DOMAIN: &str = "the domain must be a DNS subdomain of at most 63 characters";
const BAD_ID: &str = "the name must be a C identifier of at most 32 characters";
const NOT_FULLY_QUALIFIED: &str = "must be <domain>/<name>";
const BAD_VERSION: &str = "must be a semantic version (semver 2.0.0)";
const ATTRIBUTE_ONE_TYPE: &str =
    "must have exactly one of bool, int, string, version, bools, ints, strings, versions";
const EMPTY_LIST: &str = "must not be empty";
const REQUIRED: &str = "is required";
const BAD_LABEL_NAME: &str = "must be a label name";
const BAD_LABEL_VALUE: &str = "must be a label value";
const BAD_EFFECT: &str = "must be one of NoSchedule, NoExecute, None";
const BAD_TIME: &str = "must be an RFC 3339 time";
const BAD_DNS_LABEL: &str = "must be a DNS label";
const BAD_NODE_NAME: &str = "must be a DNS subdomain";
const DUPLICATE: &str = "duplicate";
const PER_DEVICE_REQUIRED: &str =
    "exactly one of nodeName, nodeSelector, allNodes is required with perDeviceNodeSelection";
const PER_DEVICE_ONLY: &str =
    "nodeName, nodeSelector and allNodes are only allowed in a slice with perDeviceNodeSelection";
const ONLY_TRUE: &str = "must be true or unset";
const NODE_SELECTION_REQUIRED: &str = "no node selection: a Node owner, nodeSelector, allNodes, or slices with perDeviceNodeSelection is required";
const NODE_SELECTION_CONFLICT: &str =
    "at most one of a Node owner, nodeSelector, allNodes and perDeviceNodeSelection";
const ONE_TERM: &str = "must have exactly one node selector term";
const TERMS_REQUIRED: &str = "at least one node selector term is required";
const BAD_OPERATOR: &str = "must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt";
const BAD_FIELD_OPERATOR: &str = "must be In or NotIn";
const BAD_FIELD_KEY: &str = "must be metadata.name";
const VALUES_REQUIRED: &str = "values are required with In and NotIn";
const VALUES_FORBIDDEN: &str = "values are not allowed with Exists and DoesNotExist";
const ONE_VALUE: &str = "exactly one value is required";
const NEGATIVE: &str = "must not be negative";
const BAD_DEVICES_PER_SLICE: &str = "must be from 1 to 128";
const PACKED_ONLY: &str = "only a flat devices list is packed: not allowed with slices";
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
const PARTITION_NEEDS_COUNTERS: &str = "only allowed in a slice with devices that consume counters";
const PARTITION_ATTRIBUTE: &str = "must be a string attribute: the slice's partitionTypeAttribute";
const PREPARE_WITHOUT_UNPREPARE: &str = "NodePrepareResources needs NodeUnprepareResources or *";
const BAD_SKIP: &str = "must be one of NodePrepareResources, NodeUnprepareResources, *";
const DEVICES_AND_COUNTERS: &str = "a slice has devices or sharedCounters, not both";

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
    /// Attribute and capacity names found valid, by address and length. Keys of Python
    /// dicts are shared objects (literals are interned, `json.loads` reuses equal keys), so
    /// a pool's devices name the same few strs over and over: each is checked once. Sound
    /// for one call: every str of the input outlives it, so an address is never reused.
    good_names: rustc_hash::FxHashSet<(usize, usize)>,
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

    fn field<R>(&mut self, name: &'a str, f: impl FnOnce(&mut Self) -> R) -> R {
        self.at(Seg::Field(name), f)
    }

    fn report_at(&mut self, name: &'a str, problem: impl AsRef<str>) {
        self.field(name, |e| e.report(problem));
    }

    fn count(&self) -> usize {
        self.list.len()
    }

    /// `qualified_name_problems(name, false)`, remembered for the valid names.
    fn name_problems(&mut self, name: &'a str) -> Vec<&'static str> {
        let key = (name.as_ptr() as usize, name.len());
        if self.good_names.contains(&key) {
            return vec![];
        }
        let problems = qualified_name_problems(name, false);
        if problems.is_empty() {
            self.good_names.insert(key);
        }
        problems
    }
}

// Formats: apimachinery's, as the apiserver applies them.

fn is_alnum_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_label_shape(s)
}

fn is_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum_lower(b[0])
        && is_alnum_lower(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
}

/// A DNS subdomain as Kubernetes checks it: dot-separated labels, 253 bytes in all, and no
/// limit on one label.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_shape)
}

/// A driver name, also the domain of an attribute: upper case is allowed (the server checks
/// the lower-cased name, and warns).
fn is_driver_name(s: &str) -> bool {
    let lower = s
        .bytes()
        .any(|c| c.is_ascii_uppercase())
        .then(|| s.to_ascii_lowercase());
    !s.is_empty() && s.len() <= MAX_DRIVER_LENGTH && is_dns_subdomain(lower.as_deref().unwrap_or(s))
}

fn is_pool_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_POOL_NAME_LENGTH && s.split('/').all(is_dns_subdomain)
}

fn is_c_identifier(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_ID_LENGTH
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

/// An attribute or capacity name: a C identifier, optionally after `<driver name>/` (in
/// lower case where the server's declarative rules check it). Like the server, a name with
/// more than one slash is not looked at.
fn qualified_name_problems(name: &str, lower_case: bool) -> Vec<&'static str> {
    // Split by hand: this runs for every attribute and capacity of every device.
    let Some((domain, id)) = name.split_once('/') else {
        return if is_c_identifier(name) {
            vec![]
        } else {
            vec![BAD_ID]
        };
    };
    if id.contains('/') {
        return vec![];
    }
    let mut problems = vec![];
    let lower_ok = !lower_case || domain.bytes().all(|c| !c.is_ascii_uppercase());
    if !(is_driver_name(domain) && lower_ok) {
        problems.push(BAD_DOMAIN);
    }
    if !is_c_identifier(id) {
        problems.push(BAD_ID);
    }
    problems
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

/// A label key (taint keys, binding conditions): `[prefix/]name`.
fn is_label_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(|p| !p.is_empty() && is_dns_subdomain(p) && !name.contains('/'))
        && name.len() <= 63
        && is_label_body(name)
}

fn is_allocatable(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
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

// The checks.

fn check_str<'i>(e: &mut Errors<'_>, v: &Input<'i>) -> Option<&'i str> {
    match v {
        Input::Str(s) => Some(*s),
        Input::BadStr => {
            e.report(NOT_UTF8);
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
        Input::BadStr => e.report(NOT_UTF8),
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

/// The generic rules for every member not in `known`.
fn check_others<'i>(e: &mut Errors<'i>, entries: &[(&'i str, Input<'i>)], known: &[&str]) {
    for (k, x) in present(entries) {
        if !known.contains(&k) {
            e.field(k, |e| check_generic(e, x));
        }
    }
}

/// A quantity (string or integer); its value in nano units when it is one, beyond
/// `POLICY_LIMIT` in magnitude kept at that bound (with its sign).
fn check_quantity(e: &mut Errors<'_>, v: &Input<'_>) -> Option<i128> {
    match v {
        Input::Int(i) => Some((i128::from(*i) * NANO).clamp(-POLICY_LIMIT, POLICY_LIMIT)),
        _ => {
            let s = check_str(e, v)?;
            match quantity::Quantity::parse(s) {
                Some(q) => Some(q.nano(POLICY_LIMIT)),
                None => {
                    e.report(format!("invalid quantity {}", canonical::quote(s)));
                    None
                }
            }
        }
    }
}

/// The quantity member `key`, when present: `(value, parsed)`.
fn member_quantity<'i>(
    e: &mut Errors<'i>,
    entries: &[(&'i str, Input<'i>)],
    key: &'static str,
) -> (Option<i128>, bool) {
    match get(entries, key) {
        None => (None, true),
        Some(raw) => {
            let q = e.field(key, |e| check_quantity(e, raw));
            (q, q.is_some())
        }
    }
}

fn check_max<T>(e: &mut Errors<'_>, items: &[T], max: usize, what: &str) -> bool {
    if items.len() > max {
        e.report(format!("at most {max} {what}, got {}", items.len()));
        return false;
    }
    true
}

fn check_value_length(e: &mut Errors<'_>, s: &str) {
    if s.len() > MAX_VALUE_LENGTH {
        e.report(format!("must be at most {MAX_VALUE_LENGTH} bytes"));
    }
}

fn check_version(e: &mut Errors<'_>, s: &str) {
    if !is_semver(s) {
        e.report(BAD_VERSION);
    }
    check_value_length(e, s);
}

fn check_scalar(e: &mut Errors<'_>, kind: &str, v: &Input<'_>) {
    match kind {
        "bool" => {
            check_bool(e, v);
        }
        "int" => {
            check_int(e, v);
        }
        _ => {
            if let Some(s) = check_str(e, v) {
                if kind == "string" {
                    check_value_length(e, s);
                } else {
                    check_version(e, s);
                }
            }
        }
    }
}

/// A string member that must be valid; the string.
fn check_named<'i>(
    e: &mut Errors<'_>,
    v: &Input<'i>,
    valid: impl Fn(&str) -> bool,
    problem: &str,
) -> Option<&'i str> {
    let s = check_str(e, v)?;
    if !valid(s) {
        e.report(problem);
    }
    Some(s)
}

/// A string member the server requires: absent or empty is "required".
fn check_required_named<'i>(
    e: &mut Errors<'i>,
    entries: &[(&'i str, Input<'i>)],
    key: &'static str,
    valid: impl Fn(&str) -> bool,
    problem: &str,
) -> Option<&'i str> {
    e.field(key, |e| match get(entries, key) {
        None | Some(Input::Str("")) => {
            e.report(REQUIRED);
            None
        }
        Some(raw) => check_named(e, raw, valid, problem),
    })
}

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

/// `{name: {"value": quantity}}`: 1 to 32 DNS labels; the names.
fn check_counters<'i>(e: &mut Errors<'i>, v: &Input<'i>) -> Vec<&'i str> {
    let Some(entries) = check_dict(e, v) else {
        return Vec::new();
    };
    if entries.is_empty() {
        e.report(REQUIRED);
    }
    check_max(e, entries, MAX_COUNTERS, "counters");
    for (name, counter) in entries {
        e.at(Seg::Key(name), |e| {
            if !is_dns_label(name) {
                e.report(BAD_DNS_LABEL);
            }
            if let Some(c) = check_dict(e, counter) {
                member_quantity(e, c, "value");
                check_others(e, c, &["value"]);
            }
        });
    }
    entries.iter().map(|(k, _)| *k).collect()
}

/// A list of names, each valid and unique, at most `limit`; the strings among them.
fn check_unique_names<'i>(
    e: &mut Errors<'i>,
    v: &Input<'i>,
    valid: impl Fn(&str) -> bool,
    problem: &str,
    limit: Option<(usize, &str)>,
) -> Vec<&'i str> {
    let Some(items) = check_list(e, v) else {
        return Vec::new();
    };
    if let Some((max, what)) = limit {
        check_max(e, items, max, what);
    }
    let mut names: Vec<&'i str> = Vec::new();
    for (i, x) in items.iter().enumerate() {
        e.at(Seg::Index(i), |e| {
            if let Some(s) = check_named(e, x, &valid, problem) {
                if names.contains(&s) {
                    e.report(DUPLICATE);
                }
                names.push(s);
            }
        });
    }
    names
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

/// A node selector as the server checks it (core/v1 `ValidateNodeSelector`); a slice's own
/// selector has exactly one term.
fn check_node_selector<'i>(e: &mut Errors<'i>, v: &Input<'i>, one_term: bool) {
    let Some(entries) = check_dict(e, v) else {
        return;
    };
    e.field("nodeSelectorTerms", |e| {
        let terms = match get(entries, "nodeSelectorTerms") {
            None => Some(&[][..]),
            Some(raw) => check_list(e, raw),
        };
        let Some(terms) = terms else { return };
        if terms.is_empty() {
            e.report(TERMS_REQUIRED);
        }
        if one_term && terms.len() != 1 {
            e.report(ONE_TERM);
        }
        for (i, term) in terms.iter().enumerate() {
            e.at(Seg::Index(i), |e| {
                let Some(t) = check_dict(e, term) else { return };
                for (k, x) in present(t) {
                    e.field(k, |e| match k {
                        "matchExpressions" | "matchFields" => {
                            for (j, r) in check_list(e, x).unwrap_or_default().iter().enumerate() {
                                e.at(Seg::Index(j), |e| {
                                    if k == "matchExpressions" {
                                        check_expression(e, r)
                                    } else {
                                        check_field_expression(e, r)
                                    }
                                });
                            }
                        }
                        _ => check_generic(e, x),
                    });
                }
            });
        }
    });
    check_others(e, entries, &["nodeSelectorTerms"]);
}

/// A node selector requirement: its members, operator and values.
type Requirement<'x, 'i> = (&'x [(&'i str, Input<'i>)], Option<&'i str>, Vec<&'i str>);

/// A requirement's members, operator and values (the strings among them).
fn requirement<'x, 'i>(e: &mut Errors<'i>, v: &'x Input<'i>) -> Option<Requirement<'x, 'i>> {
    let entries = check_dict(e, v)?;
    let mut operator = None;
    let mut values = Vec::new();
    for (k, x) in present(entries) {
        e.field(k, |e| match k {
            "operator" => operator = check_str(e, x),
            "values" => {
                for (i, item) in check_list(e, x).unwrap_or_default().iter().enumerate() {
                    values.push(e.at(Seg::Index(i), |e| check_str(e, item)).unwrap_or(""));
                }
            }
            "key" => {}
            _ => check_generic(e, x),
        });
    }
    Some((entries, operator, values))
}

fn requirement_key<'x, 'i>(entries: &'x [(&'i str, Input<'i>)]) -> &'x Input<'i> {
    get(entries, "key").unwrap_or(&Input::Str(""))
}

fn check_expression<'i>(e: &mut Errors<'i>, v: &Input<'i>) {
    let Some((entries, operator, values)) = requirement(e, v) else {
        return;
    };
    e.field("key", |e| {
        check_named(e, requirement_key(entries), is_label_name, BAD_LABEL_NAME)
    });
    e.field("values", |e| {
        match operator {
            Some("In" | "NotIn") if values.is_empty() => e.report(VALUES_REQUIRED),
            Some("Exists" | "DoesNotExist") if !values.is_empty() => e.report(VALUES_FORBIDDEN),
            Some("Gt" | "Lt") if values.len() != 1 => e.report(ONE_VALUE),
            _ => {}
        }
        for (i, s) in values.iter().enumerate() {
            if !is_label_value(s) {
                e.at(Seg::Index(i), |e| e.report(BAD_LABEL_VALUE));
            }
        }
    });
    if !matches!(
        operator,
        Some("In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt")
    ) {
        e.report_at("operator", BAD_OPERATOR);
    }
}

fn check_field_expression<'i>(e: &mut Errors<'i>, v: &Input<'i>) {
    let Some((entries, operator, values)) = requirement(e, v) else {
        return;
    };
    if matches!(operator, Some("In" | "NotIn")) {
        if values.len() != 1 {
            e.report_at("values", ONE_VALUE);
        }
    } else {
        e.report_at("operator", BAD_FIELD_OPERATOR);
    }
    let key = e.field("key", |e| {
        check_named(
            e,
            requirement_key(entries),
            |s| s == "metadata.name",
            BAD_FIELD_KEY,
        )
    });
    if key == Some("metadata.name") {
        e.field("values", |e| {
            for (i, s) in values.iter().enumerate() {
                if !is_dns_subdomain(s) {
                    e.at(Seg::Index(i), |e| e.report(BAD_NODE_NAME));
                }
            }
        });
    }
}

fn check_node_name(e: &mut Errors<'_>, v: &Input<'_>) {
    match check_str(e, v) {
        Some("") => e.report(REQUIRED),
        Some(s) if !is_dns_subdomain(s) => e.report(BAD_NODE_NAME),
        _ => {}
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
type NameSet<'i> = rustc_hash::FxHashSet<&'i str>;

/// The counter sets a pool shares: name -> counter names.
type CounterSets<'i> = HashMap<&'i str, HashSet<&'i str>>;

const NODE_FIELDS: [&str; 3] = ["allNodes", "nodeName", "nodeSelector"];

/// A device's own node selection, only in a slice with perDeviceNodeSelection.
fn check_per_device<'i>(e: &mut Errors<'i>, entries: &[(&'i str, Input<'i>)], per_device: bool) {
    let fields: Vec<(&'static str, &Input<'i>)> = NODE_FIELDS
        .iter()
        .filter_map(|k| get(entries, k).map(|v| (*k, v)))
        .collect();
    if !per_device {
        if !fields.is_empty() {
            e.report(PER_DEVICE_ONLY);
        }
        return;
    }
    let mut chosen = 0;
    for (k, raw) in fields {
        e.field(k, |e| match k {
            "nodeName" => {
                check_node_name(e, raw);
                chosen += usize::from(!matches!(raw, Input::Str("")));
            }
            "nodeSelector" => {
                check_node_selector(e, raw, false);
                chosen += 1;
            }
            _ => {
                if check_bool(e, raw) == Some(false) {
                    e.report(ONLY_TRUE);
                } else {
                    chosen += 1;
                }
            }
        });
    }
    if chosen != 1 {
        e.report(PER_DEVICE_REQUIRED);
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

/// Walks the quantities of a subtree.
type QuantityWalk<'x, 'i> = dyn Fn(&'x Input<'i>, &mut dyn FnMut(&'x Input<'i>));

/// A checked subtree as a pruned JSON value, its quantities (`quantities`) canonical.
fn to_value<'x, 'i>(v: &'x Input<'i>, quantities: &QuantityWalk<'x, 'i>) -> Option<Value> {
    let mut subs = Vec::new();
    quantities(v, &mut |q| {
        canonical::quantity_sub(&mut subs, q, &mut quantity::canonical)
    });
    let json = canonical::to_json_with(v, &subs);
    canonical::prune(serde_json::from_str(&json).expect("JSON written by this crate"))
}

/// The devices of one list (a flat pool or one slice), with name uniqueness across `names`,
/// and whether any of them uses advanced features.
fn check_devices<'i>(
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

fn check_shared_counters<'i>(
    e: &mut Errors<'i>,
    v: &Input<'i>,
    set_names: &mut HashSet<&'i str>,
) -> Option<Value> {
    let list = check_list(e, v)?;
    check_max(e, list, MAX_COUNTER_SETS, "counter sets");
    let before = e.count();
    for (j, set) in list.iter().enumerate() {
        e.at(Seg::Index(j), |e| {
            let Some(entries) = check_dict(e, set) else {
                return;
            };
            if let Some(n) = check_required_named(e, entries, "name", is_dns_label, BAD_DNS_LABEL) {
                if !set_names.insert(n) {
                    e.report(format!(
                        "duplicate counter set name {}",
                        canonical::quote(n)
                    ));
                }
            }
            e.field("counters", |e| match get(entries, "counters") {
                None => e.report(REQUIRED),
                Some(c) => {
                    check_counters(e, c);
                }
            });
            check_others(e, entries, &["name", "counters"]);
        });
    }
    (e.count() == before).then_some(())?;
    to_value(v, &|v, f| {
        v.items()
            .iter()
            .for_each(|set| canonical::counter_quantities(set, f))
    })
}

/// `partitionTypeAttribute`: a fully qualified attribute name that every device of the
/// slice which consumes counters has as a string (an attribute in the driver's own domain
/// may also be written bare).
fn check_partition_type<'i>(
    e: &mut Errors<'i>,
    v: &Input<'i>,
    driver: &str,
    devices: Option<&Input<'i>>,
) -> Option<String> {
    let consumers: Vec<(usize, &[(&'i str, Input<'i>)])> = match devices {
        Some(Input::List(l)) => l
            .iter()
            .enumerate()
            .filter_map(|(i, d)| match d {
                Input::Dict(d) if list_len(get(d, "consumesCounters")) > 0 => Some((i, &d[..])),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let name = e.field("partitionTypeAttribute", |e| {
        let name = check_str(e, v)?;
        let mut problems = qualified_name_problems(name, true);
        if !name.contains('/') {
            problems.push(NOT_FULLY_QUALIFIED);
        }
        for problem in problems {
            e.report(problem);
        }
        if consumers.is_empty() {
            e.report(PARTITION_NEEDS_COUNTERS);
        }
        Some(name)
    })?;
    // Only a name no device could carry spares the devices (the server checks them for a
    // domain in upper case too).
    if consumers.is_empty()
        || !name.contains('/')
        || !qualified_name_problems(name, false).is_empty()
    {
        return Some(name.to_owned());
    }
    let bare = name
        .strip_prefix(driver)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or("");
    for (i, device) in consumers {
        let attribute = match get(device, "attributes") {
            Some(Input::Dict(attributes)) => get(attributes, name)
                .or_else(|| (!bare.is_empty()).then(|| get(attributes, bare)).flatten()),
            _ => None,
        };
        let is_string = matches!(attribute, Some(Input::Dict(a)) if get(a, "string").is_some());
        if !is_string {
            e.field("devices", |e| {
                e.at(Seg::Index(i), |e| {
                    e.field("attributes", |e| {
                        e.at(Seg::Key(name), |e| e.report(PARTITION_ATTRIBUTE))
                    })
                })
            });
        }
    }
    Some(name.to_owned())
}

fn check_skip_node_operations<'i>(e: &mut Errors<'i>, v: &Input<'i>) -> Option<Vec<String>> {
    e.field("skipNodeOperations", |e| {
        let ops = check_unique_names(
            e,
            v,
            |s| matches!(s, "NodePrepareResources" | "NodeUnprepareResources" | "*"),
            BAD_SKIP,
            None,
        );
        if ops.contains(&"NodePrepareResources")
            && !ops
                .iter()
                .any(|s| matches!(*s, "NodeUnprepareResources" | "*"))
        {
            e.report(PREPARE_WITHOUT_UNPREPARE);
        }
        (!ops.is_empty()).then(|| ops.iter().map(|s| (*s).to_owned()).collect())
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
            let partition_type_attribute = get(entries, "partitionTypeAttribute")
                .and_then(|p| check_partition_type(e, p, driver, devices));
            let skip_node_operations =
                get(entries, "skipNodeOperations").and_then(|s| check_skip_node_operations(e, s));
            out.push(SliceSpec {
                devices: slice_devices,
                shared_counters: shared_value,
                per_device_node_selection: per_device,
                partition_type_attribute,
                skip_node_operations,
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
