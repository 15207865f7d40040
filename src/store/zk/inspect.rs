//! What `status`, `list` and `break` see of the ZooKeeper store: the
//! queue under a lock's node, the tree of locks, and a break begun on the
//! holder's node.

use zookeeper_client::{Client, Error as ZkError, MultiReadResult};

use super::{HISTORY_NODE, SLOTS_NODE, ZooKeeper, failed, is_contender, lock_path, queue, session};
use crate::store::Token;
use crate::store::{
    Boxed, Breaking, Holder, HolderRecord, LockStatus, Look, Record, StoreError, Versioned,
    look_apart,
};

impl ZooKeeper {
    /// The contenders for `lock`: (node name, sequence), in queue order.
    async fn contenders(
        &self,
        client: &Client,
        lock: &str,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let path = lock_path(lock);
        match client.list_children(&path).await {
            Ok(children) => Ok(queue(children)),
            Err(ZkError::NoNode) => Ok(Vec::new()),
            Err(e) => Err(failed(&e, "list", &path)),
        }
    }

    /// A run's first look: `record` of `lock` and the lock's children in
    /// one multi-read (a server before 3.6 has none: then one read each),
    /// then the holder's node.
    pub(super) async fn first_look(
        &self,
        lock: &str,
        record: Option<Record<'_>>,
        holder: bool,
    ) -> Result<Look, StoreError> {
        let client = self.client().await?;
        let path = lock_path(lock);
        let record_path = record.map(|r| format!("{path}{}", r.suffix()));
        let mut reader = client.new_multi_reader();
        let added = match &record_path {
            Some(at) => reader.add_get_data(at),
            None => Ok(()),
        }
        .and_then(|()| match holder {
            true => reader.add_get_children(&path),
            false => Ok(()),
        });
        if let Err(e) = added {
            return Err(failed(&e, "read", &path));
        }
        if record_path.is_none() && !holder {
            return Ok(Look::default());
        }
        let mut answers = match reader.commit().await {
            Ok(answers) => answers.into_iter(),
            Err(ZkError::Unimplemented) => return look_apart(self, lock, record, holder).await,
            Err(e) => return Err(failed(&e, "read", &path)),
        };
        let mut look = Look::default();
        if let Some(at) = &record_path {
            look.record = match answers.next() {
                Some(MultiReadResult::Data { data, stat }) => Some(Versioned {
                    value: String::from_utf8_lossy(&data).into_owned(),
                    version: stat.version as u64,
                }),
                Some(MultiReadResult::Error {
                    err: ZkError::NoNode,
                }) => None,
                Some(MultiReadResult::Error { err }) => return Err(failed(&err, "read", at)),
                _ => return Err(self.answered_otherwise(lock)),
            };
        }
        if holder {
            let first = match answers.next() {
                Some(MultiReadResult::Children { children }) => queue(children).into_iter().next(),
                Some(MultiReadResult::Error {
                    err: ZkError::NoNode,
                }) => None,
                Some(MultiReadResult::Error { err }) => return Err(failed(&err, "list", &path)),
                _ => return Err(self.answered_otherwise(lock)),
            };
            look.holder = match first {
                Some((first, _)) => {
                    match self.holder_at(&client, &format!("{path}/{first}")).await? {
                        Some(holder) => Some(holder),
                        // Gone between the list and the read: look again.
                        None => self.read_status(lock).await?.holder,
                    }
                }
                None => None,
            };
        }
        Ok(look)
    }

    fn answered_otherwise(&self, lock: &str) -> StoreError {
        StoreError::unavailable(format!(
            "ZooKeeper answered the look at lock {lock} with something else"
        ))
    }

    /// The holder whose node is `key`; `None` if the node is gone.
    async fn holder_at(&self, client: &Client, key: &str) -> Result<Option<Holder>, StoreError> {
        match client.get_data(key).await {
            Ok((data, stat)) => Ok(Some(Holder {
                key: key.to_string(),
                token: Token::new(stat.czxid as u64),
                record: HolderRecord::from_json(&data),
                lease: Some(format!("{:x}", stat.ephemeral_owner)),
                ttl_left: None,
            })),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(failed(&e, "read", key)),
        }
    }

    pub(super) async fn read_status(&self, lock: &str) -> Result<LockStatus, StoreError> {
        let client = self.client().await?;
        let path = lock_path(lock);
        // The holder may leave between the list and the read: look again.
        for _ in 0..3 {
            let nodes = self.contenders(&client, lock).await?;
            let Some((first, _)) = nodes.first() else {
                return Ok(LockStatus {
                    lock: lock.to_string(),
                    holder: None,
                    waiting: 0,
                    ranks: Vec::new(),
                });
            };
            let Some(holder) = self.holder_at(&client, &format!("{path}/{first}")).await? else {
                continue;
            };
            return Ok(LockStatus {
                lock: lock.to_string(),
                holder: Some(holder),
                waiting: nodes.len() - 1,
                ranks: nodes.iter().skip(1).map(|(_, seq)| *seq as u64).collect(),
            });
        }
        Err(StoreError::unavailable(format!(
            "lock {lock} kept changing hands"
        )))
    }

    /// Every node of elect's tree, by its name below the root, with its
    /// children. Lock names have at most a few segments, ZooKeeper's own
    /// tree is not ours, and a lock's history and slots hold records, not
    /// locks: none of those is walked.
    pub(super) async fn tree(&self) -> Result<Vec<(String, Vec<String>)>, StoreError> {
        let client = self.client().await?;
        let mut nodes = Vec::new();
        let mut frontier = vec![String::new()];
        for _ in 0..16 {
            let mut next = Vec::new();
            for name in frontier {
                let path = match name.is_empty() {
                    true => "/".to_string(),
                    false => format!("/{name}"),
                };
                let children = match client.list_children(&path).await {
                    Ok(children) => children,
                    Err(ZkError::NoNode) => continue,
                    Err(e) => return Err(failed(&e, "list", &path)),
                };
                for child in &children {
                    let records = [HISTORY_NODE, SLOTS_NODE]
                        .iter()
                        .any(|r| child.ends_with(r));
                    if is_contender(child) || records || (name.is_empty() && child == "zookeeper") {
                        continue;
                    }
                    next.push(match name.is_empty() {
                        true => child.clone(),
                        false => format!("{name}/{child}"),
                    });
                }
                nodes.push((name, children));
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        Ok(nodes)
    }

    /// Every lock under the root whose name starts with `prefix`: nodes
    /// with contenders among their children.
    pub(super) async fn read_list(&self, prefix: &str) -> Result<Vec<LockStatus>, StoreError> {
        let mut found: Vec<String> = self
            .tree()
            .await?
            .into_iter()
            .filter(|(name, children)| {
                name.starts_with(prefix) && !queue(children.clone()).is_empty()
            })
            .map(|(name, _)| name)
            .collect();
        found.sort();
        let mut statuses = Vec::new();
        for lock in found {
            statuses.push(self.read_status(&lock).await?);
        }
        Ok(statuses)
    }

    /// The node of `holder`, if it still holds its place (same czxid:
    /// same token), with its data version.
    pub(super) async fn holder_node(
        &self,
        client: &Client,
        holder: &Holder,
    ) -> Result<Option<i32>, StoreError> {
        match client.check_stat(&holder.key).await {
            Ok(Some(stat)) if Token::new(stat.czxid as u64) == holder.token => {
                Ok(Some(stat.version))
            }
            Ok(_) | Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(failed(&e, "read", &holder.key)),
        }
    }
    /// Begin a break on `holder`: ask its elect to let go, on its node,
    /// where it watches (unless told not to), and watch the node go.
    /// `None` if it no longer holds its place.
    pub(super) async fn break_holder(
        &self,
        holder: &Holder,
        ask: bool,
    ) -> Result<Option<ZkBreaking>, StoreError> {
        let client = self.client().await?;
        let Some(version) = self.holder_node(&client, holder).await? else {
            return Ok(None);
        };
        // A holder that is not elect's (Curator) cannot be asked.
        if let Some(record) = holder.record.clone().filter(|_| ask) {
            let request = HolderRecord {
                break_request: Some(crate::store::holder::break_request()),
                ..record
            };
            match client
                .set_data(&holder.key, request.to_json().as_bytes(), Some(version))
                .await
            {
                Ok(_) => {}
                Err(ZkError::NoNode | ZkError::BadVersion) => return Ok(None),
                Err(e) => return Err(failed(&e, "ask", &holder.key)),
            }
        }
        let breaking = ZkBreaking {
            client,
            key: holder.key.clone(),
        };
        Ok(Some(breaking))
    }
}

/// A break begun on the holder whose node is `key`.
pub(super) struct ZkBreaking {
    client: Client,
    key: String,
}

impl Breaking for ZkBreaking {
    /// Its elect stops the command within its grace and deletes its node.
    fn ended(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            loop {
                match self.client.check_and_watch_stat(&self.key).await {
                    Ok((None, _)) | Err(ZkError::NoNode) => return Ok(()),
                    Ok((Some(_), watcher)) => {
                        watcher.changed().await;
                    }
                    Err(_) => tokio::time::sleep(session::LOOK_AGAIN).await,
                }
            }
        })
    }

    fn end(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            match self.client.delete(&self.key, None).await {
                Ok(()) | Err(ZkError::NoNode) => Ok(()),
                Err(e) => Err(failed(&e, "delete", &self.key)),
            }
        })
    }
}
