//! The Redis lock family.
