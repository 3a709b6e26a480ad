//! Single-copy reads from another process's memory (`process_vm_readv`).
