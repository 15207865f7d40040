//! A kubeconfig's exec credential plugin (`client.authentication.k8s.io`
//! `ExecCredential`), as EKS, GKE and AKS kubeconfigs use one: one run,
//! bounded, in a process group of its own. When it runs is
//! [`super::tokens`]'s to say.
//!
//! Only a bearer token is taken from it: a plugin that gives a client
//! certificate is refused by name.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::store::{Secret, StoreError};

/// The most a plugin may take: then its process group is killed.
pub const RUN_WITHIN: Duration = Duration::from_secs(30);

/// A plugin as the kubeconfig names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plugin {
    pub api_version: String,
    /// The command, made absolute where it named a path relative to the
    /// kubeconfig.
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// What the kubeconfig is shown as, for messages.
    pub file: String,
}

/// A token a plugin gave, and until when it holds.
#[derive(Clone, Debug)]
pub struct Credential {
    pub token: Secret,
    pub expires: Option<SystemTime>,
}

impl Plugin {
    /// The plugin of a kubeconfig user's `exec`, whose paths are relative
    /// to `dir`.
    pub fn parse(exec: &Value, dir: &std::path::Path, file: &str) -> Result<Plugin, StoreError> {
        let bad =
            |why: &str| StoreError::config(format!("the kubeconfig {file}: the exec plugin {why}"));
        let api_version = exec["apiVersion"].as_str().unwrap_or("").to_string();
        if !matches!(
            api_version.as_str(),
            "client.authentication.k8s.io/v1" | "client.authentication.k8s.io/v1beta1"
        ) {
            return Err(bad(&format!(
                "has apiVersion '{api_version}': elect speaks client.authentication.k8s.io/v1 \
                 and v1beta1"
            )));
        }
        let command = exec["command"]
            .as_str()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| bad("names no command"))?;
        // As kubectl: a relative path with a separator is the kubeconfig's.
        let command = match command.contains('/') && !command.starts_with('/') {
            true => dir.join(command),
            false => PathBuf::from(command),
        };
        let args = exec["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        let env = exec["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
            .collect();
        if exec["provideClusterInfo"].as_bool() == Some(true) {
            return Err(bad(
                "wants the cluster's info (provideClusterInfo), which elect does not give",
            ));
        }
        Ok(Plugin {
            api_version,
            command,
            args,
            env,
            file: file.to_string(),
        })
    }

    /// Run the plugin: its token. The plugin runs in a process group of
    /// its own; one that has not ended within [`RUN_WITHIN`] has its whole
    /// group killed (a shell script's children too) and is reaped, and so
    /// is one whose run is dropped half-way.
    pub async fn run(&self) -> Result<Credential, StoreError> {
        let shown = self.command.display();
        let failed = |why: String| {
            StoreError::config(format!(
                "the kubeconfig {}: the exec plugin {shown} {why}",
                self.file
            ))
        };
        let info = json!({
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": { "interactive": false },
        });
        let mut command = tokio::process::Command::new(&self.command);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("KUBERNETES_EXEC_INFO", info.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| failed(format!("cannot run: {e}")))?;
        let group = Group(child.id().map(|pid| pid as i32));
        let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
        let collect = async {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let (o, e, status) = tokio::join!(
                read_all(stdout.as_mut(), &mut out),
                read_all(stderr.as_mut(), &mut err),
                child.wait()
            );
            o.and(e).and(status).map(|status| (status, out, err))
        };
        let ended = tokio::time::timeout(RUN_WITHIN, collect).await;
        let (status, stdout, stderr) = match ended {
            Ok(ended) => {
                group.disarm();
                ended.map_err(|e| failed(format!("cannot be read: {e}")))?
            }
            Err(_) => {
                group.kill();
                let _ = child.wait().await;
                group.disarm();
                return Err(StoreError::unavailable(format!(
                    "the kubeconfig {}: the exec plugin {shown} hung: no answer within {}, \
                     killed",
                    self.file,
                    crate::clock::show(RUN_WITHIN)
                )));
            }
        };
        let out = std::process::Output {
            status,
            stdout,
            stderr,
        };
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.trim().replace('\n', " ");
            return Err(failed(format!("failed ({}): {said}", out.status)));
        }
        let answer: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| failed(format!("printed no ExecCredential: {e}")))?;
        if answer["kind"] != "ExecCredential" {
            return Err(failed("printed no ExecCredential".into()));
        }
        let status = &answer["status"];
        if status["clientCertificateData"].is_string() {
            return Err(failed(
                "gives a client certificate, which elect does not take from a plugin".into(),
            ));
        }
        let token = status["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| failed("gave no token".into()))?;
        let expires = match status["expirationTimestamp"].as_str() {
            Some(at) => Some(
                humantime::parse_rfc3339_weak(at)
                    .map_err(|e| failed(format!("gave a bad expirationTimestamp '{at}': {e}")))?,
            ),
            None => None,
        };
        Ok(Credential {
            token: Secret(token.to_string()),
            expires,
        })
    }
}

/// All of a pipe, into `into`.
async fn read_all(
    pipe: Option<&mut (impl tokio::io::AsyncRead + Unpin)>,
    into: &mut Vec<u8>,
) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    match pipe {
        Some(pipe) => pipe.read_to_end(into).await.map(drop),
        None => Ok(()),
    }
}

/// A plugin's process group (its id is the plugin's pid), killed when
/// dropped unless disarmed: a run given up, or dropped half-way, leaves
/// none of its processes behind.
struct Group(Option<i32>);

impl Group {
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            crate::kill::send(
                crate::kill::Target::Group(nix::unistd::Pid::from_raw(pgid)),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}
