//! (fault test: below)
