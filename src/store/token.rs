//! The fencing token: what a resource compares to refuse a stale holder.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A lock's fencing token: every new holder's is greater than every
/// earlier holder's of that lock, across processes, crashes and the
/// store's own failovers (each store says how it keeps that).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Token(u64);

impl Token {
    pub const fn new(n: u64) -> Token {
        Token(n)
    }

    /// The number, as `ELECT_TOKEN` and a store's query carry it.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Token {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Token, Self::Err> {
        s.parse().map(Token)
    }
}

impl From<u64> for Token {
    fn from(n: u64) -> Token {
        Token(n)
    }
}
