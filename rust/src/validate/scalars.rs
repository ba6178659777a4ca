//! The rules for single values: names (DNS labels and subdomains, C identifiers, qualified
//! and label names), label values, semantic versions, quantities, and the checks of scalar
//! members built on them (an attribute's value, a named or required string, a list of
//! unique names). Formats are apimachinery's, as the apiserver applies them.
use super::{
    check_bool, check_int, check_list, check_max, check_str, Errors, Seg, DUPLICATE,
    MAX_DRIVER_LENGTH, MAX_POOL_NAME_LENGTH, NANO, POLICY_LIMIT, REQUIRED,
};
use crate::canonical;
use crate::input::{get, Input};
use crate::quantity;

const MAX_VALUE_LENGTH: usize = 64;
const MAX_ID_LENGTH: usize = 32;

// The messages (the same words as the pure-Python core).
const BAD_DOMAIN: &str = "the domain must be a DNS subdomain of at most 63 characters";
const BAD_ID: &str = "the name must be a C identifier of at most 32 characters";
const BAD_VERSION: &str = "must be a semantic version (semver 2.0.0)";

impl<'a> Errors<'a> {
    /// `qualified_name_problems(name, false)`, remembered for the valid names.
    pub(super) fn name_problems(&mut self, name: &'a str) -> Vec<&'static str> {
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

fn is_alnum_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub(super) fn is_dns_label(s: &str) -> bool {
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
pub(super) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_shape)
}

/// A driver name, also the domain of an attribute: upper case is allowed (the server checks
/// the lower-cased name, and warns).
pub(super) fn is_driver_name(s: &str) -> bool {
    let lower = s
        .bytes()
        .any(|c| c.is_ascii_uppercase())
        .then(|| s.to_ascii_lowercase());
    !s.is_empty() && s.len() <= MAX_DRIVER_LENGTH && is_dns_subdomain(lower.as_deref().unwrap_or(s))
}

pub(super) fn is_pool_name(s: &str) -> bool {
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
pub(super) fn qualified_name_problems(name: &str, lower_case: bool) -> Vec<&'static str> {
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

pub(super) fn is_label_value(s: &str) -> bool {
    s.is_empty() || (s.len() <= 63 && is_label_body(s))
}

/// A label key (taint keys, binding conditions): `[prefix/]name`.
pub(super) fn is_label_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(|p| !p.is_empty() && is_dns_subdomain(p) && !name.contains('/'))
        && name.len() <= 63
        && is_label_body(name)
}

pub(super) fn is_allocatable(name: &str) -> bool {
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

/// A quantity (string or integer); its value in nano units when it is one, beyond
/// `POLICY_LIMIT` in magnitude kept at that bound (with its sign).
pub(super) fn check_quantity(e: &mut Errors<'_>, v: &Input<'_>) -> Option<i128> {
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
pub(super) fn member_quantity<'i>(
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

pub(super) fn check_scalar(e: &mut Errors<'_>, kind: &str, v: &Input<'_>) {
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
pub(super) fn check_named<'i>(
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
pub(super) fn check_required_named<'i>(
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

/// A list of names, each valid and unique, at most `limit`; the strings among them.
pub(super) fn check_unique_names<'i>(
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
