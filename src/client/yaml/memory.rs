//! What reading a document may allocate, accounted as it allocates.

/// What reading a document may allocate, and has: the tree and the stacks
/// it is built on, the lines and strings it copies, anchored nodes and
/// their copies, and what [`from_node`](super::from_node) allocates for the typed value.
/// Charged before (or as) the allocation is made; never credited, so that
/// memory freed but still resident counts too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memory {
    used: usize,
    limit: usize,
    exceeded: bool,
}

impl Memory {
    /// At most `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Memory {
            used: 0,
            limit,
            exceeded: false,
        }
    }

    /// Whether reading stopped because it would need more than the limit.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded
    }

    /// What reading has charged so far (bytes).
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    pub(super) fn charge(&mut self, bytes: usize) -> std::result::Result<(), String> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit {
            self.exceeded = true;
            return Err(format!(
                "reading the document needs more than {} KiB of memory",
                self.limit >> 10
            ));
        }
        Ok(())
    }
}

/// What an allocation of `bytes` takes on the heap: glibc's chunk, the
/// request and an 8-byte header rounded up to 16, at least 32.
pub(super) fn heap(bytes: usize) -> usize {
    if bytes == 0 {
        return 0;
    }
    (bytes.saturating_add(8 + 15) & !15).max(32)
}
