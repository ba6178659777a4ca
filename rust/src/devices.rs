//! The devices of one list (a flat pool or an explicit slice), in order, as canonical JSON.
//!
//! Why chunks: a device-level edit (edit.rs) of one device in a 100,000-device pool must not
//! copy the pool. The devices are kept in chunks of up to `CHUNK`, shared (`Arc`) between the
//! desired states before and after an edit; an edit copies only the chunks it changes, and
//! finds a name through a small index per chunk, built once and shared with the chunk.
use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::strlist::StrList;
use crate::text::TextList;

/// Devices per chunk: an edit copies at most this many devices' text per chunk it touches
/// (about 100 KB for GPU-like devices), and a lookup by name visits `len / CHUNK` indexes.
const CHUNK: usize = 256;

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

#[derive(Default)]
struct Chunk {
    names: StrList,
    /// Shared with the informer's records of the same text (text.rs).
    jsons: TextList,
    /// `(advanced, untimed_taints)` of each device.
    flags: Vec<(bool, bool)>,
    /// `(hash of name, position)`, sorted: built on the first lookup by name.
    index: OnceLock<Vec<(u64, u32)>>,
}

impl Chunk {
    fn len(&self) -> usize {
        self.flags.len()
    }

    fn push(&mut self, device: DeviceEntry<'_>) {
        self.names.push(device.name);
        self.jsons.push(device.json);
        self.flags.push((device.advanced, device.untimed_taints));
    }

    /// Device `index` of `other`, its text shared rather than looked up again.
    fn push_from(&mut self, other: &Chunk, index: usize) {
        self.names.push(other.names.get(index));
        self.jsons.push_text(other.jsons.text(index).clone());
        self.flags.push(other.flags[index]);
    }

    fn get(&self, index: usize) -> DeviceEntry<'_> {
        let (advanced, untimed_taints) = self.flags[index];
        DeviceEntry {
            name: self.names.get(index),
            json: self.jsons.get(index),
            advanced,
            untimed_taints,
        }
    }

    fn shrink_to_fit(&mut self) {
        self.names.shrink_to_fit();
        self.jsons.shrink_to_fit();
        self.flags.shrink_to_fit();
    }

    fn position(&self, name: &str) -> Option<usize> {
        let index = self.index.get_or_init(|| {
            let mut index: Vec<(u64, u32)> = self
                .names
                .iter()
                .enumerate()
                .map(|(i, n)| (name_hash(n), i as u32))
                .collect();
            index.sort_unstable();
            index
        });
        let hash = name_hash(name);
        let first = index.partition_point(|&(h, _)| h < hash);
        index[first..]
            .iter()
            .take_while(|&&(h, _)| h == hash)
            .map(|&(_, i)| i as usize)
            .find(|&i| self.names.get(i) == name)
    }
}

/// FNV-1a: device names are short, and the index needs no protection from chosen keys
/// (a collision costs one more string comparison).
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[derive(Clone, Default)]
pub struct DeviceList {
    chunks: Vec<Arc<Chunk>>,
    /// `ends[k]`: the devices in chunks `0..=k`.
    ends: Vec<usize>,
}

impl DeviceList {
    pub(crate) fn push(&mut self, device: DeviceEntry<'_>) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => {
                if Arc::get_mut(last).is_none() {
                    // Shared with the list this one was edited from: appending copies it.
                    let mut copy = Chunk::default();
                    (0..last.len()).for_each(|j| copy.push_from(last, j));
                    *last = Arc::new(copy);
                }
                let last = Arc::get_mut(last).expect("copied above when shared");
                last.index = OnceLock::new();
                last.push(device);
                *self.ends.last_mut().expect("one end per chunk") += 1;
            }
            _ => {
                if let Some(full) = self.chunks.last_mut().and_then(Arc::get_mut) {
                    full.shrink_to_fit();
                }
                let mut chunk = Chunk::default();
                chunk.push(device);
                self.chunks.push(Arc::new(chunk));
                self.ends.push(self.len() + 1);
            }
        }
    }

    /// Gives back the room reserved while pushing: the list is kept, not grown, afterwards.
    pub(crate) fn shrink_to_fit(&mut self) {
        if let Some(last) = self.chunks.last_mut().and_then(Arc::get_mut) {
            last.shrink_to_fit();
        }
        self.chunks.shrink_to_fit();
        self.ends.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn start(&self, chunk: usize) -> usize {
        if chunk == 0 {
            0
        } else {
            self.ends[chunk - 1]
        }
    }

    /// The device at `index`; panics when out of range, as slice indexing does.
    pub fn get(&self, index: usize) -> DeviceEntry<'_> {
        let chunk = self.ends.partition_point(|&end| end <= index);
        self.chunks[chunk].get(index - self.start(chunk))
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter {
            list: self,
            chunk: 0,
            offset: 0,
            left: self.len(),
        }
    }

    /// The position of the device named `name`, if the list has it.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.chunks
            .iter()
            .enumerate()
            .find_map(|(k, c)| Some(self.start(k) + c.position(name)?))
    }

    /// This list with the devices at `replaced` positions replaced, those at `removed`
    /// positions left out, and `appended` added at the end. Chunks no position falls in are
    /// shared with this list, not copied.
    pub(crate) fn edited<'e>(
        &self,
        replaced: &[(usize, DeviceEntry<'e>)],
        removed: &[usize],
        appended: impl IntoIterator<Item = DeviceEntry<'e>>,
    ) -> DeviceList {
        let mut touched = vec![false; self.chunks.len()];
        let chunk_of = |index: usize| self.ends.partition_point(|&end| end <= index);
        for index in replaced
            .iter()
            .map(|&(i, _)| i)
            .chain(removed.iter().copied())
        {
            touched[chunk_of(index)] = true;
        }
        let mut by_position: Vec<(usize, Option<DeviceEntry<'e>>)> = replaced
            .iter()
            .map(|&(i, d)| (i, Some(d)))
            .chain(removed.iter().map(|&i| (i, None)))
            .collect();
        by_position.sort_unstable_by_key(|&(i, _)| i);
        let mut changes = by_position.into_iter().peekable();
        let mut out = DeviceList::default();
        for (k, chunk) in self.chunks.iter().enumerate() {
            if !touched[k] {
                out.chunks.push(Arc::clone(chunk));
                out.ends.push(out.len() + chunk.len());
                continue;
            }
            let start = self.start(k);
            let mut copy = Chunk::default();
            for j in 0..chunk.len() {
                match changes.next_if(|&(i, _)| i == start + j) {
                    Some((_, Some(device))) => copy.push(device),
                    Some((_, None)) => {}
                    None => copy.push_from(chunk, j),
                }
            }
            if copy.len() > 0 {
                copy.shrink_to_fit();
                out.ends.push(out.len() + copy.len());
                out.chunks.push(Arc::new(copy));
            }
        }
        for device in appended {
            out.push(device);
        }
        out.shrink_to_fit();
        out
    }
}

impl PartialEq for DeviceList {
    fn eq(&self, other: &Self) -> bool {
        let shared = self.ends == other.ends
            && self
                .chunks
                .iter()
                .zip(&other.chunks)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        shared || (self.len() == other.len() && self.iter().eq(other.iter()))
    }
}

impl fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The devices of a list in order, chunk by chunk.
pub struct Iter<'a> {
    list: &'a DeviceList,
    chunk: usize,
    offset: usize,
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = DeviceEntry<'a>;

    fn next(&mut self) -> Option<DeviceEntry<'a>> {
        while let Some(chunk) = self.list.chunks.get(self.chunk) {
            if self.offset < chunk.len() {
                self.offset += 1;
                self.left -= 1;
                return Some(chunk.get(self.offset - 1));
            }
            self.chunk += 1;
            self.offset = 0;
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: impl IntoIterator<Item = String>) -> DeviceList {
        let mut out = DeviceList::default();
        for name in names {
            out.push(DeviceEntry {
                name: &name,
                json: &format!("{{\"name\":\"{name}\"}}"),
                advanced: false,
                untimed_taints: false,
            });
        }
        out.shrink_to_fit();
        out
    }

    fn names(list: &DeviceList) -> Vec<&str> {
        list.iter().map(|d| d.name).collect()
    }

    #[test]
    fn get_iter_and_position_agree_across_chunks() {
        let l = list((0..1000).map(|i| format!("d{i}")));
        assert_eq!(l.len(), 1000);
        assert_eq!(l.iter().len(), 1000);
        for i in [0, 1, 255, 256, 257, 511, 512, 999] {
            assert_eq!(l.get(i).name, format!("d{i}"));
            assert_eq!(l.position(&format!("d{i}")), Some(i));
        }
        assert_eq!(l.position("nope"), None);
        assert_eq!(
            names(&l),
            (0..1000).map(|i| format!("d{i}")).collect::<Vec<_>>()
        );
    }

    #[test]
    fn an_edit_copies_only_the_chunks_it_touches() {
        let l = list((0..1000).map(|i| format!("d{i}")));
        let new = DeviceEntry {
            name: "d300",
            json: "{\"name\":\"d300\",\"x\":1}",
            advanced: true,
            untimed_taints: false,
        };
        let extra = DeviceEntry {
            name: "e",
            json: "{}",
            advanced: false,
            untimed_taints: false,
        };
        let e = l.edited(&[(300, new)], &[0, 999], [extra]);
        assert_eq!(e.len(), 999);
        assert_eq!(e.get(0).name, "d1");
        assert_eq!(e.get(299), new);
        assert_eq!(e.get(998).name, "e");
        assert_eq!(e.position("d998"), Some(997));
        assert!(Arc::ptr_eq(&l.chunks[2], &e.chunks[2]));
        assert!(!Arc::ptr_eq(&l.chunks[1], &e.chunks[1]));
        // Equal content is equal, however it is chunked.
        let same = list(e.iter().map(|d| d.name.to_owned()));
        assert_ne!(e, same); // json of d300 and e differ from `list`'s
        let back = e.edited(&[], &[998], []);
        assert_eq!(
            names(&back),
            names(&list((1..999).map(|i| format!("d{i}"))))
        );
    }

    #[test]
    fn removing_a_whole_chunk_drops_it() {
        let l = list((0..300).map(|i| format!("d{i}")));
        let gone: Vec<usize> = (0..256).collect();
        let e = l.edited(&[], &gone, []);
        assert_eq!(
            names(&e),
            (256..300).map(|i| format!("d{i}")).collect::<Vec<_>>()
        );
        assert_eq!(e.chunks.len(), 1);
        assert_eq!(e, list((256..300).map(|i| format!("d{i}"))));
    }
}
