//! Values in and out of a statement, as the core names them: each dialect
//! binds [`Arg`]s its own way and reads its rows into [`Row`]s.

use crate::store::StoreError;

/// A statement's argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    Text(&'a str),
    Int(i64),
    Flag(bool),
    Texts(&'a [String]),
}

/// A value read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    Null,
    Text(String),
    Int(i64),
    Flag(bool),
}

/// A row read back.
#[derive(Clone, Debug, Default)]
pub struct Row(pub Vec<Cell>);

/// What a statement answered: its rows, and how many rows it matched
/// (for a statement that returns none).
#[derive(Debug, Default)]
pub struct Answer {
    pub rows: Vec<Row>,
    pub matched: u64,
}

fn unread(i: usize, what: &str) -> StoreError {
    StoreError::unavailable(format!("cannot read column {i} of the answer as {what}"))
}

impl Row {
    fn at(&self, i: usize) -> Result<&Cell, StoreError> {
        self.0
            .get(i)
            .ok_or_else(|| StoreError::unavailable(format!("the answer has no column {i}")))
    }

    /// A text, if not NULL.
    pub fn text(&self, i: usize) -> Result<Option<String>, StoreError> {
        match self.at(i)? {
            Cell::Null => Ok(None),
            Cell::Text(s) => Ok(Some(s.clone())),
            Cell::Int(n) => Ok(Some(n.to_string())),
            Cell::Flag(_) => Err(unread(i, "text")),
        }
    }

    /// A number, if not NULL; a text of digits counts (as some servers
    /// send what they compute).
    pub fn int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.at(i)? {
            Cell::Null => Ok(None),
            Cell::Int(n) => Ok(Some(*n)),
            Cell::Text(s) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| unread(i, "a number")),
            Cell::Flag(b) => Ok(Some(i64::from(*b))),
        }
    }

    /// A truth, if not NULL: MySQL's are numbers.
    pub fn flag(&self, i: usize) -> Result<Option<bool>, StoreError> {
        match self.at(i)? {
            Cell::Null => Ok(None),
            Cell::Flag(b) => Ok(Some(*b)),
            _ => Ok(self.int(i)?.map(|n| n != 0)),
        }
    }

    /// A text that is never NULL.
    pub fn some_text(&self, i: usize) -> Result<String, StoreError> {
        self.text(i)?.ok_or_else(|| unread(i, "text, not NULL"))
    }

    /// A number that is never NULL.
    pub fn some_int(&self, i: usize) -> Result<i64, StoreError> {
        self.int(i)?.ok_or_else(|| unread(i, "a number, not NULL"))
    }
}

impl Answer {
    /// Whether a conditional write took place: the truth its one row says
    /// (PostgreSQL's statements answer `EXISTS (…)`), else whether it
    /// matched a row.
    pub fn done(&self) -> bool {
        match self.rows.first().map(|r| r.0.first()) {
            Some(Some(Cell::Flag(done))) => *done,
            _ => self.matched > 0,
        }
    }
}
