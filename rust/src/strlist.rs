//! Many short strings stored back to back in one buffer.
//!
//! Why: the desired state and the records hold a name and a canonical JSON text per device;
//! as two heap strings each, 100,000 devices' worth of small allocations cost more than the
//! text itself.

#[derive(Clone, Debug, Default, PartialEq)]
pub struct StrList {
    text: String,
    ends: Vec<usize>,
}

impl StrList {
    pub fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.ends.push(self.text.len());
    }

    /// Room for `bytes` more text in `count` more strings.
    pub fn reserve(&mut self, bytes: usize, count: usize) {
        self.text.reserve(bytes);
        self.ends.reserve(count);
    }

    /// The bytes of text held.
    pub fn text_len(&self) -> usize {
        self.text.len()
    }

    /// Gives back the room reserved while pushing: the list is kept, not grown, afterwards.
    pub fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
        self.ends.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The string at `index`; panics when out of range, as slice indexing does.
    pub fn get(&self, index: usize) -> &str {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        &self.text[start..self.ends[index]]
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::StrList;

    #[test]
    fn strings_come_back_in_order_including_empty_ones() {
        let mut list = StrList::default();
        for s in ["a", "", "bcd", "é"] {
            list.push(s);
        }
        list.shrink_to_fit();
        assert_eq!(list.len(), 4);
        assert_eq!(list.iter().collect::<Vec<_>>(), ["a", "", "bcd", "é"]);
        assert_eq!(list.get(2), "bcd");
        assert!(StrList::default().is_empty());
    }
}
