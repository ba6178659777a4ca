//! The validated desired state: what validation produces and the planner and edits read,
//! and the limits of the API that more than one stage applies. It depends on no stage: the
//! plans made of it are kept beside it (`PlanMemo`, plan/replan.rs), not in it.
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

pub use crate::devices::{DeviceEntry, DeviceList};

/// An explicit slice.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceSpec {
    pub devices: DeviceList,
    pub shared_counters: Option<Value>,
    pub per_device_node_selection: bool,
    /// The values of `fields::carried()`, by its index, checked.
    pub carried: Vec<Option<Value>>,
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
    /// At most this many devices in each packed slice (a flat pool's `maxDevicesPerSlice`).
    pub max_devices_per_slice: usize,
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
    /// Shared: a device-level edit of one pool (`edit::with_devices`) copies only that one.
    pub pools: BTreeMap<String, Arc<DesiredPool>>,
    pub max_slice_bytes: usize,
}

/// Per-object overhead the packer reserves for metadata and the header (docs/core.md §4).
pub const SLICE_OVERHEAD: usize = 4096;
/// The API's most devices in a slice, and in a slice with taints, counters or list
/// attributes.
pub const MAX_DEVICES: usize = 128;
pub const MAX_DEVICES_ADVANCED: usize = 64;
