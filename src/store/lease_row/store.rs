//! The store a dialect makes: status, list, breaking and the records, the
//! same on every database.

use std::time::Duration;

use super::{Access, Answer, Arg, Dialect, Op, Row, key};
use crate::store::records;
use crate::store::{
    Boxed, Breaking, Checkpoint, Fence, Holder, HolderRecord, LockStatus, Look, Owner, Put, Record,
    Session, Store, StoreError, Token, Versioned, look_apart,
};

/// A store of lease rows, on the database `D` speaks to.
pub struct LeaseRows<D>(pub D);

impl<D: Dialect> LeaseRows<D> {
    fn read<'a>(&'a self, op: Op, args: &'a [Arg<'a>]) -> Boxed<'a, Result<Answer, StoreError>> {
        Box::pin(self.0.send(op, Access::Read, args))
    }

    async fn read_status(&self, lock: &str) -> Result<LockStatus, StoreError> {
        let answer = self.read(Op::Status, &[Arg::Text(lock)]).await?;
        match answer.rows.first() {
            Some(row) => status(lock.to_string(), row),
            None => Ok(free(lock)),
        }
    }

    /// The lease TTL of the holder of `lock`, from its last renewal.
    async fn holder_ttl(&self, lock: &str) -> Result<Option<Duration>, StoreError> {
        let answer = self.read(Op::Status, &[Arg::Text(lock)]).await?;
        let ms = match answer.rows.first() {
            Some(row) => row.int(4)?,
            None => None,
        };
        Ok(ms.map(millis))
    }

    /// The records kept in the lock's own row, not the record table (as
    /// elect has kept them since before that table): its checkpoint, its
    /// shard count, and its last holder, whose identity the row keeps
    /// after it lets go. `None` for the others.
    async fn row_record(
        &self,
        lock: &str,
        record: Record<'_>,
    ) -> Option<Result<Option<Versioned>, StoreError>> {
        let op = row_op(record)?;
        let found = async {
            let answer = self.read(op, &[Arg::Text(lock)]).await?;
            let Some(row) = answer.rows.first() else {
                return Ok(None);
            };
            Ok(match record {
                Record::Checkpoint => checkpoint_of(row, 0)?.map(|c| Versioned {
                    version: c.token.get(),
                    value: c.to_json(),
                }),
                Record::Shards => row.int(0)?.map(|n| Versioned {
                    value: n.to_string(),
                    version: 0,
                }),
                _ => row.text(0)?.map(|value| Versioned { value, version: 0 }),
            })
        };
        Some(found.await)
    }

    /// Store the checkpoint `json` if the tenure of `key` still holds the
    /// lock's row with `token`.
    async fn put_checkpoint(
        &self,
        lock: &str,
        key: &str,
        token: Token,
        json: &str,
    ) -> Result<Put, StoreError> {
        let Some(tenure) = key.strip_prefix(&format!("{lock}/")) else {
            return Ok(Put::Stale(format!("{key} is no key of lock {lock}")));
        };
        let checkpoint = records::checkpoint_of(lock, json)?;
        let args = [
            Arg::Text(lock),
            Arg::Text(tenure),
            Arg::Int(token.get() as i64),
            Arg::Text(&checkpoint.value),
        ];
        let answer = self.0.send(Op::PutCheckpoint, Access::Plain, &args).await?;
        Ok(match answer.done() {
            true => Put::Stored,
            false => Put::Stale(format!("token {token} no longer holds lock {lock}")),
        })
    }

    /// Record `count` shards in the lock's row unless a number is recorded.
    async fn put_shards(&self, lock: &str, count: &str) -> Result<Put, StoreError> {
        let n = records::shard_count(lock, count)?;
        // The column is a 32-bit number.
        if i32::try_from(n).is_err() {
            return Ok(Put::Stale(format!(
                "{n} shards are more than lock {lock} can have"
            )));
        }
        let args = [Arg::Text(lock), Arg::Int(i64::from(n))];
        let put = self.0.send(Op::RecordShards, Access::Write, &args).await?;
        // Where the statement does not say what is recorded, a read does.
        let recorded = match put.rows.first() {
            Some(row) => row.int(0)?,
            None => match self.read(Op::Shards, &args[..1]).await?.rows.first() {
                Some(row) => row.int(0)?,
                None => None,
            },
        };
        Ok(match recorded == Some(i64::from(n)) {
            true => Put::Stored,
            false => Put::Stale(format!("lock {lock} has a shard count recorded already")),
        })
    }
}

/// A lock no one holds or waits for.
fn free(lock: &str) -> LockStatus {
    LockStatus {
        lock: lock.to_string(),
        holder: None,
        waiting: 0,
        ranks: Vec::new(),
    }
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// How `record` is read from the lock's own row, if it is kept there
/// ([`LeaseRows::row_record`]).
fn row_op(record: Record<'_>) -> Option<Op> {
    match record {
        Record::Checkpoint => Some(Op::Checkpoint),
        Record::Shards => Some(Op::Shards),
        Record::Last => Some(Op::Last),
        _ => None,
    }
}

/// A lock's status from a row of [`Op::Status`], [`Op::List`] or
/// [`Op::Look`].
fn status(lock: String, row: &Row) -> Result<LockStatus, StoreError> {
    let fence = row.int(0)?;
    let tenure = row.text(1)?;
    let record = row.text(2)?;
    let left = row.int(3)?;
    let waiting = row.int(5)?.unwrap_or(0);
    let holder = match (tenure, left) {
        (Some(tenure), Some(left)) => Some(Holder {
            key: key(&lock, &tenure),
            token: Token::new(fence.unwrap_or(0) as u64),
            record: record.and_then(|r| HolderRecord::from_json(r.as_bytes())),
            lease: Some(tenure),
            ttl_left: Some(millis(left)),
        }),
        _ => None,
    };
    Ok(LockStatus {
        lock,
        holder,
        waiting: waiting as usize,
        ranks: Vec::new(),
    })
}

/// The checkpoint in columns `at`, `at + 1` and `at + 2` of `row`: value,
/// token, time.
pub fn checkpoint_of(row: &Row, at: usize) -> Result<Option<Checkpoint>, StoreError> {
    let Some(value) = row.text(at)? else {
        return Ok(None);
    };
    Ok(Some(Checkpoint {
        value,
        token: Token::new(row.int(at + 1)?.unwrap_or(0) as u64),
        at: row.text(at + 2)?.unwrap_or_default(),
    }))
}

/// A break begun on the holder of `lock` with `tenure`.
struct RowBreaking<'a, D> {
    rows: &'a LeaseRows<D>,
    lock: &'a str,
    tenure: String,
}

impl<D: Dialect> Breaking for RowBreaking<'_, D> {
    fn lock(&self) -> &str {
        self.lock
    }

    /// Its elect sees the request at once where it is woken, else at its
    /// next renewal (TTL/3), stops the command within its grace and
    /// releases.
    fn held(&self) -> Boxed<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let status = self.rows.read_status(self.lock).await?;
            Ok(status.holder.and_then(|h| h.lease).as_deref() == Some(&self.tenure))
        })
    }

    fn end(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let args = [Arg::Text(self.lock), Arg::Text(&self.tenure)];
            self.rows
                .0
                .send(Op::End, Access::Plain, &args)
                .await
                .map(drop)
        })
    }
}

impl<D: Dialect> Store for LeaseRows<D> {
    fn open_session(
        &self,
        ttl: Duration,
        _within: Duration,
    ) -> Boxed<'_, Result<Box<dyn Session + '_>, StoreError>> {
        Box::pin(async move { Ok(self.0.open_session(ttl)) })
    }

    fn status<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<LockStatus, StoreError>> {
        Box::pin(self.read_status(lock))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<LockStatus>, StoreError>> {
        Box::pin(async move {
            let answer = self.read(Op::List, &[Arg::Text(prefix)]).await?;
            answer
                .rows
                .iter()
                .map(|row| status(row.some_text(6)?, row))
                .collect()
        })
    }

    fn begin_break<'a>(
        &'a self,
        lock: &'a str,
        holder: &'a Holder,
        ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn Breaking + 'a>>, StoreError>> {
        Box::pin(async move {
            // Each statement names the tenure: one that ended meanwhile is
            // neither asked nor ended.
            let tenure = holder.lease.clone().unwrap_or_default();
            if ask {
                let request = crate::store::holder::break_request();
                let args = [Arg::Text(lock), Arg::Text(&tenure), Arg::Text(&request)];
                if !self.0.send(Op::Ask, Access::Plain, &args).await?.done() {
                    return Ok(None);
                }
            }
            let breaking: Box<dyn Breaking + 'a> = Box::new(RowBreaking {
                rows: self,
                lock,
                tenure,
            });
            Ok(Some(breaking))
        })
    }

    fn lease_ttl<'a>(
        &'a self,
        lock: &'a str,
        _holder: &'a Holder,
    ) -> Boxed<'a, Result<Option<Duration>, StoreError>> {
        Box::pin(self.holder_ttl(lock))
    }

    fn owners<'a>(&'a self, locks: &'a [String]) -> Boxed<'a, Result<Vec<Owner>, StoreError>> {
        Box::pin(async move {
            if locks.is_empty() {
                return Ok(Vec::new());
            }
            let answer = self.read(Op::Owners, &[Arg::Texts(locks)]).await?;
            let mut owners = vec![Owner::default(); locks.len()];
            for row in &answer.rows {
                let name = row.some_text(0)?;
                if let Some(i) = locks.iter().position(|l| *l == name) {
                    owners[i] = Owner {
                        held: row.flag(1)?.unwrap_or(false),
                        last: row.text(2)?,
                    };
                }
            }
            Ok(owners)
        })
    }

    /// The lock's row and the record in one statement, where the record
    /// lives in the record table.
    fn look<'a>(
        &'a self,
        lock: &'a str,
        record: Option<Record<'a>>,
        holder: bool,
    ) -> Boxed<'a, Result<Look, StoreError>> {
        Box::pin(async move {
            let Some(record) = record.filter(|r| holder && row_op(*r).is_none()) else {
                return look_apart(self, lock, record, holder).await;
            };
            let name = record.suffix();
            let answer = self
                .read(Op::Look, &[Arg::Text(lock), Arg::Text(&name)])
                .await?;
            // No row at all: a table is missing (an earlier elect's
            // tables), which each read on its own takes in its stride.
            let Some(row) = answer.rows.first() else {
                return look_apart(self, lock, Some(record), holder).await;
            };
            let record = match row.text(6)? {
                Some(value) => Some(Versioned {
                    value,
                    version: row.some_int(7)? as u64,
                }),
                None => None,
            };
            Ok(Look {
                record,
                holder: status(lock.to_string(), row)?.holder,
            })
        })
    }

    fn record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(async move {
            if let Some(found) = self.row_record(lock, record).await {
                return found;
            }
            let name = record.suffix();
            // A read never creates anything: no table, no record.
            let answer = self
                .read(Op::Record, &[Arg::Text(lock), Arg::Text(&name)])
                .await?;
            let Some(row) = answer.rows.first() else {
                return Ok(None);
            };
            Ok(Some(Versioned {
                value: row.some_text(0)?,
                version: row.some_int(1)? as u64,
            }))
        })
    }

    fn put_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
        value: &'a str,
        fence: Fence<'a>,
    ) -> Boxed<'a, Result<Put, StoreError>> {
        Box::pin(async move {
            match (record, fence) {
                (Record::Checkpoint, Fence::Holder { key, token }) => {
                    return self.put_checkpoint(lock, key, token, value).await;
                }
                (Record::Shards, Fence::Version(None)) => {
                    return self.put_shards(lock, value).await;
                }
                (Record::Checkpoint | Record::Shards | Record::Last, _) => {
                    return Err(records::kept_in_the_row(lock, record));
                }
                _ => {}
            }
            let name = record.suffix();
            let (lock_, name_, value_) = (Arg::Text(lock), Arg::Text(&name), Arg::Text(value));
            let put = |op, args| self.0.send(op, Access::Write, args);
            let answer = match fence {
                Fence::Holder { key, token } => {
                    let Some(tenure) = key.strip_prefix(&format!("{lock}/")) else {
                        return Ok(Put::Stale(format!("{key} is no key of lock {lock}")));
                    };
                    let fence = Arg::Int(token.get() as i64);
                    let args = [lock_, name_, value_, Arg::Text(tenure), fence];
                    put(Op::PutRecordHeld, &args[..]).await?
                }
                Fence::Version(None) => put(Op::PutRecordNew, &[lock_, name_, value_]).await?,
                Fence::Any => put(Op::PutRecordAny, &[lock_, name_, value_]).await?,
                Fence::Version(Some(v)) => {
                    let args = [lock_, name_, value_, Arg::Int(v as i64)];
                    put(Op::PutRecordVersion, &args[..]).await?
                }
            };
            Ok(match (answer.done(), fence) {
                (true, _) => Put::Stored,
                (false, Fence::Holder { token, .. }) => {
                    Put::Stale(format!("token {token} no longer holds lock {lock}"))
                }
                (false, _) => Put::Stale(format!("record {name} of lock {lock} changed meanwhile")),
            })
        })
    }

    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if let Record::Checkpoint | Record::Shards | Record::Last = record {
                return Err(records::kept_in_the_row(lock, record));
            }
            let name = record.suffix();
            self.read(Op::DeleteRecord, &[Arg::Text(lock), Arg::Text(&name)])
                .await?;
            Ok(())
        })
    }

    fn recorded<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let history = crate::store::HISTORY;
            let args = [Arg::Text(prefix), Arg::Text(history)];
            let answer = self.read(Op::Recorded, &args).await?;
            answer.rows.iter().map(|r| r.some_text(0)).collect()
        })
    }

    fn tenures<'a>(
        &'a self,
        lock: &'a str,
        values: bool,
    ) -> Boxed<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let prefix = crate::store::HISTORY;
            let args = [Arg::Text(lock), Arg::Text(prefix), Arg::Flag(values)];
            let answer = self.read(Op::Tenures, &args).await?;
            answer
                .rows
                .iter()
                .map(|r| Ok((r.some_text(0)?, r.some_text(1)?)))
                .collect()
        })
    }
}
