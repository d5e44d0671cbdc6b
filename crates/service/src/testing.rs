//! Conformance suites (filled below).
