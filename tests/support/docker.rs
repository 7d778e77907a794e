//! The private Docker daemon `scripts/docker/up.sh` starts: the image built from this
//! build's binary (`scripts/image/build.sh`), and a Pod template of an installed chart run
//! as a container the way a kubelet would run it (host network: everything stays on
//! loopback).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

use super::{k8s::Cluster, repo_path, unique_name};

/// The running daemon; panics with instructions when it is not there.
#[derive(Debug, Clone)]
pub struct Docker {
    /// `unix://…` of the private daemon.
    pub host: String,
}

/// An image a test built ([`Docker::image_of_this_build`]), removed when dropped.
#[derive(Debug)]
pub struct TestImage {
    /// `name:tag`.
    pub name: String,
    docker: Docker,
}

impl Drop for TestImage {
    fn drop(&mut self) {
        let _ = self.docker.cli(&["rmi", "-f", &self.name]);
    }
}

pub fn docker() -> Docker {
    let host = std::env::var("DOCKER_HOST").unwrap_or_else(|_| {
        panic!(
            "DOCKER_HOST is not set: the private dockerd is not running. Start it with \
             scripts/docker/up.sh and `source .cache/docker/env` (scripts/test.sh does both)"
        )
    });
    let d = Docker { host };
    if let Err(e) = d.cli(&["version", "--format", "{{.Server.Version}}"]) {
        panic!("dockerd at {} does not answer (scripts/docker/up.sh starts it): {e}", d.host);
    }
    d
}

impl Docker {
    /// `docker ARGS…` against the private daemon: stdout, or stderr as the error.
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("docker")
            .env("DOCKER_HOST", &self.host)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run docker: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!("docker {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// The image of this build's `kubefacts` binary, built by `scripts/image/build.sh
    /// --binary` (the Dockerfile's `prebuilt` target on the Debian base) under a name of this
    /// process's own, and removed again when the returned value drops (every run left one
    /// behind before).
    pub fn image_of_this_build(&self) -> TestImage {
        let name = format!("kubefacts:test-{}", std::process::id());
        let out = Command::new(repo_path("scripts/image/build.sh"))
            .args(["--quiet", "--binary", env!("CARGO_BIN_EXE_kubefacts")])
            .env("DOCKER_HOST", &self.host)
            .env("KUBEFACTS_IMAGE", &name)
            .output()
            .expect("cannot run scripts/image/build.sh");
        assert!(
            out.status.success(),
            "scripts/image/build.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        TestImage { name, docker: self.clone() }
    }

    /// Starts a container; it is removed when the returned value drops.
    pub fn run(&self, spec: &ContainerSpec) -> Container {
        let args = spec.run_args(&["-d"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.cli(&args).unwrap_or_else(|e| panic!("starting container {}: {e}", spec.name));
        Container { name: spec.name.clone(), docker: self.clone() }
    }

    /// Runs a container to its end (removed after): its stdout, or a panic with its output.
    pub fn run_to_end(&self, spec: &ContainerSpec) -> String {
        let args = spec.run_args(&["--rm"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.cli(&args).unwrap_or_else(|e| panic!("container {}: {e}", spec.name))
    }
}

impl ContainerSpec {
    /// `docker run` with `extra` flags for this spec.
    fn run_args(&self, extra: &[&str]) -> Vec<String> {
        let spec = self;
        let mut args: Vec<String> = ["run", "--network", "host", "--name", &spec.name]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        if let Some(user) = &spec.user {
            args.extend(["--user".into(), user.clone()]);
        }
        if spec.read_only {
            args.push("--read-only".into());
        }
        if spec.drop_all_capabilities {
            args.extend(["--cap-drop".into(), "ALL".into()]);
        }
        if spec.no_new_privileges {
            args.extend(["--security-opt".into(), "no-new-privileges".into()]);
        }
        for (k, v) in &spec.env {
            args.extend(["-e".into(), format!("{k}={v}")]);
        }
        for (host, path) in &spec.mounts {
            args.extend(["-v".into(), format!("{}:{path}:ro", host.display())]);
        }
        for path in &spec.tmpfs {
            args.extend(["--tmpfs".into(), path.clone()]);
        }
        args.push(spec.image.clone());
        args.extend(spec.args.iter().cloned());
        args
    }
}

/// What `docker run` gets.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    /// After the image's entrypoint (`kubefacts`).
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Read-only bind mounts: host folder → path in the container.
    pub mounts: Vec<(PathBuf, String)>,
    /// `emptyDir` volumes.
    pub tmpfs: Vec<String>,
    /// `uid:gid`.
    pub user: Option<String>,
    pub read_only: bool,
    pub drop_all_capabilities: bool,
    pub no_new_privileges: bool,
}

/// A running container, removed (`docker rm -f`) on drop.
#[derive(Debug)]
pub struct Container {
    pub name: String,
    docker: Docker,
}

impl Container {
    /// Its stdout and stderr so far.
    pub fn logs(&self) -> String {
        let out = Command::new("docker")
            .env("DOCKER_HOST", &self.docker.host)
            .args(["logs", &self.name])
            .output()
            .map(|o| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
            .unwrap_or_else(|e| format!("<docker logs {}: {e}>", self.name));
        format!("----- container {} -----\n{out}", self.name)
    }

    /// Whether it still runs.
    pub fn running(&self) -> bool {
        self.docker
            .cli(&["inspect", "--format", "{{.State.Running}}", &self.name])
            .is_ok_and(|s| s.trim() == "true")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.docker.cli(&["rm", "-f", &self.name]);
    }
}

/// Where a Pod of a template runs: its name and namespace, and its ServiceAccount's token.
pub struct PodContext<'a> {
    pub cluster: &'a Cluster,
    pub name: String,
    pub namespace: String,
    /// A folder for the Pod's volumes (ConfigMaps, Secrets, the ServiceAccount token).
    pub dir: &'a Path,
}

/// The first container of `template` (a Deployment's `spec.template`) as the kubelet would
/// run it with `image`: its args and env (`fieldRef` of the Pod's name and namespace resolved,
/// `secretKeyRef` read from the API), its ConfigMap, Secret and emptyDir volumes, the
/// ServiceAccount's token where in-cluster clients look for it, and its security context.
pub fn container_of_template(template: &Value, image: &str, pod: &PodContext<'_>) -> ContainerSpec {
    let spec = &template["spec"];
    let container = &spec["containers"][0];
    let name = container["name"].as_str().expect("a container name");
    let mut out = ContainerSpec {
        name: unique_name(&format!("{}-{name}", pod.name)).to_lowercase().replace('_', "-"),
        image: image.to_owned(),
        args: strings(&container["args"]),
        ..ContainerSpec::default()
    };
    assert!(container["command"].is_null(), "the chart relies on the image's entrypoint: {container}");

    for env in container["env"].as_array().into_iter().flatten() {
        let key = env["name"].as_str().unwrap().to_owned();
        let value = if let Some(v) = env["value"].as_str() {
            v.to_owned()
        } else if let Some(path) = env["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match path {
                "metadata.name" => pod.name.clone(),
                "metadata.namespace" => pod.namespace.clone(),
                other => panic!("fieldRef {other} is not resolved by this test's kubelet"),
            }
        } else if let Some(r) = env["valueFrom"]["secretKeyRef"].as_object() {
            secret_value(pod, r["name"].as_str().unwrap(), r["key"].as_str().unwrap())
        } else {
            panic!("env {env} is not resolved by this test's kubelet")
        };
        out.env.push((key, value));
    }
    // In-cluster configuration: the API server's address and the mounted token.
    let server = pod.cluster.server.trim_start_matches("https://");
    let (host, port) = server.rsplit_once(':').expect("server host:port");
    out.env.push(("KUBERNETES_SERVICE_HOST".into(), host.into()));
    out.env.push(("KUBERNETES_SERVICE_PORT".into(), port.into()));

    let volumes: Vec<&Value> = spec["volumes"].as_array().into_iter().flatten().collect();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let vname = mount["name"].as_str().unwrap();
        let path = mount["mountPath"].as_str().unwrap().to_owned();
        let volume = volumes.iter().find(|v| v["name"] == vname).unwrap_or_else(|| panic!("volume {vname}"));
        let dir = pod.dir.join(format!("volume-{vname}"));
        // subPath: one file (or folder) of the volume at mountPath.
        let host = |dir: PathBuf| match mount["subPath"].as_str() {
            Some(sub) => dir.join(sub),
            None => dir,
        };
        if let Some(cm) = volume["configMap"]["name"].as_str() {
            let data = pod.cluster.get(&["configmap", "-n", &pod.namespace, cm])["data"].clone();
            write_files(
                &dir,
                data.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().into())),
            );
            out.mounts.push((host(dir), path));
        } else if let Some(secret) = volume["secret"]["secretName"].as_str() {
            let data = pod.cluster.get(&["secret", "-n", &pod.namespace, secret])["data"].clone();
            let keys: Vec<String> = data.as_object().unwrap().keys().cloned().collect();
            write_files(
                &dir,
                keys.into_iter().map(|k| (k.clone(), secret_value(pod, secret, &k).into_bytes())),
            );
            out.mounts.push((host(dir), path));
        } else if volume.get("emptyDir").is_some() {
            out.tmpfs.push(path);
        } else {
            panic!("volume {volume} is not mounted by this test's kubelet");
        }
    }
    if spec["automountServiceAccountToken"] != Value::Bool(false) {
        let account = spec["serviceAccountName"].as_str().unwrap_or("default");
        let token =
            pod.cluster.kubectl(&["create", "token", account, "-n", &pod.namespace, "--duration=1h"], None);
        let ca = std::fs::read_to_string(&pod.cluster.ca).unwrap();
        let dir = pod.dir.join("serviceaccount");
        write_files(
            &dir,
            [
                ("token".to_owned(), token.trim().as_bytes().to_vec()),
                ("ca.crt".to_owned(), ca.into_bytes()),
                ("namespace".to_owned(), pod.namespace.clone().into_bytes()),
            ]
            .into_iter(),
        );
        out.mounts.push((dir, "/var/run/secrets/kubernetes.io/serviceaccount".into()));
    }

    let pod_ctx = &spec["securityContext"];
    let ctx = &container["securityContext"];
    let field = |k: &str| if ctx[k].is_null() { pod_ctx[k].clone() } else { ctx[k].clone() };
    if let Some(uid) = field("runAsUser").as_i64() {
        let gid = field("runAsGroup").as_i64().unwrap_or(uid);
        out.user = Some(format!("{uid}:{gid}"));
    }
    out.read_only = ctx["readOnlyRootFilesystem"] == Value::Bool(true);
    out.no_new_privileges = ctx["allowPrivilegeEscalation"] == Value::Bool(false);
    out.drop_all_capabilities =
        ctx["capabilities"]["drop"].as_array().is_some_and(|d| d.iter().any(|c| c == "ALL"));
    out
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().map(|s| s.as_str().unwrap().to_owned()).collect()
}

/// One key of a Secret, decoded (kubectl's template decodes the base64).
fn secret_value(pod: &PodContext<'_>, name: &str, key: &str) -> String {
    let template = format!("go-template={{{{index .data \"{key}\" | base64decode}}}}");
    pod.cluster.kubectl(&["get", "secret", "-n", &pod.namespace, name, "-o", &template], None)
}

/// Files readable by the container's non-root user (a kubelet's volumes are 0644 by default).
fn write_files(dir: &Path, files: impl Iterator<Item = (String, Vec<u8>)>) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}
