//! The API's ResourceSlice fields: `python/resourceslice/_fields.txt`, the table both cores
//! read (its head says what each column means). The header's optional fields, their order,
//! decoding and the feature gates of dropped fields come from it.
use std::sync::OnceLock;

/// One row of the table.
#[derive(Debug)]
pub struct Field {
    /// The JSON name.
    pub name: &'static str,
    /// The struct it is a member of: `spec`, `device`, `device.<member>`.
    pub at: &'static str,
    /// Its feature gates, as the API's `+featureGate` tag lists them (empty: none).
    pub gates: Vec<&'static str>,
    /// Its JSON type as the API has it (string, bool, int, list, map, object).
    pub json: &'static str,
    /// A carried slice field's checker (validate/slice.rs); `-` for fields handled by name.
    pub check: &'static str,
}

const TEXT: &str = include_str!("../../python/resourceslice/_fields.txt");

/// Every row, in the table's order.
pub fn all() -> &'static [Field] {
    static FIELDS: OnceLock<Vec<Field>> = OnceLock::new();
    FIELDS.get_or_init(|| {
        TEXT.lines()
            .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
            .map(|line| {
                let cols: Vec<&'static str> = line.split_whitespace().collect();
                let [name, at, gates, json, check] = cols[..] else {
                    panic!("_fields.txt: not five columns: {line}");
                };
                let gates = match gates {
                    "-" => Vec::new(),
                    g => g.split(',').collect(),
                };
                Field {
                    name,
                    at,
                    gates,
                    json,
                    check,
                }
            })
            .collect()
    })
}

/// The optional slice fields the core carries as values, in the header's order: a
/// `SliceSpec`'s and a `Header`'s `carried` are indexed like this.
pub fn carried() -> &'static [&'static Field] {
    static CARRIED: OnceLock<Vec<&'static Field>> = OnceLock::new();
    CARRIED.get_or_init(|| {
        all()
            .iter()
            .filter(|f| f.at == "spec" && f.check != "-")
            .collect()
    })
}

/// The gate a dropped member named `name` needs, by name alone: every gated field but those
/// whose name another field has without a gate (a device's own node selection, see
/// `device_gate`).
pub fn gate(name: &str) -> Option<&'static str> {
    let ungated = |n: &str| all().iter().any(|f| f.name == n && f.gates.is_empty());
    all()
        .iter()
        .find(|f| f.name == name && !f.gates.is_empty())
        .filter(|f| !ungated(f.name))
        .map(|f| f.gates[0])
}

/// The gate of a device's member `name` that `gate` leaves out (nodeName...).
pub fn device_gate(name: &str) -> Option<&'static str> {
    all()
        .iter()
        .find(|f| f.at == "device" && f.name == name)
        .and_then(|f| f.gates.first().copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_by_name() {
        assert_eq!(gate("taints"), Some("DRADeviceTaints"));
        assert_eq!(gate("bindsToNode"), Some("DRADeviceBindingConditions"));
        assert_eq!(gate("nodeName"), None);
        assert_eq!(gate("devices"), None);
        assert_eq!(device_gate("nodeName"), Some("DRAPartitionableDevices"));
        assert_eq!(device_gate("name"), None);
    }
}
