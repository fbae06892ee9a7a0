//! C ABI (filled in later).
