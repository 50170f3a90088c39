//! Out-of-cluster config from a kubeconfig file (YAML, as kubectl writes
//! it, or its JSON form).
//!
//! The YAML (and JSON, which is YAML) is read by a small built-in reader
//! (see `yaml.rs`) as kubectl's go-yaml reads it: flow collections over
//! several lines, anchors, aliases and `<<` merge keys (with a bound on
//! what aliases expand to), tags, a key given twice keeping its last value,
//! only the first document read. `null`
//! values and empty strings count as absent (clientcmd tests each field's
//! length), and `insecure-skip-tls-verify` takes YAML 1.1's booleans as
//! kubectl's go-yaml v2 does (`true`, `yes`, `on`, `y`, ...), quoted or not.
//!
//! Read as kubectl (client-go's `clientcmd`) reads them. Supported:
//! `server`, `certificate-authority(-data)`, `tls-server-name`,
//! `insecure-skip-tls-verify` (warned about at every load; see `tls.rs`),
//! `proxy-url` (`http`, `https`), `token`, `tokenFile` (read at load, as
//! clientcmd; it wins over `token`, as in client-go), `client-certificate(-data)`/`client-key(-data)`, `exec`
//! credential plugins that answer with a token (EKS, GKE, kubelogin; see
//! `exec.rs`), the `oidc` auth-provider (see `oidc.rs`), impersonation
//! (`as`, `as-uid`, `as-groups`, `as-user-extra`), and the context's
//! namespace (`default` when it names none). As clientcmd, a user's
//! credentials (not its impersonation) are used only over TLS: for an
//! `http://` server they are not sent (a warning names the user and the
//! server) and an exec plugin is not run. Refused with a clear error:
//! `insecure-skip-tls-verify` with a CA (as kubectl refuses it), the `gcp`
//! and `azure` auth-providers (removed in kubectl 1.26; the error names the
//! exec plugin that replaces each), basic auth (removed from Kubernetes in
//! 1.19), SOCKS proxies, and exec plugins that need a terminal
//! (`interactiveMode: Always`). `disable-compression` and `extensions` are
//! ignored.
//! The files of a `$KUBECONFIG` list are merged as kubectl merges them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::client::base64;
use crate::client::config::read_token;
use crate::client::config::OidcConfig;
use crate::client::exec::ExecPlugin;
use crate::client::file::{read_capped, MAX_KUBECONFIG, MAX_PEM};
use crate::client::oidc::check_url;
use crate::client::yaml::Keep::{self, All};
use crate::client::yaml::Memory;
use crate::client::ClientConfig;
use crate::error::{Error, Result};

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct KubeConfig {
    clusters: Vec<Named<Cluster>>,
    users: Vec<Named<User>>,
    contexts: Vec<Named<Context>>,
    current_context: String,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    /// Absent or `null` (an empty `user:`) reads as empty.
    #[serde(default, alias = "cluster", alias = "user", alias = "context")]
    value: T,
    /// The file this entry came from, for errors.
    #[serde(skip)]
    file: PathBuf,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct Cluster {
    server: String,
    #[serde(deserialize_with = "non_empty")]
    certificate_authority: Option<PathBuf>,
    #[serde(deserialize_with = "non_empty")]
    certificate_authority_data: Option<String>,
    #[serde(deserialize_with = "bool_or_string")]
    insecure_skip_tls_verify: bool,
    #[serde(deserialize_with = "non_empty")]
    proxy_url: Option<String>,
    #[serde(deserialize_with = "non_empty")]
    tls_server_name: Option<String>,
    /// Read for the one an exec plugin is given (`config`).
    extensions: Vec<Extension>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Extension {
    name: String,
    extension: serde_json::Value,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct User {
    #[serde(deserialize_with = "non_empty")]
    token: Option<String>,
    #[serde(rename = "tokenFile", deserialize_with = "non_empty")]
    token_file: Option<PathBuf>,
    #[serde(deserialize_with = "non_empty")]
    client_certificate: Option<PathBuf>,
    #[serde(deserialize_with = "non_empty")]
    client_certificate_data: Option<String>,
    #[serde(deserialize_with = "non_empty")]
    client_key: Option<PathBuf>,
    #[serde(deserialize_with = "non_empty")]
    client_key_data: Option<String>,
    exec: Option<Exec>,
    /// `{name, config: {...}}`: read as a value, the static binary's
    /// cheapest way.
    auth_provider: Option<serde_json::Value>,
    #[serde(deserialize_with = "non_empty")]
    username: Option<String>,
    #[serde(deserialize_with = "non_empty")]
    password: Option<String>,
    #[serde(rename = "as", deserialize_with = "non_empty")]
    impersonate: Option<String>,
    #[serde(rename = "as-uid", deserialize_with = "non_empty")]
    impersonate_uid: Option<String>,
    #[serde(rename = "as-groups")]
    impersonate_groups: Vec<String>,
    #[serde(rename = "as-user-extra")]
    impersonate_extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// A user's `exec` section.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Exec {
    command: PathBuf,
    args: Vec<String>,
    env: Vec<EnvVar>,
    api_version: String,
    interactive_mode: Option<String>,
    #[serde(deserialize_with = "bool_or_string")]
    provide_cluster_info: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct EnvVar {
    name: String,
    value: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
    namespace: Option<String>,
}

/// A [`Named`] entry: its name, and its value under any of its keys.
macro_rules! named {
    ($value:expr) => {
        Keep::Keys(&[
            ("name", All),
            ("value", $value),
            ("cluster", $value),
            ("user", $value),
            ("context", $value),
        ])
    };
}

/// What the reader keeps of a kubeconfig: the keys the types above read
/// (renames and aliases included; a unit test holds them to serde's field
/// lists). The rest (`apiVersion`, `kind`, `preferences`, `extensions`
/// outside clusters, fields this crate does not read) is parsed, so that
/// a syntax error anywhere is an error as with kubectl, but not stored.
static KUBECONFIG: Keep = Keep::Keys(&[
    ("clusters", named!(CLUSTER)),
    ("users", named!(USER)),
    ("contexts", named!(CONTEXT)),
    ("current-context", All),
]);

const CLUSTER: Keep = Keep::Keys(&[
    ("server", All),
    ("certificate-authority", All),
    ("certificate-authority-data", All),
    ("insecure-skip-tls-verify", All),
    ("proxy-url", All),
    ("tls-server-name", All),
    (
        "extensions",
        Keep::Keys(&[("name", All), ("extension", All)]),
    ),
]);

const USER: Keep = Keep::Keys(&[
    ("token", All),
    ("tokenFile", All),
    ("client-certificate", All),
    ("client-certificate-data", All),
    ("client-key", All),
    ("client-key-data", All),
    (
        "exec",
        Keep::Keys(&[
            ("command", All),
            ("args", All),
            ("env", Keep::Keys(&[("name", All), ("value", All)])),
            ("apiVersion", All),
            ("interactiveMode", All),
            ("provideClusterInfo", All),
        ]),
    ),
    // What `oidc_config` and `load` read of it.
    (
        "auth-provider",
        Keep::Keys(&[
            ("name", All),
            (
                "config",
                Keep::Keys(&[
                    ("idp-issuer-url", All),
                    ("idp-certificate-authority", All),
                    ("idp-certificate-authority-data", All),
                    ("client-id", All),
                    ("client-secret", All),
                    ("id-token", All),
                    ("refresh-token", All),
                ]),
            ),
        ]),
    ),
    ("username", All),
    ("password", All),
    ("as", All),
    ("as-uid", All),
    ("as-groups", All),
    ("as-user-extra", All),
]);

const CONTEXT: Keep = Keep::Keys(&[("cluster", All), ("user", All), ("namespace", All)]);

fn bad(path: &Path, detail: impl Into<String>) -> Error {
    Error::InvalidConfig(format!("kubeconfig {}: {}", path.display(), detail.into()))
}

/// `path` relative to `base`, cleaned lexically as Go's `filepath.Join`
/// cleans it (client-go resolves a kubeconfig's relative paths so):
/// `sub/../token` names `token` even where `sub` does not exist.
fn join_clean(base: &Path, path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out: Vec<Component<'_>> = Vec::new();
    for part in base.components().chain(path.components()) {
        match part {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(part),
            },
            _ => out.push(part),
        }
    }
    if out.is_empty() {
        return PathBuf::from(".");
    }
    out.iter().collect()
}

impl KubeConfig {
    /// Read one file; relative paths in it are made relative to its folder
    /// and every entry remembers the file.
    fn load(path: &Path) -> Result<KubeConfig> {
        let text = read_capped("kubeconfig", path, MAX_KUBECONFIG)?;
        let mut kc = read(&text).map_err(|e| bad(path, e))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &mut Option<PathBuf>| {
            if let Some(p) = p.as_mut().filter(|p| p.is_relative()) {
                *p = join_clean(base, p);
            }
        };
        for c in &mut kc.clusters {
            c.file = path.to_path_buf();
            resolve(&mut c.value.certificate_authority);
        }
        for u in &mut kc.users {
            u.file = path.to_path_buf();
            resolve(&mut u.value.token_file);
            resolve(&mut u.value.client_certificate);
            resolve(&mut u.value.client_key);
            let idp_ca = u
                .value
                .auth_provider
                .as_mut()
                .and_then(|p| p.get_mut("config")?.get_mut("idp-certificate-authority"));
            if let Some(serde_json::Value::String(ca)) = idp_ca {
                if Path::new(ca.as_str()).is_relative() {
                    *ca = join_clean(base, Path::new(ca.as_str()))
                        .to_string_lossy()
                        .into_owned();
                }
            }
            // Like kubectl: a command with a path separator is a path,
            // relative to the kubeconfig; a bare name is looked up in PATH.
            if let Some(exec) = u.value.exec.as_mut() {
                if exec.command.is_relative() && exec.command.components().count() > 1 {
                    exec.command = join_clean(base, &exec.command);
                }
            }
        }
        for c in &mut kc.contexts {
            c.file = path.to_path_buf();
        }
        Ok(kc)
    }

    /// kubectl's merge of a `$KUBECONFIG` list: the first file to name an
    /// entry wins, and the first `current-context` set wins.
    fn merge(&mut self, later: KubeConfig) {
        if self.current_context.is_empty() {
            self.current_context = later.current_context;
        }
        self.clusters.extend(later.clusters);
        self.users.extend(later.users);
        self.contexts.extend(later.contexts);
    }

    /// Whether kubectl passes this kubeconfig over for the in-cluster
    /// configuration: no current context, or one whose cluster is missing
    /// or names no server (clientcmd's "empty" configuration). A current
    /// context that names no context is not passed over: kubectl refuses
    /// it, in a pod too.
    fn leads_nowhere(&self) -> bool {
        if self.current_context.is_empty() {
            return true;
        }
        let Some(context) = self
            .contexts
            .iter()
            .find(|c| c.name == self.current_context)
        else {
            return false;
        };
        self.clusters
            .iter()
            .find(|c| c.name == context.value.cluster)
            .is_none_or(|c| c.value.server.is_empty())
    }
}

/// The files of a `$KUBECONFIG` list, read and merged as kubectl merges
/// them; files that do not exist are skipped.
enum Kubeconfigs {
    Merged(KubeConfig),
    /// None of them exists: what reading the first said (or that none was given).
    NoneExists(Error),
}

fn load_merged(paths: &[impl AsRef<Path>]) -> Result<Kubeconfigs> {
    let mut merged: Option<KubeConfig> = None;
    let mut first_missing = None;
    for path in paths {
        let kc = match KubeConfig::load(path.as_ref()) {
            Err(e) if missing_file(&e).is_some() => {
                first_missing.get_or_insert(e);
                continue;
            }
            other => other?,
        };
        match &mut merged {
            None => merged = Some(kc),
            Some(m) => m.merge(kc),
        }
    }
    Ok(match merged {
        Some(kc) => Kubeconfigs::Merged(kc),
        None => Kubeconfigs::NoneExists(
            first_missing
                .unwrap_or_else(|| Error::InvalidConfig("no kubeconfig file given".into())),
        ),
    })
}

/// The files of a list, for messages.
fn file_list(paths: &[impl AsRef<Path>]) -> String {
    paths
        .iter()
        .map(|p| p.as_ref().display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn find<'a, T>(list: &'a [Named<T>], name: &str, what: &str, files: &str) -> Result<&'a Named<T>> {
    list.iter().find(|n| n.name == name).ok_or_else(|| {
        Error::InvalidConfig(format!("kubeconfig {files}: no {what} named {name:?}"))
    })
}

impl ClientConfig {
    /// Config from the kubeconfig files in `$KUBECONFIG` (merged as kubectl
    /// merges them; missing files are skipped) or `~/.kube/config`, using
    /// the current context.
    pub fn from_default_kubeconfig() -> Result<Self> {
        Self::from_kubeconfig_files(&Self::default_kubeconfig_paths()?, None)
    }

    /// The files kubectl reads: those listed in `$KUBECONFIG`, else
    /// `~/.kube/config`. For another context than the current one:
    ///
    /// ```no_run
    /// use lease_elector::ClientConfig;
    /// let paths = ClientConfig::default_kubeconfig_paths()?;
    /// let cfg = ClientConfig::from_kubeconfig_files(&paths, Some("staging"))?;
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    pub fn default_kubeconfig_paths() -> Result<Vec<PathBuf>> {
        default_paths(&env)
    }

    /// The configuration kubectl would use (client-go's `clientcmd`
    /// deferred loading), in this order:
    ///
    /// 1. the default kubeconfig, `$KUBECONFIG`'s files or else
    ///    `~/.kube/config` ([`from_default_kubeconfig`](Self::from_default_kubeconfig)),
    ///    when its current context leads to a server. In a pod too: a
    ///    `KUBECONFIG=... my-program` in a CI pod talks to the cluster it
    ///    names, as kubectl does;
    /// 2. else the pod's service account ([`in_cluster`](Self::in_cluster)),
    ///    when `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` are
    ///    set and the token file `/var/run/secrets/kubernetes.io/serviceaccount/token`
    ///    exists: where no kubeconfig file exists (`~/.kube/config` is not
    ///    looked for when `$KUBECONFIG` is set), or the kubeconfig leads
    ///    nowhere (empty, no current context, or its cluster missing or
    ///    without a server);
    /// 3. else an error saying what each lacked.
    ///
    /// A kubeconfig that cannot be read or parsed, or whose current context
    /// names no context, is an error, in a pod too, as for kubectl. The
    /// crate's tests run kubectl beside it in each of these cases.
    ///
    /// ```no_run
    /// let client = lease_elector::Client::new(lease_elector::ClientConfig::infer()?)?;
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    pub fn infer() -> Result<Self> {
        infer_with(&env, Path::new(crate::client::SERVICE_ACCOUNT_DIR))
    }

    /// Config from a kubeconfig file (YAML or JSON) and a context (`None`:
    /// the current context). Relative file paths are relative to the file.
    ///
    /// ```no_run
    /// let cfg = lease_elector::ClientConfig::from_kubeconfig("/home/me/.kube/config", None)?;
    /// let client = lease_elector::Client::new(cfg)?;
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    pub fn from_kubeconfig(path: impl AsRef<Path>, context: Option<&str>) -> Result<Self> {
        Self::from_kubeconfig_files(&[path.as_ref().to_path_buf()], context)
    }

    /// Config from several kubeconfig files merged as kubectl merges a
    /// `$KUBECONFIG` list: the first file to name a cluster, user or
    /// context wins, and so does the first `current-context`. Files that do
    /// not exist are skipped, unless none exists.
    ///
    /// ```no_run
    /// let cfg = lease_elector::ClientConfig::from_kubeconfig_files(
    ///     &["/home/me/.kube/config", "/home/me/.kube/prod.yaml"],
    ///     Some("prod"),
    /// )?;
    /// # Ok::<(), lease_elector::Error>(())
    /// ```
    pub fn from_kubeconfig_files(
        paths: &[impl AsRef<Path>],
        context: Option<&str>,
    ) -> Result<Self> {
        match load_merged(paths)? {
            Kubeconfigs::Merged(kc) => build(&kc, context, &file_list(paths)),
            Kubeconfigs::NoneExists(e) => Err(e),
        }
    }
}

fn env(key: &str) -> Option<OsString> {
    std::env::var_os(key).filter(|v| !v.is_empty())
}

/// `$KUBECONFIG`'s files, else `~/.kube/config`.
fn default_paths(env: &dyn Fn(&str) -> Option<OsString>) -> Result<Vec<PathBuf>> {
    if let Some(list) = env("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            return Ok(paths);
        }
    }
    let home = env("HOME")
        .ok_or_else(|| Error::InvalidConfig("neither KUBECONFIG nor HOME is set".into()))?;
    Ok(vec![Path::new(&home).join(".kube").join("config")])
}

/// [`ClientConfig::infer`]'s order, kubectl's as run with kubectl 1.32
/// (`tests/kubectl_fidelity.rs` runs both in each case).
fn infer_with(
    env: &dyn Fn(&str) -> Option<OsString>,
    service_account_dir: &Path,
) -> Result<ClientConfig> {
    let (kubeconfigs, files) = match default_paths(env) {
        Ok(paths) => (load_merged(&paths)?, file_list(&paths)),
        // No $KUBECONFIG and no $HOME (a container may have neither): no
        // kubeconfig, which a pod does not need.
        Err(e) => (Kubeconfigs::NoneExists(e), String::new()),
    };
    if let Kubeconfigs::Merged(kc) = &kubeconfigs {
        if !kc.leads_nowhere() {
            return build(kc, None, &files);
        }
    }
    let not_in_a_pod = match in_cluster_possible(env, service_account_dir) {
        Ok((host, port)) => {
            return ClientConfig::in_cluster_from(&host, &port, service_account_dir)
        }
        Err(why) => why,
    };
    // Neither: say what each lacked.
    match kubeconfigs {
        Kubeconfigs::Merged(kc) => build(&kc, None, &files).map_err(|e| match e {
            Error::InvalidConfig(m) => {
                Error::InvalidConfig(format!("{m}, and not in a cluster ({not_in_a_pod})"))
            }
            e => e,
        }),
        Kubeconfigs::NoneExists(e) if missing_file(&e).is_some() => Err(Error::InvalidConfig(
            format!("not in a cluster ({not_in_a_pod}) and no kubeconfig at {files}"),
        )),
        Kubeconfigs::NoneExists(Error::InvalidConfig(m)) => Err(Error::InvalidConfig(format!(
            "not in a cluster ({not_in_a_pod}) and {m}"
        ))),
        Kubeconfigs::NoneExists(e) => Err(e),
    }
}

/// The service's host and port when client-go would take the in-cluster
/// configuration (`inClusterClientConfig.Possible`: both set and the
/// token a file), else why not.
fn in_cluster_possible(
    env: &dyn Fn(&str) -> Option<OsString>,
    service_account_dir: &Path,
) -> std::result::Result<(String, String), String> {
    let var = |k: &str| {
        env(k)
            .map(|v| v.to_string_lossy().into_owned())
            .ok_or(format!("{k} is not set"))
    };
    let host = var("KUBERNETES_SERVICE_HOST")?;
    let port = var("KUBERNETES_SERVICE_PORT")?;
    let token = service_account_dir.join("token");
    match std::fs::metadata(&token) {
        Ok(meta) if !meta.is_dir() => Ok((host, port)),
        Ok(_) => Err(format!(
            "KUBERNETES_SERVICE_HOST is set, but the service-account token {} is a folder",
            token.display()
        )),
        Err(e) => Err(format!(
            "KUBERNETES_SERVICE_HOST is set, but no service-account token at {}: {e}",
            token.display()
        )),
    }
}

/// The file `e` says does not exist, if that is what `e` says.
fn missing_file(e: &Error) -> Option<&Path> {
    match e {
        Error::ReadFile { path, source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Some(path)
        }
        _ => None,
    }
}

/// The context's namespace, `default` when it names none (clientcmd's
/// rule, so that kubectl and the crate act in the same namespace).
fn context_namespace(ctx: &Context) -> String {
    match ctx.namespace.as_deref() {
        None | Some("") => "default".to_string(),
        Some(ns) => ns.to_string(),
    }
}

/// The client config of one context of a (merged) kubeconfig.
fn build(kc: &KubeConfig, context: Option<&str>, files: &str) -> Result<ClientConfig> {
    let context_name = context.unwrap_or(&kc.current_context);
    if context_name.is_empty() {
        return Err(Error::InvalidConfig(format!(
            "kubeconfig {files}: no context given and no current-context set"
        )));
    }
    let ctx = find(&kc.contexts, context_name, "context", files)?;
    let cluster = find(&kc.clusters, &ctx.value.cluster, "cluster", files)?;
    let user = find(&kc.users, &ctx.value.user, "user", files)?;
    let (cluster_file, user_file) = (&cluster.file, &user.file);
    let (cluster, user) = (&cluster.value, &user.value);
    let (cluster_name, user_name) = (&ctx.value.cluster, &ctx.value.user);

    if cluster.insecure_skip_tls_verify
        && (cluster.certificate_authority.is_some() || cluster.certificate_authority_data.is_some())
    {
        return Err(bad(cluster_file, format!(
            "cluster {cluster_name:?} sets both insecure-skip-tls-verify and a certificate authority: specifying a root certificates file with the insecure flag is not allowed (kubectl refuses it too)"
        )));
    }
    if let Some(provider) = &user.auth_provider {
        let name = provider.get("name").and_then(serde_json::Value::as_str);
        if name != Some("oidc") {
            return Err(bad(
                user_file,
                removed_auth_provider(user_name, name.unwrap_or_default()),
            ));
        }
    }
    if user.username.is_some() || user.password.is_some() {
        return Err(bad(
            user_file,
            format!("user {user_name:?} uses basic auth, which Kubernetes removed"),
        ));
    }
    if cluster.server.is_empty() {
        return Err(bad(
            cluster_file,
            format!("cluster {cluster_name:?} has no server"),
        ));
    }

    let mut cfg = ClientConfig::new(cluster.server.clone());
    if let Some(url) = &cluster.proxy_url {
        cfg = cfg.proxy(url.clone());
    }
    if let Some(name) = &cluster.tls_server_name {
        cfg = cfg.tls_server_name(name.clone());
    }
    if let Some(who) = user.impersonate.as_ref().filter(|u| !u.is_empty()) {
        cfg = cfg.impersonate(who.clone());
        if let Some(uid) = &user.impersonate_uid {
            cfg = cfg.impersonate_uid(uid.clone());
        }
        cfg = cfg.impersonate_groups(user.impersonate_groups.clone());
        for (key, values) in &user.impersonate_extra {
            cfg = cfg.impersonate_extra(key.clone(), values.clone());
        }
    } else if user.impersonate_uid.is_some()
        || !user.impersonate_groups.is_empty()
        || !user.impersonate_extra.is_empty()
    {
        return Err(bad(
            user_file,
            format!("user {user_name:?} sets as-groups, as-uid or as-user-extra without as"),
        ));
    }
    // clientcmd reads a user's credentials only over TLS ("only try to read
    // the auth information if we are secure"): never send them in clear
    // text. (Impersonation, above, it applies either way.)
    // Its scheme as Go reads it: `HTTPS://` is TLS too.
    if !cfg.base_url.starts_with("https://") {
        let has_credentials = user.token.is_some()
            || user.token_file.is_some()
            || user.exec.is_some()
            || user.auth_provider.is_some()
            || user.client_certificate.is_some()
            || user.client_certificate_data.is_some();
        if has_credentials {
            cfg.warn(format!(
                "kubeconfig {}: user {user_name:?} has credentials but cluster {cluster_name:?} is plain http ({}): they are not sent, as kubectl does not send them",
                crate::text::Escaped(&user_file.display().to_string()),
                crate::text::Escaped(&crate::client::failure::shown_url(&cluster.server))
            ));
        }
        return Ok(cfg.with_namespace(Some(context_namespace(&ctx.value))));
    }
    if cluster.insecure_skip_tls_verify {
        // As kubectl: the certificate chain and name are not checked.
        cfg.warn(format!(
            "kubeconfig {}: cluster {cluster_name:?} sets insecure-skip-tls-verify: the certificate of {} is not verified, so anyone on the network path can pose as the API server and take the credentials; give the cluster's certificate-authority instead",
            crate::text::Escaped(&cluster_file.display().to_string()),
            crate::text::Escaped(&crate::client::failure::shown_url(&cluster.server))
        ));
        cfg.insecure = true;
    }
    if let Some(data) = &cluster.certificate_authority_data {
        cfg = cfg.ca_pem(
            base64::decode(data)
                .map_err(|e| bad(cluster_file, format!("certificate-authority-data: {e}")))?,
        );
    } else if let Some(file) = &cluster.certificate_authority {
        cfg = cfg.ca_file(file)?;
    }
    if let Some(file) = &user.token_file {
        // As client-go: the file wins over an inline `token`, which only
        // stands in while the file cannot be read; alone, the file is read
        // now (as clientcmd), so an unreadable one fails here.
        match (&user.token, read_token(file)) {
            (Some(token), Err(_)) => cfg = cfg.token(token.clone()),
            (None, Err(e)) => return Err(e),
            (_, Ok(_)) => cfg = cfg.token_file(file),
        }
    } else if let Some(token) = &user.token {
        cfg = cfg.token(token.clone());
    } else if let Some(exec) = &user.exec {
        let plugin = ExecPlugin {
            command: exec.command.clone(),
            args: exec.args.clone(),
            env: exec
                .env
                .iter()
                .map(|e| (e.name.clone(), e.value.clone()))
                .collect(),
            api_version: exec.api_version.clone(),
            // What client-go's `ConfigToExecCluster` gives: the CA as data
            // (also when the kubeconfig names a file), and the cluster's
            // `client.authentication.k8s.io/exec` extension as `config`.
            cluster: exec.provide_cluster_info.then(|| {
                let mut c = serde_json::json!({ "server": cluster.server });
                if let Some(name) = &cluster.tls_server_name {
                    c["tls-server-name"] = name.clone().into();
                }
                if cluster.insecure_skip_tls_verify {
                    c["insecure-skip-tls-verify"] = true.into();
                }
                if let Some(pem) = &cfg.ca_pem {
                    c["certificate-authority-data"] = base64::encode(pem).into();
                }
                if let Some(url) = &cluster.proxy_url {
                    c["proxy-url"] = url.clone().into();
                }
                let config = cluster
                    .extensions
                    .iter()
                    .find(|e| e.name == "client.authentication.k8s.io/exec");
                if let Some(e) = config {
                    c["config"] = e.extension.clone();
                }
                c
            }),
        };
        plugin
            .validate(exec.interactive_mode.as_deref())
            .map_err(|e| bad(user_file, format!("user {user_name:?}: {e}")))?;
        cfg = cfg.exec_plugin(plugin);
    } else if let Some(provider) = &user.auth_provider {
        cfg = cfg.oidc(oidc_config(provider, user_name, user_file)?);
    }
    let cert = pem_source(
        user_file,
        "client-certificate",
        "client certificate",
        &user.client_certificate_data,
        &user.client_certificate,
    )?;
    let key = pem_source(
        user_file,
        "client-key",
        "client key",
        &user.client_key_data,
        &user.client_key,
    )?;
    match (cert, key) {
        (Some(cert), Some(key)) => cfg = cfg.client_identity(cert, key),
        (None, None) => {}
        _ => {
            return Err(bad(
                user_file,
                format!("user {user_name:?} needs both a client certificate and a key"),
            ))
        }
    }
    Ok(cfg.with_namespace(Some(context_namespace(&ctx.value))))
}

/// Why a kubeconfig's `auth-provider` other than `oidc` is refused.
fn removed_auth_provider(user: &str, name: &str) -> String {
    match name {
        "gcp" => format!(
            "user {user:?} uses the gcp auth-provider, which kubectl removed in 1.26: use the exec plugin gke-gcloud-auth-plugin (install it; `gcloud container clusters get-credentials` then writes the user in its exec form)"
        ),
        "azure" => format!(
            "user {user:?} uses the azure auth-provider, which kubectl removed in 1.26: use the exec plugin kubelogin (`kubelogin convert-kubeconfig` rewrites the user in its exec form)"
        ),
        other => format!(
            "user {user:?} uses the auth-provider {other:?}, which kubectl does not have either (oidc is its only one): use an exec plugin, a token or a client certificate"
        ),
    }
}

/// A user's oidc `auth-provider`, with what client-go requires of it.
fn oidc_config(provider: &serde_json::Value, user: &str, file: &Path) -> Result<OidcConfig> {
    let get = |key: &str| {
        let value = provider.get("config")?.get(key)?.as_str()?;
        (!value.is_empty()).then(|| value.to_string())
    };
    let need = |key: &str| {
        get(key).ok_or_else(|| {
            bad(
                file,
                format!("user {user:?}: the oidc auth-provider needs {key}"),
            )
        })
    };
    let issuer = need("idp-issuer-url")?;
    check_url("idp-issuer-url", &issuer).map_err(|e| bad(file, format!("user {user:?}: {e}")))?;
    let idp_ca = match (
        get("idp-certificate-authority-data"),
        get("idp-certificate-authority"),
    ) {
        (Some(data), _) => Some(base64::decode(&data).map_err(|e| {
            bad(
                file,
                format!("user {user:?}: idp-certificate-authority-data: {e}"),
            )
        })?),
        (None, Some(path)) => Some(read_capped(
            "oidc issuer CA bundle",
            Path::new(&path),
            MAX_PEM,
        )?),
        (None, None) => None,
    };
    Ok(OidcConfig {
        user: format!("{user:?} ({})", file.display()),
        issuer,
        client_id: need("client-id")?,
        client_secret: get("client-secret").unwrap_or_default(),
        id_token: get("id-token").unwrap_or_default(),
        refresh_token: get("refresh-token").unwrap_or_default(),
        idp_ca,
    })
}

/// What reading a kubeconfig may take in memory besides its text: 4
/// times its size, and 1 MiB so that every small file reads. Kubeconfigs
/// as tools and people write them (mostly names, server URLs, CA data and
/// tokens) take 1.5 to 2.5 times; a file of millions of one-character
/// entries (`[a,a,a,...]`) would take 30 times (a node per entry).
fn memory_limit(size: usize) -> usize {
    size.saturating_mul(4).saturating_add(1 << 20)
}

/// Of [`memory_limit`], what the reader's code and stack take as it runs
/// (measured at 0.2 to 0.4 MiB), outside the heap it accounts for.
const UNACCOUNTED: usize = 512 << 10;

/// The document, read as YAML as kubectl reads it (JSON is YAML), within
/// [`memory_limit`].
fn read(text: &[u8]) -> std::result::Result<KubeConfig, String> {
    read_within(text, &mut heap_budget(text.len()))
}

fn heap_budget(size: usize) -> Memory {
    Memory::new(memory_limit(size) - UNACCOUNTED)
}

fn read_within(text: &[u8], memory: &mut Memory) -> std::result::Result<KubeConfig, String> {
    use crate::client::yaml::{self, Node};
    let text = std::str::from_utf8(text).map_err(|e| format!("not UTF-8: {e}"))?;
    let result = match yaml::parse_node(text, &KUBECONFIG, memory) {
        Ok(doc @ Node::Map(_)) => yaml::from_node(doc, memory).map_err(|e| e.to_string()),
        // An empty file is an empty kubeconfig to clientcmd: kubectl
        // merges it with the others of a list, and finds nothing in it.
        Ok(Node::Null) => Ok(KubeConfig::default()),
        Ok(_) => Err("not a kubeconfig: the document is not a mapping".into()),
        Err(e) => Err(e.to_string()),
    };
    if memory.exceeded() {
        return Err(format!(
            "needs more than 4 \u{d7} its size in memory to read ({} KiB for {} KiB): not a kubeconfig kubectl's users write",
            memory_limit(text.len()) >> 10,
            text.len() >> 10
        ));
    }
    result
}

/// A YAML `true` reaches serde as a string (and JSON's `true` too: JSON
/// is read as YAML). kubectl's go-yaml v2 reads YAML 1.1, where `yes`,
/// `on` and `y` are true too (and `no`, `off`, `n` false). Read in place:
/// nothing copied.
fn bool_or_string<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<bool, D::Error> {
    struct Bool;
    impl serde::de::Visitor<'_> for Bool {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("true or false")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<bool, E> {
            let is = |words: [&str; 4]| words.iter().any(|w| s.eq_ignore_ascii_case(w));
            if is(["true", "yes", "on", "y"]) {
                Ok(true)
            } else if is(["false", "no", "off", "n"]) {
                Ok(false)
            } else {
                Err(E::custom(format!("expected true or false, found {s:?}")))
            }
        }
    }
    d.deserialize_str(Bool)
}

/// An empty string is no value: clientcmd tests each field's length.
fn non_empty<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: From<String>,
{
    Ok(Option::<String>::deserialize(d)?
        .filter(|s| !s.is_empty())
        .map(T::from))
}

fn pem_source(
    path: &Path,
    field: &str,
    what: &'static str,
    data: &Option<String>,
    file: &Option<PathBuf>,
) -> Result<Option<Vec<u8>>> {
    if let Some(data) = data {
        return base64::decode(data)
            .map(Some)
            .map_err(|e| bad(path, format!("{field}-data: {e}")));
    }
    match file {
        Some(f) => read_capped(what, f, MAX_PEM).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::config::TokenConfig;
    use crate::test_dir::TempDir;
    use std::collections::HashMap;

    fn infer(vars: &[(&str, &OsString)], sa: &Path) -> Result<ClientConfig> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), (*v).clone()))
            .collect();
        infer_with(&|k| vars.get(k).cloned(), sa)
    }

    fn kubeconfig(server: &str) -> String {
        format!(
            "clusters:\n- name: c\n  cluster: {{server: '{server}'}}\n\
             users:\n- name: u\n  user: {{token: t}}\n\
             contexts:\n- name: x\n  context: {{cluster: c, user: u, namespace: ns}}\n\
             current-context: x\n"
        )
    }

    #[test]
    fn empty_entries_and_nulls_read_as_absent() {
        let kc = read(
            b"current-context: null\nclusters: ~\nusers:\n- name: anonymous\n  user:\n\
              contexts:\n- name: x\n  context: {cluster: c, user: anonymous, namespace: null}\n",
        )
        .unwrap();
        assert_eq!(kc.current_context, "");
        assert!(kc.clusters.is_empty());
        assert_eq!(kc.users[0].name, "anonymous");
        assert!(kc.users[0].value.token.is_none());
        assert_eq!(kc.contexts[0].value.user, "anonymous");
        assert_eq!(kc.contexts[0].value.namespace, None);
        let err = read(b"users:\n- user: {token: t}\n").err().unwrap();
        assert!(err.contains("missing field `name`"), "{err}");
        let err = read(b"clusters:\n- name: c\n  cluster: {insecure-skip-tls-verify: maybe}\n")
            .err()
            .unwrap();
        assert!(err.contains("expected true or false"), "{err}");
    }

    /// kubectl reads `insecure-skip-tls-verify` with go-yaml v2, whose
    /// booleans are YAML 1.1's: `yes`, `on`, `y` are true.
    #[test]
    fn yaml_1_1_booleans_read_as_kubectl_reads_them() {
        for (word, value) in [
            ("true", true),
            ("yes", true),
            ("Yes", true),
            ("on", true),
            ("ON", true),
            ("y", true),
            ("false", false),
            ("no", false),
            ("Off", false),
            ("n", false),
        ] {
            let text =
                format!("clusters:\n- name: c\n  cluster: {{insecure-skip-tls-verify: {word}}}\n");
            let kc = read(text.as_bytes()).unwrap_or_else(|e| panic!("{word}: {e}"));
            assert_eq!(
                kc.clusters[0].value.insecure_skip_tls_verify, value,
                "{word}"
            );
        }
    }

    /// clientcmd tests each field's length: an empty string is no value,
    /// and a user's `tokenFile` wins over its `token` (client-go reads the
    /// file on each request, the inline token standing in only while the
    /// file cannot be read).
    #[test]
    fn token_file_wins_over_token_and_empty_fields_are_absent_as_in_clientcmd() {
        let dir = TempDir::new();
        dir.write(
            "ca.pem",
            include_bytes!("../../fixtures/tls/ca.pem").as_slice(),
        );
        dir.write("tok", "file-token\n");
        let load = |cluster: &str, user: &str| {
            let path = dir.write(
                "config",
                format!(
                    "clusters:\n- name: c\n  cluster: {{server: 'https://h:1', certificate-authority: ca.pem{cluster}}}\n\
                     users:\n- name: u\n  user: {user}\n\
                     contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
                ),
            );
            ClientConfig::from_kubeconfig(path, None).unwrap_or_else(|e| panic!("{user}: {e}"))
        };
        let file = |cfg: &ClientConfig| match &cfg.token {
            TokenConfig::File(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()),
            _ => None,
        };
        assert_eq!(
            file(&load("", "{token: inline, tokenFile: tok}")),
            Some("tok".into())
        );
        assert_eq!(
            file(&load("", "{token: '', tokenFile: tok}")),
            Some("tok".into())
        );
        let cfg = load("", "{token: inline, tokenFile: /nonexistent/tok}");
        assert!(matches!(&cfg.token, TokenConfig::Static(t) if t == "inline"));

        let cfg = load(
            ", certificate-authority-data: '', tls-server-name: '', proxy-url: ''",
            "{token: t, tokenFile: '', client-certificate: '', client-key: '', \
             client-certificate-data: '', client-key-data: '', username: '', password: '', \
             as: '', as-uid: ''}",
        );
        assert!(matches!(&cfg.token, TokenConfig::Static(t) if t == "t"));
        assert!(cfg.ca_pem.is_some() && cfg.client_identity.is_none());
        assert!(cfg.impersonate.is_none() && cfg.tls_server_name.is_none());
        assert_eq!(
            format!("{:?}", cfg.proxy),
            format!("{:?}", ClientConfig::new("https://h:1").proxy)
        );
    }

    /// `provideClusterInfo` hands the plugin what client-go's
    /// `ConfigToExecCluster` does (seen in kubectl 1.32's
    /// `KUBERNETES_EXEC_INFO`): the CA as data also when the kubeconfig
    /// names a file, `tls-server-name`, `proxy-url`, and the cluster's
    /// `client.authentication.k8s.io/exec` extension as `config`.
    #[test]
    fn an_exec_plugin_gets_the_cluster_info_kubectl_gives_it() {
        let dir = TempDir::new();
        let ca = include_bytes!("../../fixtures/tls/ca.pem");
        dir.write("ca.pem", ca.as_slice());
        let path = dir.write(
            "config",
            "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n    certificate-authority: ca.pem\n\
             \x20   tls-server-name: api.internal\n    proxy-url: http://proxy:3128\n\
             \x20   extensions:\n    - name: other\n      extension: {x: 1}\n\
             \x20   - name: client.authentication.k8s.io/exec\n      extension: {audience: my-aud}\n\
             users:\n- name: u\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: p,\n\
             \x20     interactiveMode: Never, provideClusterInfo: true}\n\
             contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
        );
        let cfg = ClientConfig::from_kubeconfig(path, None).unwrap();
        let TokenConfig::Exec(plugin) = &cfg.token else {
            panic!("{cfg:?}")
        };
        let cluster = plugin.cluster.as_ref().unwrap();
        assert_eq!(cluster["server"], "https://h:1");
        assert_eq!(cluster["tls-server-name"], "api.internal");
        assert_eq!(cluster["proxy-url"], "http://proxy:3128");
        assert_eq!(cluster["config"], serde_json::json!({"audience": "my-aud"}));
        let data = cluster["certificate-authority-data"].as_str().unwrap();
        assert_eq!(base64::decode(data).unwrap(), ca.as_slice());
    }

    /// Relative paths are joined and cleaned lexically, as Go's
    /// `filepath.Join` does for client-go: a missing folder before `..`
    /// does not matter.
    #[test]
    fn relative_paths_are_cleaned_as_go_cleans_them() {
        for (base, path, joined) in [
            ("/k", "sub/../token", "/k/token"),
            ("/k/a", "../../../t", "/t"),
            ("/k", "./a/./b", "/k/a/b"),
            ("", "sub/../t", "t"),
            ("", "../t", "../t"),
            ("rel", "../../t", "../t"),
            ("", "a/..", "."),
        ] {
            assert_eq!(
                join_clean(Path::new(base), Path::new(path)),
                PathBuf::from(joined),
                "{base} + {path}"
            );
        }
    }

    /// kubectl's order, as seen running kubectl 1.32 beside the crate
    /// (`tests/kubectl_fidelity.rs`): a kubeconfig that leads to a server,
    /// in a pod too; else the pod's service account; else an error saying
    /// what each lacked.
    #[test]
    fn infer_takes_the_kubeconfig_first_then_the_pod_as_kubectl_does() {
        let dir = TempDir::new();
        let sa = dir.0.join("sa");
        dir.write("sa/token", "tok");
        dir.write(
            "sa/ca.crt",
            include_bytes!("../../fixtures/tls/ca.pem").as_slice(),
        );
        dir.write("sa/namespace", "pod-ns");
        dir.write("home/.kube/config", kubeconfig("https://home:1"));
        let first = dir.write("first", kubeconfig("https://first:1"));
        let empty = dir.write("empty", "").into_os_string();
        let no_current = dir
            .write(
                "no-current",
                kubeconfig("https://x:1").replace("current-context: x\n", ""),
            )
            .into_os_string();
        let no_server = dir
            .write(
                "no-server",
                kubeconfig("https://x:1").replace("server: 'https://x:1'", "server: ''"),
            )
            .into_os_string();
        let names_none = dir
            .write(
                "names-none",
                kubeconfig("https://x:1").replace("current-context: x", "current-context: nope"),
            )
            .into_os_string();
        let home = dir.0.join("home").into_os_string();
        let nowhere = dir.0.join("nowhere").into_os_string();
        let absent = dir.0.join("absent").into_os_string();
        let list = std::env::join_paths([&absent, first.as_os_str()]).unwrap();
        let (host, port) = (OsString::from("fd00::1"), OsString::from("6443"));
        let pod = [
            ("KUBERNETES_SERVICE_HOST", &host),
            ("KUBERNETES_SERVICE_PORT", &port),
        ];
        fn with<'a>(
            pod: &[(&'static str, &'a OsString)],
            more: &[(&'static str, &'a OsString)],
        ) -> Vec<(&'static str, &'a OsString)> {
            [pod, more].concat()
        }
        let url = |vars: &[(&str, &OsString)]| infer(vars, &sa).map(|c| c.base_url().to_string());
        let pod_url = "https://[fd00::1]:6443".to_string();

        // In a pod, an explicit $KUBECONFIG wins (the bug of issue 54: the
        // service account had won), and so does ~/.kube/config.
        let cfg = infer(&with(&pod, &[("KUBECONFIG", &list), ("HOME", &home)]), &sa).unwrap();
        assert_eq!(cfg.base_url(), "https://first:1");
        assert_eq!(cfg.namespace(), Some("ns"));
        assert_eq!(
            url(&with(&pod, &[("HOME", &home)])).unwrap(),
            "https://home:1"
        );

        // A kubeconfig that is missing or leads nowhere gives way to the
        // pod; with $KUBECONFIG set, ~/.kube/config is not read.
        for kubeconfig in [&absent, &empty, &no_current, &no_server] {
            let cfg = infer(
                &with(&pod, &[("KUBECONFIG", kubeconfig), ("HOME", &home)]),
                &sa,
            )
            .unwrap();
            assert_eq!(cfg.base_url(), pod_url, "{kubeconfig:?}");
            assert_eq!(cfg.namespace(), Some("pod-ns"));
        }
        assert_eq!(url(&with(&pod, &[("HOME", &nowhere)])).unwrap(), pod_url);
        // No HOME and no KUBECONFIG (a bare container): the pod still.
        assert_eq!(url(&with(&pod, &[])).unwrap(), pod_url);
        // A current context that names no context is refused, as kubectl refuses it.
        let err = url(&with(&pod, &[("KUBECONFIG", &names_none)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no context named \"nope\""), "{err}");

        // Outside a pod: the kubeconfig, else an error naming both.
        let cfg = infer(&[("KUBECONFIG", &list), ("HOME", &home)], &sa).unwrap();
        assert_eq!(cfg.base_url(), "https://first:1");
        assert_eq!(url(&[("HOME", &home)]).unwrap(), "https://home:1");
        let err = url(&[("HOME", &nowhere)]).unwrap_err().to_string();
        assert!(
            err.contains("not in a cluster (KUBERNETES_SERVICE_HOST is not set)")
                && err.contains("no kubeconfig at")
                && err.contains("nowhere"),
            "{err}"
        );
        let err = url(&[]).unwrap_err().to_string();
        assert!(err.contains("neither KUBECONFIG nor HOME"), "{err}");
        let err = url(&[("KUBECONFIG", &no_current)]).unwrap_err().to_string();
        assert!(
            err.contains("no current-context") && err.contains("not in a cluster"),
            "{err}"
        );

        // The service named but no token mounted (client-go's in-cluster
        // check wants the file): not a pod, as kubectl judges it.
        let no_sa = dir.0.join("no-sa");
        let err = infer(&pod, &no_sa).unwrap_err().to_string();
        assert!(
            err.contains("no service-account token at") && err.contains("no-sa"),
            "{err}"
        );
        let err = infer(
            &[("KUBERNETES_SERVICE_HOST", &host), ("HOME", &nowhere)],
            &sa,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("KUBERNETES_SERVICE_PORT is not set"), "{err}");
    }

    /// The process's resident set now and at its peak since the last reset (KiB).
    fn rss_kib() -> (u64, u64) {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let field = |name: &str| -> u64 {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// A kubeconfig as cloud CLIs write them, `entries` clusters, users and
    /// contexts, each cluster with 1.1 KiB of CA data: ~2.4 KiB an entry.
    pub(crate) fn realistic_kubeconfig(entries: usize) -> String {
        let ca = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t".repeat(32);
        let mut out = String::from("apiVersion: v1\nclusters:\n");
        for i in 0..entries {
            out += &format!(
                "- cluster:\n    certificate-authority-data: {ca}\n    server: https://10.{}.{}.1:6443\n  name: cluster-{i}\n",
                i / 250, i % 250
            );
        }
        out += "contexts:\n";
        for i in 0..entries {
            out += &format!(
                "- context:\n    cluster: cluster-{i}\n    namespace: team-{i}\n    user: user-{i}\n  name: context-{i}\n"
            );
        }
        out += "current-context: context-0\nkind: Config\npreferences: {}\nusers:\n";
        for i in 0..entries {
            out += &format!(
                "- name: user-{i}\n  user:\n    token: eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.{}.sig-{i}\n",
                "eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdDpkZWZhdWx0In0".repeat(4)
            );
        }
        out
    }

    /// 5,000 contexts named as gcloud names them, each naming its cluster
    /// and user: 1 MiB of small entries (a budget estimated per entry once
    /// refused files like it).
    pub(crate) fn minimal_contexts(n: usize) -> String {
        let name = |i: usize| format!("gke_my-project-123456_europe-west1-b_cluster-{i:05}");
        let mut out = format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.0.0.1\n  name: {}\n\
             users:\n- name: {}\n  user:\n    token: t\ncurrent-context: {}\ncontexts:\n",
            name(0),
            name(0),
            name(0)
        );
        for i in 0..n {
            out += &format!(
                "- context:\n    cluster: {}\n    user: {}\n  name: {}\n",
                name(i),
                name(i),
                name(i)
            );
        }
        out
    }

    /// Documents of about `size` bytes made to cost memory (one-character
    /// entries, tiny maps, long strings, anchors and aliases), each where
    /// the reader keeps what it reads unless named "unused": each must be
    /// read within the bound or refused.
    fn adversarial(size: usize) -> Vec<(&'static str, String)> {
        // `head`, items `item(i)` joined by `sep` up to `size`, `tail`.
        let numbered = |head: &str, item: &dyn Fn(usize) -> String, sep: &str, tail: &str| {
            let mut out = head.to_string();
            for i in 0.. {
                let item = item(i);
                if out.len() + item.len() + sep.len() + tail.len() > size {
                    break;
                }
                if i > 0 {
                    out += sep;
                }
                out += &item;
            }
            out + tail
        };
        let fill = |head: &str, item: &str, sep: &str, tail: &str| {
            numbered(head, &|_| item.to_string(), sep, tail)
        };
        let user = "users:\n- name: u\n  user:\n    as: me\n";
        let extension = "clusters: [{name: c, cluster: {extensions: [{name: e, extension: ";
        let base64 = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t";
        let pad = |text: String| {
            let n = size.saturating_sub(text.len()) / 2;
            text + &"#\n".repeat(n)
        };
        // An anchored list of one-character entries, aliased by two users:
        // what aliases copy is then 1.5 times the file's size, under their
        // bound of twice; and 1 MiB of CA data aliased by six clusters.
        let anchored_list = pad(format!(
            "x: &a [{}]\nusers:\n- {{name: u, user: {{as: me, as-groups: *a}}}}\n\
             - {{name: v, user: {{as: me, as-groups: *a}}}}\n",
            vec!["a"; size / 64].join(",")
        ));
        let anchored_ca = pad(format!(
            "x: &ca {}\nclusters:\n{}",
            base64.repeat((1 << 20) / base64.len()),
            (0..6)
                .map(|i| format!("- name: c{i}\n  cluster:\n    server: https://h\n    certificate-authority-data: *ca\n"))
                .collect::<String>()
        ));
        vec![
            ("`- a` lines, unused", fill("x:\n", "- a", "\n", "\n")),
            (
                "`- a` lines, as-groups",
                fill(&format!("{user}    as-groups:\n"), "    - a", "\n", "\n"),
            ),
            ("one-line `[a,a,...]`, unused", fill("x: [", "a", ",", "]\n")),
            (
                "one-line `[a,a,...]`, as-groups",
                fill("users: [{name: u, user: {as: me, as-groups: [", "a", ",", "]}}]\n"),
            ),
            (
                "one-line `[~,~,...]`, as-groups",
                fill("users: [{name: u, user: {as: me, as-groups: [", "~", ",", "]}}]\n"),
            ),
            (
                "escaped `\"\\x41\"` entries, as-groups",
                fill(&format!("{user}    as-groups: ["), "\"\\x41\"", ",", "]\n"),
            ),
            (
                "one-line `[a,a,...]`, extension",
                fill(&format!("{extension}["), "a", ",", "]}]}}]\n"),
            ),
            (
                "one-line `[[a],[a],...]`, extension",
                fill(&format!("{extension}["), "[a]", ",", "]}]}}]\n"),
            ),
            (
                "an extension of many keys",
                numbered(&format!("{extension}{{"), &|i| format!("k{i}: a"), ",", "}}]}}]\n"),
            ),
            (
                "deep small maps, extension",
                fill(
                    "clusters:\n- name: c\n  cluster:\n    extensions:\n    - name: e\n      extension:\n",
                    "      - {a: {b: {c: {d: e}}}}",
                    "\n",
                    "\n",
                ),
            ),
            (
                "deep small maps, unused",
                fill("preferences:\n", "  - {a: {b: {c: {d: e}}}}", "\n", "\n"),
            ),
            (
                "as-user-extra entries",
                numbered(&format!("{user}    as-user-extra:\n"), &|i| format!("      k{i}: [a]"), "\n", "\n"),
            ),
            (
                "tiny contexts `- name: a`",
                fill("contexts:\n", "- name: a", "\n", "\n"),
            ),
            (
                "tiny users `{name: a}`",
                fill("users: [", "{name: a}", ",", "]\n"),
            ),
            (
                "an anchor on every entry, unused",
                numbered("x:\n", &|i| format!("- &a{i} a"), "\n", "\n"),
            ),
            ("an anchored list aliased twice", anchored_list),
            ("1 MiB of CA data aliased 6 times", anchored_ca),
            (
                "base64 CA data, one line",
                fill(
                    "clusters:\n- name: c\n  cluster:\n    certificate-authority-data: ",
                    base64,
                    "",
                    "\n",
                ),
            ),
            (
                "base64 CA data, block scalar",
                fill(
                    "clusters:\n- name: c\n  cluster:\n    certificate-authority-data: |\n",
                    &format!("      {}", &base64.repeat(3)[..76]),
                    "\n",
                    "\n",
                ),
            ),
            (
                "a token folded over lines, double-quoted",
                fill(&format!("{user}    token: \"a"), "      b", "\n", "\"\n"),
            ),
        ]
    }

    /// Peak memory of reading a kubeconfig, beyond the file's own bytes:
    /// `cargo test --release --lib peak_memory -- --ignored --nocapture`
    /// prints the figures (Linux: VmHWM, reset through
    /// /proc/self/clear_refs) and checks them against the reader's bound,
    /// 4 times the file's size and 1 MiB, for realistic kubeconfigs and
    /// for documents made to cost memory (which are refused). Each file is
    /// measured in a process of its own, so that no memory freed before
    /// skews it.
    #[test]
    #[ignore = "a measurement: it prints figures"]
    fn peak_memory_of_reading_a_kubeconfig() {
        if let Some(path) = std::env::var_os("LEASE_ELECTOR_MEASURE_FILE") {
            let text = std::fs::read(path).unwrap();
            std::fs::write("/proc/self/clear_refs", "5").unwrap();
            let (before, _) = rss_kib();
            let mut memory = heap_budget(text.len());
            let result = read_within(&text, &mut memory)
                .map(|kc| kc.clusters.len() + kc.users.len() + kc.contexts.len());
            let (_, peak) = rss_kib();
            let size = text.len() as f64 / 1024.0;
            let extra = peak.saturating_sub(before) as f64;
            let outcome = match &result {
                Ok(n) => format!("read ({n} entries)"),
                Err(e) if e.contains("in memory to read") => "refused (memory)".into(),
                Err(e) => format!("refused: {e}"),
            };
            eprintln!(
                "MEASURED {:.1} MiB, peak {:.1} MiB beyond the file: {:.2} x (estimated {:.2} x), {outcome}",
                size / 1024.0,
                extra / 1024.0,
                extra / size,
                memory.used() as f64 / 1024.0 / size
            );
            let bound = memory_limit(text.len()) as f64 / 1024.0;
            assert!(extra <= bound, "more than 4 x the file size and 1 MiB");
            return;
        }
        let dir = TempDir::new();
        let realistic = realistic_kubeconfig(2500);
        let as_json =
            serde_json::to_string_pretty(&crate::client::yaml::parse(&realistic).unwrap()).unwrap();
        let mut files = vec![
            ("16 MiB of `#` lines", "#\n".repeat(8 << 20)),
            ("realistic, 2,500 clusters", realistic),
            ("realistic, as kubectl's JSON", as_json),
            ("5,000 minimal contexts", minimal_contexts(5000)),
        ];
        files.extend(adversarial(8 << 20));
        let mut failed = Vec::new();
        for (name, text) in files {
            let path = dir.write("kubeconfig", text);
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "client::kubeconfig::tests::peak_memory_of_reading_a_kubeconfig",
                ])
                .args(["--ignored", "--nocapture"])
                .env("LEASE_ELECTOR_MEASURE_FILE", &path)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let line = stderr
                .lines()
                .find(|l| l.contains("MEASURED"))
                .unwrap_or(&stderr);
            eprintln!("{name}: {}", line.trim_start_matches("MEASURED "));
            if !out.status.success() {
                failed.push(name);
            }
        }
        assert!(failed.is_empty(), "beyond the bound: {failed:?}");
    }

    /// The fields serde reads of each kubeconfig type, and its aliases:
    /// `deserialize_struct` is told them, and this deserializer records
    /// them and stops.
    fn serde_fields<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
        struct Fields(Vec<&'static str>);
        impl<'de> serde::Deserializer<'de> for &mut Fields {
            type Error = serde::de::value::Error;
            fn deserialize_any<V: serde::de::Visitor<'de>>(
                self,
                _: V,
            ) -> std::result::Result<V::Value, Self::Error> {
                Err(serde::de::Error::custom("not a struct"))
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> std::result::Result<V::Value, Self::Error> {
                self.0 = fields.to_vec();
                Err(serde::de::Error::custom("recorded"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
                bytes byte_buf option unit unit_struct newtype_struct seq tuple
                tuple_struct map enum identifier ignored_any
            }
        }
        let mut fields = Fields(Vec::new());
        let _ = T::deserialize(&mut fields);
        let mut names = fields.0;
        names.sort_unstable();
        names
    }

    /// The keys `keep` keeps of a mapping, sorted.
    fn kept(keep: &Keep) -> Vec<&'static str> {
        let Keep::Keys(keys) = keep else {
            panic!("a struct's mapping is kept key by key")
        };
        let mut names: Vec<_> = keys.iter().map(|(k, _)| *k).collect();
        names.sort_unstable();
        names
    }

    /// What `keep` keeps under `key`.
    fn under(keep: &'static Keep, key: &str) -> &'static Keep {
        let Keep::Keys(keys) = keep else {
            panic!("{key}: kept whole")
        };
        keys.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, c)| c)
            .unwrap()
    }

    /// The reader stores exactly the keys the kubeconfig types read (a
    /// field left out of `KUBECONFIG` would read as absent, silently): a
    /// field added to a type fails this test until it is kept.
    #[test]
    fn the_reader_keeps_every_field_the_types_read() {
        let clusters = under(&KUBECONFIG, "clusters");
        let users = under(&KUBECONFIG, "users");
        let contexts = under(&KUBECONFIG, "contexts");
        let exec = under(&USER, "exec");
        for (what, fields, keep) in [
            ("kubeconfig", serde_fields::<KubeConfig>(), &KUBECONFIG),
            ("named entry", serde_fields::<Named<Cluster>>(), clusters),
            ("named entry", serde_fields::<Named<User>>(), users),
            ("named entry", serde_fields::<Named<Context>>(), contexts),
            (
                "cluster",
                serde_fields::<Cluster>(),
                under(clusters, "cluster"),
            ),
            (
                "extension",
                serde_fields::<Extension>(),
                under(&CLUSTER, "extensions"),
            ),
            ("user", serde_fields::<User>(), under(users, "user")),
            ("exec", serde_fields::<Exec>(), exec),
            ("exec env", serde_fields::<EnvVar>(), under(exec, "env")),
            (
                "context",
                serde_fields::<Context>(),
                under(contexts, "context"),
            ),
        ] {
            assert!(!fields.is_empty(), "{what}: no fields recorded");
            assert_eq!(fields, kept(keep), "{what}");
        }
    }
}
