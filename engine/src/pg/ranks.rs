//! A table indexed by rank, for the world's netmod VCs: two levels of
//! `CHUNK` entries, so a lookup is two indexations (every send and arrival
//! on the netmod path asks; a hash map lookup cost some 50 instructions of
//! a tcp message's few hundred, callgrind) while a process that talks to a
//! few peers of a million-rank job holds a few chunks, not a slot per rank.

/// Ranks per second-level chunk.
const CHUNK: usize = 256;

pub(crate) struct RankTable<T> {
    chunks: Vec<Option<Box<[Option<T>]>>>,
    len: usize,
}

impl<T> Default for RankTable<T> {
    fn default() -> Self {
        RankTable {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> RankTable<T> {
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, rank: u32) -> Option<&mut T> {
        let r = rank as usize;
        self.chunks.get_mut(r / CHUNK)?.as_mut()?[r % CHUNK].as_mut()
    }

    #[inline(always)]
    pub(crate) fn contains(&self, rank: u32) -> bool {
        let r = rank as usize;
        matches!(self.chunks.get(r / CHUNK), Some(Some(c)) if c[r % CHUNK].is_some())
    }

    /// The entry of `rank`, made by `make` if missing.
    pub(crate) fn get_or_insert_with(&mut self, rank: u32, make: impl FnOnce() -> T) -> &mut T {
        let r = rank as usize;
        if self.chunks.len() <= r / CHUNK {
            self.chunks.resize_with(r / CHUNK + 1, || None);
        }
        let chunk =
            self.chunks[r / CHUNK].get_or_insert_with(|| (0..CHUNK).map(|_| None).collect());
        let slot = &mut chunk[r % CHUNK];
        if slot.is_none() {
            self.len += 1;
        }
        slot.get_or_insert_with(make)
    }

    /// Entries present.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `(rank, entry)` of every entry, by rank.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk.iter().flat_map(move |chunk| {
                chunk
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, e)| e.as_ref().map(|e| ((c * CHUNK + i) as u32, e)))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_rank_and_only_touched_chunks_exist() {
        let mut t = RankTable::default();
        assert!(t.get_mut(5).is_none());
        assert!(!t.contains(u32::MAX));
        for r in [3u32, 700, 255, 256, 1_000_000] {
            *t.get_or_insert_with(r, || r * 2) += 1;
        }
        *t.get_or_insert_with(700, || 0) += 1;
        assert_eq!(t.len(), 5);
        assert_eq!(t.get_mut(700), Some(&mut 1402));
        assert!(t.contains(256) && !t.contains(257) && !t.contains(999_999));
        let all: Vec<_> = t.iter().map(|(r, v)| (r, *v)).collect();
        assert_eq!(
            all,
            [
                (3, 7),
                (255, 511),
                (256, 513),
                (700, 1402),
                (1_000_000, 2_000_001)
            ]
        );
        // Chunks only where ranks were used.
        assert_eq!(t.chunks.iter().filter(|c| c.is_some()).count(), 4);
    }
}
