//! Where the API server is and how elect proves who it is: the `k8s:` URL,
//! then, as client programs find them, a pod's service account or a
//! kubeconfig (kubectl's rules: the `KUBECONFIG` list merged, else
//! `~/.kube/config`; the current context and its namespace).
//!
//! Everything is read when the URL is parsed, so that a bad file is named
//! before anything is sent; only a token file is read again later, as it
//! rotates. What a kubeconfig asks for that elect does not do (an exec or
//! auth-provider plugin, basic auth, impersonation, a proxy) is refused by
//! name: a kubeconfig half understood would reach the server as someone
//! else, or not at all.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::{Secret, StoreError};

/// A pod's service account, as the kubelet mounts it.
pub const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the URL names: a namespace and a kubeconfig context, or neither.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Url {
    pub namespace: Option<String>,
    pub context: Option<String>,
}

impl Url {
    /// `k8s:`, `k8s:NAMESPACE`, `k8s://NAMESPACE`, each with an optional
    /// `?context=CONTEXT` (and `namespace=` there too).
    pub fn parse(url: &str) -> Result<Url, StoreError> {
        let bad = |why: String| StoreError::config(format!("store URL '{url}': {why}"));
        let rest = url
            .strip_prefix("k8s:")
            .ok_or_else(|| bad("not a k8s: URL".into()))?;
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let path = path.trim_end_matches('/');
        let mut parsed = Url::default();
        if !path.is_empty() {
            parsed.namespace = Some(path.to_string());
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if value.is_empty() {
                return Err(bad(format!("'{key}' has no value")));
            }
            match key {
                "context" => parsed.context = Some(value.to_string()),
                "namespace" if parsed.namespace.is_some() => {
                    return Err(bad("the namespace is named twice".into()));
                }
                "namespace" => parsed.namespace = Some(value.to_string()),
                _ => {
                    return Err(bad(format!(
                        "unknown setting '{key}' (k8s: takes context= and namespace=)"
                    )));
                }
            }
        }
        if let Some(ns) = &parsed.namespace {
            check_namespace(ns).map_err(|e| bad(e.to_string()))?;
        }
        Ok(parsed)
    }
}

impl Url {
    /// How the store names itself in messages once its namespace is
    /// known: the URL may name neither that nor the context.
    fn shown(&self, namespace: &str) -> String {
        match &self.context {
            Some(context) => format!("k8s:{namespace}@{context}"),
            None => format!("k8s:{namespace}"),
        }
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("k8s:")?;
        if let Some(ns) = &self.namespace {
            f.write_str(ns)?;
        }
        if let Some(context) = &self.context {
            write!(f, "?context={context}")?;
        }
        Ok(())
    }
}

/// Why a name cannot be a namespace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceError {
    #[error("'{ns}' is not a namespace (lowercase letters, digits and '-', at most 63)")]
    NotALabel { ns: String },
}

/// A namespace is a DNS-1123 label.
fn check_namespace(ns: &str) -> Result<(), NamespaceError> {
    let ok = ns.len() <= 63
        && ns
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !ns.starts_with('-')
        && !ns.ends_with('-');
    match ok {
        true => Ok(()),
        false => Err(NamespaceError::NotALabel { ns: ns.into() }),
    }
}

/// How a request proves who sends it, besides a client certificate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Auth {
    None,
    Token(Secret),
    /// Read again as it rotates.
    TokenFile(PathBuf),
    /// An exec credential plugin's, run again as its token expires.
    Exec(super::exec::Plugin),
}

/// Everything needed to reach the API server, resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conn {
    /// `https://HOST:PORT`.
    pub server: String,
    /// The CA's PEM; `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
    pub insecure: bool,
    pub tls_server_name: Option<String>,
    /// A client certificate and its key, PEM.
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
    pub auth: Auth,
    pub namespace: String,
    /// The store as shown in messages: `k8s:NAMESPACE`, with
    /// `@CONTEXT` where the URL named one.
    pub shown: String,
}

/// Where the settings come from, for the environment `var` reads.
pub fn resolve(url: &Url, var: &dyn Fn(&str) -> Option<String>) -> Result<Conn, StoreError> {
    // Before the namespace is known, the URL as given: `k8s:` alone would read
    // "k8s:: ...".
    let shown = format!("store URL '{url}'");
    let kubeconfig = var("KUBECONFIG").filter(|v| !v.trim().is_empty());
    let home = var("HOME").map(|h| Path::new(&h).join(".kube/config"));
    let in_pod = var("KUBERNETES_SERVICE_HOST").is_some()
        && var("KUBERNETES_SERVICE_PORT").is_some()
        && Path::new(SERVICE_ACCOUNT).join("token").exists();
    let files: Vec<PathBuf> = match (&kubeconfig, &url.context, in_pod, &home) {
        (Some(list), _, _, _) => std::env::split_paths(list).collect(),
        (None, None, true, _) => return in_cluster(url, var, Path::new(SERVICE_ACCOUNT)),
        (None, _, _, Some(home)) if home.exists() => vec![home.clone()],
        _ => {
            return Err(StoreError::config(format!(
                "{shown}: no API server: not in a pod (KUBERNETES_SERVICE_HOST and a service \
                 account token) and no kubeconfig (KUBECONFIG, ~/.kube/config)"
            )));
        }
    };
    from_kubeconfig(url, &files, shown)
}

/// In a pod: the service account's token and CA, the API server from
/// `KUBERNETES_SERVICE_HOST`/`PORT`, the pod's namespace.
fn in_cluster(
    url: &Url,
    var: &dyn Fn(&str) -> Option<String>,
    dir: &Path,
) -> Result<Conn, StoreError> {
    let host = var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
    let port = var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
    let host = match host.contains(':') {
        true => format!("[{host}]"),
        false => host,
    };
    let ca = read(&dir.join("ca.crt"), "the service account's CA")?;
    let namespace = match &url.namespace {
        Some(ns) => ns.clone(),
        None => std::fs::read_to_string(dir.join("namespace"))
            .map(|ns| ns.trim().to_string())
            .unwrap_or_else(|_| "default".into()),
    };
    Ok(Conn {
        server: format!("https://{host}:{port}"),
        ca: Some(ca),
        insecure: false,
        tls_server_name: None,
        client_cert: None,
        auth: Auth::TokenFile(dir.join("token")),
        shown: url.shown(&namespace),
        namespace,
    })
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, StoreError> {
    std::fs::read(path)
        .map_err(|e| StoreError::config(format!("cannot read {what} {}: {e}", path.display())))
}

/// One named entry of a kubeconfig, with the directory its relative paths
/// are relative to.
struct Entry {
    body: Map<String, Value>,
    dir: PathBuf,
    file: PathBuf,
}

/// The kubeconfig files merged as kubectl merges them: the first file to
/// name an entry, or the current context, wins.
#[derive(Default)]
struct Merged {
    current: Option<String>,
    clusters: Vec<(String, Entry)>,
    users: Vec<(String, Entry)>,
    contexts: Vec<(String, Entry)>,
}

impl Merged {
    /// Merge `file` in; whether it exists.
    fn add(&mut self, file: &Path) -> Result<bool, StoreError> {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            // kubectl skips a file of the list that does not exist.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => {
                return Err(StoreError::config(format!(
                    "cannot read the kubeconfig {}: {e}",
                    file.display()
                )));
            }
        };
        if text.trim().is_empty() {
            return Ok(true);
        }
        let doc: Value = serde_saphyr::from_str(&text).map_err(|e| {
            let e = e.to_string().replace('\n', " ");
            StoreError::config(format!(
                "the kubeconfig {} is not YAML: {e}",
                file.display()
            ))
        })?;
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        if self.current.is_none() {
            self.current = doc["current-context"]
                .as_str()
                .filter(|c| !c.is_empty())
                .map(String::from);
        }
        for (list, key, into) in [
            ("clusters", "cluster", &mut self.clusters),
            ("users", "user", &mut self.users),
            ("contexts", "context", &mut self.contexts),
        ] {
            for item in doc[list].as_array().into_iter().flatten() {
                let Some(name) = item["name"].as_str() else {
                    continue;
                };
                if into.iter().any(|(n, _)| n == name) {
                    continue;
                }
                let body = item[key].as_object().cloned().unwrap_or_default();
                into.push((
                    name.to_string(),
                    Entry {
                        body,
                        dir: dir.clone(),
                        file: file.to_path_buf(),
                    },
                ));
            }
        }
        Ok(true)
    }
}

fn find<'a>(list: &'a [(String, Entry)], name: &str) -> Option<&'a Entry> {
    list.iter().find(|(n, _)| n == name).map(|(_, e)| e)
}

fn from_kubeconfig(url: &Url, files: &[PathBuf], shown: String) -> Result<Conn, StoreError> {
    let mut merged = Merged::default();
    let mut found = false;
    for file in files {
        found |= merged.add(file)?;
    }
    let named: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let named = named.join(":");
    // Skipped one by one, as kubectl does; but with none there is nothing
    // to say of a context, only that the files are not there.
    if !found {
        return Err(StoreError::config(match files {
            [file] => format!(
                "{shown}: the kubeconfig {} does not exist (KUBECONFIG)",
                file.display()
            ),
            _ => format!("{shown}: none of the kubeconfigs {named} exists (KUBECONFIG)"),
        }));
    }
    let context_name = url
        .context
        .clone()
        .or(merged.current.clone())
        .ok_or_else(|| {
            StoreError::config(format!(
                "{shown}: the kubeconfig {named} has no current-context; name one: \
                 k8s:?context=NAME"
            ))
        })?;
    let context = find(&merged.contexts, &context_name).ok_or_else(|| {
        StoreError::config(format!(
            "{shown}: the kubeconfig {named} has no context '{context_name}'"
        ))
    })?;
    let str_of = |e: &Entry, key: &str| e.body.get(key).and_then(Value::as_str).map(String::from);
    let cluster_name = str_of(context, "cluster").unwrap_or_default();
    let user_name = str_of(context, "user").unwrap_or_default();
    let cluster = find(&merged.clusters, &cluster_name).ok_or_else(|| {
        StoreError::config(format!(
            "{shown}: context '{context_name}' names cluster '{cluster_name}', which the \
             kubeconfig {named} lacks"
        ))
    })?;
    let namespace = url
        .namespace
        .clone()
        .or_else(|| str_of(context, "namespace").filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "default".into());
    let mut conn = Conn {
        server: String::new(),
        ca: None,
        insecure: false,
        tls_server_name: None,
        client_cert: None,
        auth: Auth::None,
        shown: url.shown(&namespace),
        namespace,
    };
    cluster_settings(&mut conn, &cluster_name, cluster)?;
    if !user_name.is_empty() {
        let user = find(&merged.users, &user_name).ok_or_else(|| {
            StoreError::config(format!(
                "{shown}: context '{context_name}' names user '{user_name}', which the \
                 kubeconfig {named} lacks"
            ))
        })?;
        user_settings(&mut conn, &user_name, user)?;
    }
    Ok(conn)
}

/// A file a kubeconfig names, relative to its own directory.
fn path_in(entry: &Entry, path: &str) -> PathBuf {
    let path = Path::new(path);
    match path.is_absolute() {
        true => path.to_path_buf(),
        false => entry.dir.join(path),
    }
}

/// `KEY` from its file or its inline `KEY-data` (base64), if either.
fn file_or_data(
    entry: &Entry,
    key: &str,
    data_key: &str,
    what: &str,
) -> Result<Option<Vec<u8>>, StoreError> {
    if let Some(data) = entry.body.get(data_key).and_then(Value::as_str) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| {
                StoreError::config(format!(
                    "the kubeconfig {}: {data_key} is not base64: {e}",
                    entry.file.display()
                ))
            })?;
        return Ok(Some(bytes));
    }
    match entry.body.get(key).and_then(Value::as_str) {
        Some(path) => read(&path_in(entry, path), what).map(Some),
        None => Ok(None),
    }
}

/// Refuse what elect does not understand in an entry, by its name.
fn refuse_unknown(entry: &Entry, what: &str, known: &[&str]) -> Result<(), StoreError> {
    match entry.body.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(StoreError::config(format!(
            "the kubeconfig {}: {what} uses '{key}', which elect does not support",
            entry.file.display()
        ))),
        None => Ok(()),
    }
}

fn cluster_settings(conn: &mut Conn, name: &str, cluster: &Entry) -> Result<(), StoreError> {
    refuse_unknown(
        cluster,
        &format!("cluster '{name}'"),
        &[
            "server",
            "certificate-authority",
            "certificate-authority-data",
            "insecure-skip-tls-verify",
            "tls-server-name",
            "disable-compression",
            "extensions",
        ],
    )?;
    conn.server = cluster
        .body
        .get("server")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            StoreError::config(format!(
                "the kubeconfig {}: cluster '{name}' has no server",
                cluster.file.display()
            ))
        })?
        .to_string();
    conn.ca = file_or_data(
        cluster,
        "certificate-authority",
        "certificate-authority-data",
        "the cluster's certificate-authority",
    )?;
    conn.insecure = cluster
        .body
        .get("insecure-skip-tls-verify")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    conn.tls_server_name = cluster
        .body
        .get("tls-server-name")
        .and_then(Value::as_str)
        .map(String::from);
    Ok(())
}

fn user_settings(conn: &mut Conn, name: &str, user: &Entry) -> Result<(), StoreError> {
    let what = format!("user '{name}'");
    for (key, means) in [
        ("auth-provider", "an auth-provider plugin"),
        ("username", "basic authentication"),
        ("password", "basic authentication"),
        ("as", "impersonation"),
        ("as-uid", "impersonation"),
        ("as-groups", "impersonation"),
        ("as-user-extra", "impersonation"),
    ] {
        if user.body.contains_key(key) {
            return Err(StoreError::config(format!(
                "the kubeconfig {}: {what} uses {means} ('{key}'), which elect does not \
                 support",
                user.file.display()
            )));
        }
    }
    refuse_unknown(
        user,
        &what,
        &[
            "token",
            "tokenFile",
            "client-certificate",
            "client-certificate-data",
            "client-key",
            "client-key-data",
            "exec",
            "extensions",
        ],
    )?;
    let cert = file_or_data(
        user,
        "client-certificate",
        "client-certificate-data",
        "the user's client-certificate",
    )?;
    let key = file_or_data(
        user,
        "client-key",
        "client-key-data",
        "the user's client-key",
    )?;
    conn.client_cert = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(StoreError::config(format!(
                "the kubeconfig {}: {what} has a client certificate without its key, or a \
                 key without its certificate",
                user.file.display()
            )));
        }
    };
    let token = user.body.get("token").and_then(Value::as_str);
    let file = user.body.get("tokenFile").and_then(Value::as_str);
    conn.auth = match (token, file) {
        // kubectl: an inline token wins over its file.
        (Some(token), _) if !token.is_empty() => Auth::Token(Secret(token.to_string())),
        (_, Some(file)) if !file.is_empty() => {
            let path = path_in(user, file);
            read(&path, "the user's tokenFile")?;
            Auth::TokenFile(path)
        }
        _ => match user.body.get("exec") {
            Some(exec) => Auth::Exec(super::exec::Plugin::parse(
                exec,
                &user.dir,
                &user.file.display().to_string(),
            )?),
            None => Auth::None,
        },
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_namespace_and_a_context() {
        let p = |u: &str| Url::parse(u).map_err(|e| e.message);
        assert_eq!(p("k8s:"), Ok(Url::default()));
        let ns = Url {
            namespace: Some("jobs".into()),
            context: None,
        };
        assert_eq!(p("k8s:jobs"), Ok(ns.clone()));
        assert_eq!(p("k8s://jobs"), Ok(ns.clone()));
        assert_eq!(p("k8s:?namespace=jobs"), Ok(ns));
        let both = p("k8s:jobs?context=prod").unwrap();
        assert_eq!(both.context.as_deref(), Some("prod"));
        assert_eq!(both.to_string(), "k8s:jobs?context=prod");
        assert_eq!(
            p("k8s:Jobs").unwrap_err(),
            "store URL 'k8s:Jobs': 'Jobs' is not a namespace (lowercase letters, digits and '-', at most 63)"
        );
        assert!(
            p("k8s:?ctx=a")
                .unwrap_err()
                .contains("unknown setting 'ctx'")
        );
        assert!(p("k8s:a?namespace=b").unwrap_err().contains("twice"));
    }

    #[test]
    fn in_a_pod_the_service_account_says_it_all() {
        let dir = std::env::temp_dir().join(format!("elect-sa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write(&dir, "ca.crt", "-----BEGIN CERTIFICATE-----\n");
        write(&dir, "token", "t\n");
        write(&dir, "namespace", "jobs\n");
        let var = |name: &str| match name {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        let conn = in_cluster(&Url::default(), &var, &dir).unwrap();
        assert_eq!(conn.server, "https://[fd00::1]:443");
        assert_eq!(conn.namespace, "jobs");
        assert_eq!(conn.shown, "k8s:jobs");
        assert_eq!(conn.auth, Auth::TokenFile(dir.join("token")));
        let url = Url::parse("k8s:other").unwrap();
        assert_eq!(in_cluster(&url, &var, &dir).unwrap().namespace, "other");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn kubeconfigs_are_merged_and_what_elect_cannot_do_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("elect-kubeconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write(&dir, "ca.pem", "-----BEGIN CERTIFICATE-----\n");
        write(&dir, "token", "secret-from-file\n");
        let a = write(
            &dir,
            "a",
            "apiVersion: v1\nkind: Config\ncurrent-context: one\n\
             clusters:\n- name: c\n  cluster:\n    server: https://a:6443\n    certificate-authority: ca.pem\n\
             users:\n- name: u\n  user:\n    tokenFile: token\n\
             - name: plugin\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n\
             - name: basic\n  user:\n    username: u\n\
             contexts:\n- name: one\n  context:\n    cluster: c\n    user: u\n    namespace: jobs\n\
             - name: two\n  context:\n    cluster: c\n    user: plugin\n\
             - name: three\n  context:\n    cluster: c\n    user: basic\n",
        );
        let b = write(
            &dir,
            "b",
            "current-context: two\ncontexts:\n- name: one\n  context:\n    cluster: none\n",
        );
        let missing = dir.join("missing");
        let conn = from_kubeconfig(
            &Url::default(),
            &[a.clone(), missing, b.clone()],
            "k8s:".into(),
        )
        .unwrap();
        assert_eq!(conn.server, "https://a:6443");
        assert_eq!(conn.namespace, "jobs");
        assert_eq!(
            conn.ca.as_deref(),
            Some(&b"-----BEGIN CERTIFICATE-----\n"[..])
        );
        assert_eq!(conn.auth, Auth::TokenFile(dir.join("token")));
        let url = Url {
            namespace: Some("other".into()),
            context: Some("two".into()),
        };
        let conn = from_kubeconfig(&url, std::slice::from_ref(&a), "k8s:".into()).unwrap();
        assert_eq!(conn.namespace, "other");
        let Auth::Exec(plugin) = conn.auth else {
            panic!("{:?}", conn.auth)
        };
        assert_eq!(plugin.command, PathBuf::from("aws"));
        let three = Url {
            namespace: None,
            context: Some("three".into()),
        };
        let err = from_kubeconfig(&three, std::slice::from_ref(&a), "k8s:".into()).unwrap_err();
        assert!(
            err.message.contains("basic authentication ('username')"),
            "{}",
            err.message
        );
        // The first file to name a context wins.
        let one = Url {
            namespace: None,
            context: Some("one".into()),
        };
        let err = from_kubeconfig(&one, &[b, a], "k8s:".into()).unwrap_err();
        assert!(err.message.contains("cluster 'none'"), "{}", err.message);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
