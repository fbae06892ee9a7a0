//! The C ABI (placeholder while being written).
