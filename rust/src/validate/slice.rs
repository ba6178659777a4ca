//! The rules of what a slice sets: its node selection (the pool's, or each device's own in a
//! slice with perDeviceNodeSelection), the counter sets it shares and their counters,
//! partitionTypeAttribute and skipNodeOperations. Its devices are device.rs's, and the walk
//! of a pool's slices that puts them together is pool.rs's.
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::scalars::{
    check_named, check_required_named, check_unique_names, is_dns_label, is_dns_subdomain,
    is_label_name, is_label_value, member_quantity, qualified_name_problems,
};
use super::{
    check_bool, check_dict, check_generic, check_list, check_max, check_others, check_str,
    to_value, Errors, Seg, BAD_DNS_LABEL, BAD_LABEL_NAME, BAD_LABEL_VALUE, REQUIRED,
};
use crate::canonical::{self, Tree};
use crate::fields;
use crate::input::{get, list_len, present, Input};

const MAX_COUNTERS: usize = 32;
const MAX_COUNTER_SETS: usize = 8;

// The messages (the same words as the pure-Python core).
const NOT_FULLY_QUALIFIED: &str = "must be <domain>/<name>";
const BAD_NODE_NAME: &str = "must be a DNS subdomain";
const PER_DEVICE_REQUIRED: &str =
    "exactly one of nodeName, nodeSelector, allNodes is required with perDeviceNodeSelection";
const PER_DEVICE_ONLY: &str =
    "nodeName, nodeSelector and allNodes are only allowed in a slice with perDeviceNodeSelection";
const ONLY_TRUE: &str = "must be true or unset";
const ONE_TERM: &str = "must have exactly one node selector term";
const TERMS_REQUIRED: &str = "at least one node selector term is required";
const BAD_OPERATOR: &str = "must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt";
const BAD_FIELD_OPERATOR: &str = "must be In or NotIn";
const BAD_FIELD_KEY: &str = "must be metadata.name";
const VALUES_REQUIRED: &str = "values are required with In and NotIn";
const VALUES_FORBIDDEN: &str = "values are not allowed with Exists and DoesNotExist";
const ONE_VALUE: &str = "exactly one value is required";
const PARTITION_NEEDS_COUNTERS: &str = "only allowed in a slice with devices that consume counters";
const PARTITION_ATTRIBUTE: &str = "must be a string attribute: the slice's partitionTypeAttribute";
const PREPARE_WITHOUT_UNPREPARE: &str = "NodePrepareResources needs NodeUnprepareResources or *";
const BAD_SKIP: &str = "must be one of NodePrepareResources, NodeUnprepareResources, *";

/// `{name: {"value": quantity}}`: 1 to 32 DNS labels; the names.
pub(super) fn check_counters<'i>(e: &mut Errors<'i>, v: &Input<'i>) -> Vec<&'i str> {
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

/// A node selector as the server checks it (core/v1 `ValidateNodeSelector`); a slice's own
/// selector has exactly one term.
pub(super) fn check_node_selector<'i>(e: &mut Errors<'i>, v: &Input<'i>, one_term: bool) {
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

pub(super) fn check_node_name(e: &mut Errors<'_>, v: &Input<'_>) {
    match check_str(e, v) {
        Some("") => e.report(REQUIRED),
        Some(s) if !is_dns_subdomain(s) => e.report(BAD_NODE_NAME),
        _ => {}
    }
}

/// The counter sets a pool shares: name -> counter names.
pub(super) type CounterSets<'i> = HashMap<&'i str, HashSet<&'i str>>;

pub(super) const NODE_FIELDS: [&str; 3] = ["allNodes", "nodeName", "nodeSelector"];

/// A device's own node selection, only in a slice with perDeviceNodeSelection.
pub(super) fn check_per_device<'i>(
    e: &mut Errors<'i>,
    entries: &[(&'i str, Input<'i>)],
    per_device: bool,
) {
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

/// Every counter set the pool's slices share, read without reporting (the checks that
/// report come later, in traversal order): the API keeps sharedCounters and devices in
/// different slices, so a device refers to counter sets across the pool.
pub(super) fn pool_counter_sets<'i>(slices: &[Input<'i>]) -> CounterSets<'i> {
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

pub(super) fn check_shared_counters<'i>(
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

/// A carried slice field's checker: its value, given the driver and the slice's devices.
type Checker = for<'i> fn(&mut Errors<'i>, &Input<'i>, &str, Option<&Input<'i>>) -> Option<Value>;

/// The checkers the table's `check` column names (fields.rs).
const CHECKERS: [(&str, Checker); 2] = [
    ("partition-type", |e, v, driver, devices| {
        check_partition_type(e, v, driver, devices).map(Value::from)
    }),
    ("node-operations", |e, v, _, _| {
        check_skip_node_operations(e, v).map(Value::from)
    }),
];

/// The carried fields of a slice (`fields::carried()`, by its index), each checked by its
/// checker.
pub(super) fn check_carried<'i>(
    e: &mut Errors<'i>,
    entries: &[(&'i str, Input<'i>)],
    driver: &str,
    devices: Option<&Input<'i>>,
) -> Vec<Option<Value>> {
    fields::carried()
        .iter()
        .map(|f| {
            let (_, check) = CHECKERS
                .iter()
                .find(|(name, _)| *name == f.check)
                .unwrap_or_else(|| panic!("_fields.txt: no checker {:?}", f.check));
            get(entries, f.name).and_then(|v| check(e, v, driver, devices))
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_carried_field_has_its_checker() {
        for f in fields::carried() {
            assert!(
                CHECKERS.iter().any(|(name, _)| *name == f.check),
                "{}",
                f.name
            );
        }
    }
}
