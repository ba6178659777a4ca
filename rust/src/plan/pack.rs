//! Stable packing of a flat device list into slices (docs/core.md §4).
//!
//! Devices stay where they are; only new or evicted devices move, into the lowest slice with
//! room. That keeps one changed device one update call, however large the pool.
use crate::model::{MAX_DEVICES_ADVANCED, SLICE_OVERHEAD};

/// What the limits need to know of a device.
#[derive(Clone, Copy, Debug)]
pub struct Item {
    /// Length of its canonical JSON (UTF-8 bytes).
    pub len: usize,
    pub advanced: bool,
}

/// What one slice may hold: the byte budget, and the device count (the pool's
/// `maxDevicesPerSlice`, else the API's maximum), lowered to the API's limit for slices with
/// taints, counters or list attributes.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_bytes: usize,
    pub max_devices: usize,
}

impl Limits {
    fn devices(self, advanced: bool) -> usize {
        if advanced {
            self.max_devices.min(MAX_DEVICES_ADVANCED)
        } else {
            self.max_devices
        }
    }
}

#[derive(Default)]
struct Bin {
    devices: Vec<usize>,
    bytes: usize,
    advanced: usize,
}

impl Bin {
    fn fits(&self, item: Item, limits: Limits) -> bool {
        self.devices.len() < limits.devices(self.advanced > 0 || item.advanced)
            && SLICE_OVERHEAD + self.bytes + item.len < limits.max_bytes
    }

    fn breaks_limits(&self, limits: Limits) -> bool {
        self.devices.len() > limits.devices(self.advanced > 0)
            || SLICE_OVERHEAD + self.bytes > limits.max_bytes
    }

    fn push(&mut self, index: usize, item: Item) {
        self.devices.push(index);
        self.bytes += item.len + 1;
        self.advanced += usize::from(item.advanced);
    }

    fn pop(&mut self, items: &[Item]) -> Option<usize> {
        let index = self.devices.pop()?;
        self.bytes -= items[index].len + 1;
        self.advanced -= usize::from(items[index].advanced);
        Some(index)
    }
}

/// Places `order` into `bins`, each device into the lowest bin it fits in, else a new one.
fn place(
    bins: &mut Vec<Bin>,
    items: &[Item],
    order: impl IntoIterator<Item = usize>,
    limits: Limits,
) {
    // Bins below `full` hold the maximum count and can never take another device.
    let mut full = 0;
    for index in order {
        while full < bins.len() && bins[full].devices.len() >= limits.max_devices {
            full += 1;
        }
        let item = items[index];
        match bins[full..].iter_mut().find(|b| b.fits(item, limits)) {
            Some(bin) => bin.push(index, item),
            None => {
                let mut bin = Bin::default();
                bin.push(index, item);
                bins.push(bin);
            }
        }
    }
}

/// Whether a slice of these devices breaks its limits: the packer would evict from it.
pub fn breaks_limits(items: impl IntoIterator<Item = Item>, limits: Limits) -> bool {
    let mut bin = Bin::default();
    for item in items {
        bin.push(0, item);
    }
    bin.breaks_limits(limits)
}

/// Packs `items` (desired order) given `current`: per slice index, the desired devices it holds
/// now, in stored order. Returns device indices per slice, slice `i` at position `i`.
pub fn pack(items: &[Item], current: &[Vec<usize>], limits: Limits) -> Vec<Vec<usize>> {
    let mut kept = vec![false; items.len()];
    let mut evicted = Vec::new();
    let mut bins: Vec<Bin> = Vec::with_capacity(current.len());
    for held in current {
        let mut bin = Bin::default();
        for &index in held {
            if !kept[index] {
                kept[index] = true;
                bin.push(index, items[index]);
            }
        }
        while bin.breaks_limits(limits) {
            let index = bin
                .pop(items)
                .expect("a slice over its limits is not empty");
            kept[index] = false;
            evicted.push(index);
        }
        bins.push(bin);
    }
    let mut was_evicted = vec![false; items.len()];
    for &index in &evicted {
        was_evicted[index] = true;
    }
    let fresh_devices = (0..items.len()).filter(|&i| !kept[i] && !was_evicted[i]);
    let order: Vec<usize> = fresh_devices
        .chain(evicted.iter().copied().filter(|&i| !kept[i]))
        .collect();
    place(&mut bins, items, order, limits);

    let mut fresh = Vec::new();
    place(&mut fresh, items, 0..items.len(), limits);
    let slack = (fresh.len() / 10).max(1);
    trim(&mut bins);
    if bins.len() > fresh.len() + slack {
        bins = fresh;
    }
    if bins.is_empty() {
        bins.push(Bin::default());
    }
    bins.into_iter().map(|b| b.devices).collect()
}

/// Empty slices at the end would only be deleted later; slice 0 always stays.
fn trim(bins: &mut Vec<Bin>) {
    while bins.len() > 1 && bins.last().is_some_and(|b| b.devices.is_empty()) {
        bins.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MAX_DEVICES;

    const MAX: Limits = Limits {
        max_bytes: 1 << 20,
        max_devices: MAX_DEVICES,
    };

    fn items(n: usize) -> Vec<Item> {
        vec![
            Item {
                len: 100,
                advanced: false
            };
            n
        ]
    }

    #[test]
    fn first_publish_fills_in_order() {
        let packed = pack(&items(300), &[], MAX);
        assert_eq!(
            packed.iter().map(Vec::len).collect::<Vec<_>>(),
            [128, 128, 44]
        );
        assert_eq!(packed[1][0], 128);
    }

    #[test]
    fn new_devices_fill_holes_first() {
        // Slice 0 lost a device; 255 and 256 are new.
        let current = vec![(0..127).collect::<Vec<_>>(), (127..255).collect()];
        let packed = pack(&items(257), &current, MAX);
        assert_eq!(packed[1], current[1]);
        assert_eq!(packed[0][..127], current[0][..]);
        assert_eq!(packed[0][127], 255);
        assert_eq!(packed[2], [256]);
    }

    #[test]
    fn empty_pool_is_one_empty_slice() {
        assert_eq!(pack(&[], &[], MAX), vec![Vec::<usize>::new()]);
        assert_eq!(pack(&[], &[vec![], vec![]], MAX), vec![Vec::<usize>::new()]);
    }

    #[test]
    fn advanced_devices_halve_the_limit() {
        let mut it = items(100);
        it[0].advanced = true;
        let packed = pack(&it, &[], MAX);
        assert_eq!(packed.iter().map(Vec::len).collect::<Vec<_>>(), [64, 36]);
    }

    #[test]
    fn byte_budget() {
        let limits = Limits {
            max_bytes: SLICE_OVERHEAD + 3 * 101,
            ..MAX
        };
        let packed = pack(&items(10), &[], limits);
        assert_eq!(
            packed.iter().map(Vec::len).collect::<Vec<_>>(),
            [3, 3, 3, 1]
        );
    }

    #[test]
    fn a_pool_limit_below_the_apis() {
        let limits = Limits {
            max_devices: 64,
            ..MAX
        };
        let packed = pack(&items(130), &[], limits);
        assert_eq!(packed.iter().map(Vec::len).collect::<Vec<_>>(), [64, 64, 2]);
        // A taint added later lowers nothing: no device leaves its slice.
        let mut tainted = items(130);
        tainted[5].advanced = true;
        assert_eq!(pack(&tainted, &packed, limits), packed);
        // Advanced devices keep the API's limit when the pool's is higher.
        let limits = Limits {
            max_devices: 100,
            ..MAX
        };
        assert_eq!(pack(&tainted, &[], limits)[0].len(), 64);
    }
}
