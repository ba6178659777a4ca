//! Device texts held once (docs/core.md §6, "Each device's text held once").
//!
//! Why: a synced controller holds each device's canonical JSON twice, in its desired state
//! and in the informer's record of the stored slice, and the two are byte-equal for almost
//! every device. Both sides take their text from one table here, so equal texts are one
//! allocation. Records are decoded on the informer's thread before any controller compares
//! them with what it wants, so the table is the process's, not a controller's.
//!
//! Sharing never changes what a text reads: a text is shared only with a byte-equal one,
//! compared on every hit. A text leaves the table when its last holder drops it.
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

/// Independent tables, so that the informer's decoding and a caller's `update()` seldom
/// wait for each other.
const SHARDS: usize = 16;

/// The table is keyed by the text's hash, already mixed: its keys need no second hash.
#[derive(Default)]
struct KeyIsHash(u64);

impl Hasher for KeyIsHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

/// hash -> the text. Two texts with one hash (not seen in practice) are both correct: the
/// second is simply not shared.
type Table = HashMap<u64, Weak<str>, BuildHasherDefault<KeyIsHash>>;

fn hash(text: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    h.write(text.as_bytes());
    // Fx leaves the low bits weak for long inputs; mix them in before they pick a bucket.
    let x = h.finish();
    (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (x >> 32)
}

fn shard(hash: u64) -> MutexGuard<'static, Table> {
    static TABLES: OnceLock<[Mutex<Table>; SHARDS]> = OnceLock::new();
    let tables = TABLES.get_or_init(|| std::array::from_fn(|_| Mutex::default()));
    // Bits the table's buckets and control bytes do not use.
    tables[(hash >> 40) as usize % SHARDS]
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// One canonical text, shared with every byte-equal text taken from `Text::of`.
#[derive(Clone)]
pub struct Text(Arc<str>);

impl Text {
    /// The text `text`, shared if an equal one is held anywhere in the process.
    pub fn of(text: &str) -> Text {
        let h = hash(text);
        let mut table = shard(h);
        if let Some(held) = table.get(&h).and_then(Weak::upgrade) {
            if *held == *text {
                return Text(held);
            }
            return Text(Arc::from(text));
        }
        let new: Arc<str> = Arc::from(text);
        table.insert(h, Arc::downgrade(&new));
        Text(new)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `self` and `other` are one allocation (then they are equal).
    pub fn same(&self, other: &Text) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Drop for Text {
    /// The last holder takes the text out of the table before it is freed. The count is
    /// exact under the lock: the table hands out texts only under it, and any other holder
    /// that could copy this one would itself be counted.
    fn drop(&mut self) {
        let h = hash(&self.0);
        let mut table = shard(h);
        if Arc::strong_count(&self.0) == 1
            && table
                .get(&h)
                .is_some_and(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(&self.0)))
        {
            table.remove(&h);
        }
    }
}

impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        self.same(other) || self.0 == other.0
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// `(texts, bytes)` in the table now: each distinct text counts once however many hold it.
/// For tests and benches: an entry left behind by a freed text would count too.
pub fn held() -> (usize, usize) {
    let mut out = (0, 0);
    for s in 0..SHARDS {
        let table = shard((s as u64) << 40);
        out.0 += table.len();
        out.1 += table
            .values()
            .filter_map(Weak::upgrade)
            .map(|t| t.len())
            .sum::<usize>();
    }
    out
}

/// Texts in order: a record's devices or a chunk of the desired state's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TextList(Vec<Text>);

impl TextList {
    pub fn push(&mut self, text: &str) {
        self.0.push(Text::of(text));
    }

    /// `text` itself, not a lookup: a copy of a list that already holds it.
    pub fn push_text(&mut self, text: Text) {
        self.0.push(text);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The text at `index`; panics when out of range, as slice indexing does.
    pub fn get(&self, index: usize) -> &str {
        &self.0[index]
    }

    pub fn text(&self, index: usize) -> &Text {
        &self.0[index]
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> {
        self.0.iter().map(Text::as_str)
    }

    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_of(text: &str) -> usize {
        let table = shard(hash(text));
        table
            .get(&hash(text))
            .and_then(Weak::upgrade)
            .filter(|t| **t == *text)
            .map_or(0, |t| Arc::strong_count(&t) - 1)
    }

    #[test]
    fn equal_texts_are_one_allocation_until_the_last_goes() {
        let a = Text::of("{\"name\":\"text-test-a\"}");
        let b = Text::of(&String::from("{\"name\":\"text-test-a\"}"));
        assert!(a.same(&b));
        assert_eq!(held_of("{\"name\":\"text-test-a\"}"), 2);
        let c = b.clone();
        drop(a);
        drop(b);
        assert_eq!(held_of("{\"name\":\"text-test-a\"}"), 1);
        drop(c);
        assert_eq!(held_of("{\"name\":\"text-test-a\"}"), 0);
        // Taken again after it was freed: a new allocation, held again.
        let d = Text::of("{\"name\":\"text-test-a\"}");
        assert_eq!(held_of("{\"name\":\"text-test-a\"}"), 1);
        assert_eq!(d.as_str(), "{\"name\":\"text-test-a\"}");
    }

    #[test]
    fn different_texts_stay_apart() {
        let a = Text::of("{\"name\":\"text-test-b\"}");
        let b = Text::of("{\"name\":\"text-test-c\"}");
        assert!(!a.same(&b));
        assert_ne!(a, b);
        assert_eq!(&*b, "{\"name\":\"text-test-c\"}");
    }

    #[test]
    fn threads_taking_and_dropping_one_text_leave_nothing_behind() {
        let text = "{\"name\":\"text-test-threads\"}";
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let t = Text::of(text);
                        let u = t.clone();
                        assert_eq!(&*u, text);
                    }
                });
            }
        });
        assert_eq!(held_of(text), 0);
        let table = shard(hash(text));
        assert!(table.get(&hash(text)).is_none());
    }
}
