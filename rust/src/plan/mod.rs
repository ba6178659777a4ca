//! The planning stage (docs/core.md §4-§5): what one pool's slices need to become the
//! desired state. The types of a plan are here; pool.rs makes one (`plan_pool`), pack.rs
//! places a flat pool's devices in slices, and replan.rs keeps what a plan found beside the
//! desired state (`PlanMemo`), so that the next plan of an edited pool reads only what
//! changed (`changed_pools` links the unchanged pools of an update). Planning reads the
//! validated model (model.rs) only, never the validation.
pub mod pack;
pub mod pool;
pub mod replan;

/// The slices' owner: `(api_version, kind, name, uid)`.
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub generation: i64,
    pub slice_count: usize,
    pub device_count: usize,
    pub deletes: Vec<(String, String, String)>,
    /// Names of every slice to write: the updates, then the creates.
    pub writes: Vec<String>,
    /// Where the next window starts: the first write without a body here.
    pub next_write: usize,
    /// Bodies of the writes in the requested window only.
    pub updates: Vec<(String, Vec<u8>)>,
    pub creates: Vec<Vec<u8>>,
    /// Slices not created because a slice being deleted still holds their name.
    pub waiting: Vec<String>,
    /// Slices this plan worked out the change of; the others' was carried over (replan.rs).
    pub compared: usize,
}

/// How a desired slice differs from its stored record of the current generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    None,
    /// Only the device list: the header (node selection, counters, count, ...) is as stored.
    Devices,
    /// A create, an obsolete record to overwrite, or a header that changes.
    Slice,
}

/// Which writes of a plan get bodies: from `first_write` on, in the order of
/// `Plan::writes`, until the bodies reach `max_body_bytes` (at least one; all when None).
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    pub first_write: usize,
    pub max_body_bytes: Option<usize>,
}
