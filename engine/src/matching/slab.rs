//! The storage under the matcher: a slab of slots linked by `u32`
//! indices into intrusive doubly-linked lists, so steady-state matching
//! allocates nothing and moves no entry.

pub(super) const NIL: u32 = u32::MAX;

pub(super) enum Slot<T> {
    Used(T),
    Free(u32),
}

pub(super) struct Slab<T> {
    pub(super) slots: Vec<Slot<T>>,
    free: u32,
    pub(super) len: usize,
}

impl<T> Slab<T> {
    pub(super) const fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: NIL,
            len: 0,
        }
    }

    #[inline(always)]
    pub(super) fn insert(&mut self, value: T) -> u32 {
        self.len += 1;
        if self.free != NIL {
            let i = self.free;
            let slot = &mut self.slots[i as usize];
            match *slot {
                Slot::Free(next) => self.free = next,
                Slot::Used(_) => unreachable!("matching: free list points at a used slot"),
            }
            *slot = Slot::Used(value);
            i
        } else {
            let i = self.slots.len();
            assert!(i < NIL as usize, "matching: too many entries");
            self.slots.push(Slot::Used(value));
            i as u32
        }
    }

    #[inline(always)]
    pub(super) fn remove(&mut self, i: u32) -> T {
        let slot = &mut self.slots[i as usize];
        assert!(matches!(slot, Slot::Used(_)), "matching: slot already free");
        let old = std::mem::replace(slot, Slot::Free(self.free));
        self.free = i;
        self.len -= 1;
        match old {
            Slot::Used(value) => value,
            Slot::Free(_) => unreachable!(),
        }
    }

    #[inline(always)]
    pub(super) fn get(&self, i: u32) -> &T {
        match &self.slots[i as usize] {
            Slot::Used(value) => value,
            Slot::Free(_) => unreachable!("matching: stale index"),
        }
    }

    #[inline(always)]
    pub(super) fn get_mut(&mut self, i: u32) -> &mut T {
        match &mut self.slots[i as usize] {
            Slot::Used(value) => value,
            Slot::Free(_) => unreachable!("matching: stale index"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Links {
    pub(super) prev: u32,
    pub(super) next: u32,
}

impl Links {
    pub(super) const NONE: Links = Links {
        prev: NIL,
        next: NIL,
    };
}

#[derive(Debug, Clone, Copy)]
pub(super) struct List {
    pub(super) head: u32,
    pub(super) tail: u32,
}

impl List {
    pub(super) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };

    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

#[inline(always)]
pub(super) fn push_back<T>(
    slab: &mut Slab<T>,
    list: &mut List,
    i: u32,
    links: fn(&mut T) -> &mut Links,
) {
    *links(slab.get_mut(i)) = Links {
        prev: list.tail,
        next: NIL,
    };
    if list.tail == NIL {
        list.head = i;
    } else {
        links(slab.get_mut(list.tail)).next = i;
    }
    list.tail = i;
}

#[inline(always)]
pub(super) fn unlink<T>(
    slab: &mut Slab<T>,
    list: &mut List,
    i: u32,
    links: fn(&mut T) -> &mut Links,
) {
    let Links { prev, next } = *links(slab.get_mut(i));
    if prev == NIL {
        list.head = next;
    } else {
        links(slab.get_mut(prev)).next = next;
    }
    if next == NIL {
        list.tail = prev;
    } else {
        links(slab.get_mut(next)).prev = prev;
    }
}
