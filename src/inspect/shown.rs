//! How a lock's status is shown, by `status` and `list`: one JSON object,
//! or lines for a person.

use serde_json::{Value, json};

use crate::store::{Holder, Location, LockStatus};

/// The stable JSON form of a lock's status (documented in docs/reference.md).
pub fn to_json(status: &LockStatus, location: &Location) -> Value {
    let h: Option<&Holder> = status.holder.as_ref();
    let record = h.and_then(|h| h.record.as_ref());
    json!({
        "lock": status.lock,
        "store": location.to_string(),
        "held": h.is_some(),
        "token": h.map(|h| h.token),
        "key": h.map(|h| h.key.clone()),
        "lease": h.and_then(|h| h.lease.clone()),
        "ttl_left_ms": h.and_then(|h| h.ttl_left).map(|d| d.as_millis() as u64),
        "holder": record.map(record_json),
        "holder_gone": record.map(crate::store::HolderRecord::gone_from_this_host),
        "waiting": status.waiting,
    })
}

/// A holder record as the JSON outputs show it.
pub(super) fn record_json(r: &crate::store::HolderRecord) -> Value {
    json!({
        "identity": r.identity,
        "hostname": r.hostname,
        "pid": r.pid,
        "command": r.command,
        "since": r.since(),
        "queued": r.started,
    })
}

/// `meant`: the lock the name was likely meant to be, for one never seen.
pub(super) fn human(status: &LockStatus, location: &Location, meant: Option<&str>) -> String {
    let mut out = String::new();
    let lock = &status.lock;
    let location = location.shown();
    let Some(h) = &status.holder else {
        let meant = meant.map_or_else(String::new, |m| format!("; did you mean {m}?"));
        out.push_str(&format!("lock {lock} at {location}: free{meant}\n"));
        if status.waiting > 0 {
            out.push_str(&format!("  waiting:  {}\n", status.waiting));
        }
        return out;
    };
    out.push_str(&format!("lock {lock} at {location}: held\n"));
    match &h.record {
        Some(r) => {
            // Its elect's process gone from this very host: the lease only
            // waits to run out (or `elect break` to end it).
            let gone = match (r.gone_from_this_host(), h.ttl_left) {
                (true, Some(left)) => format!(
                    "; its process is gone, the lease ends in {}",
                    crate::clock::show(left)
                ),
                (true, None) => "; its process is gone".to_string(),
                (false, _) => String::new(),
            };
            out.push_str(&format!(
                "  holder:   {} (pid {} on {}{gone})\n",
                r.identity, r.pid, r.hostname
            ));
            out.push_str(&format!("  command:  {}\n", shell_words(&r.command)));
            out.push_str(&format!("  since:    {}\n", r.since()));
        }
        None => out.push_str("  holder:   unknown (not started by elect)\n"),
    }
    out.push_str(&format!("  token:    {}\n", h.token));
    out.push_str(&format!("  key:      {}\n", h.key));
    if let Some(lease) = &h.lease {
        match h.ttl_left {
            Some(left) => out.push_str(&format!(
                "  lease:    {lease} ({} left)\n",
                crate::clock::show(left)
            )),
            None => out.push_str(&format!("  lease:    {lease}\n")),
        }
    }
    out.push_str(&format!("  waiting:  {}\n", status.waiting));
    out
}

/// A command line as a shell would show it.
fn shell_words(words: &[String]) -> String {
    let quote = |w: &String| {
        if !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
        {
            w.clone()
        } else {
            format!("'{}'", w.replace('\'', r"'\''"))
        }
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_shown_quoted() {
        let words = ["sh", "-c", "echo 'hi' $X"].map(String::from);
        assert_eq!(shell_words(&words), r#"sh -c 'echo '\''hi'\'' $X'"#);
    }
}
