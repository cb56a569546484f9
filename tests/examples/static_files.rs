//! The files themselves: every `examples/**/*.toml`, the config inside the Kubernetes
//! ConfigMap and the config `compose.yaml` mounts pass `tollgate check`; `compose.yaml` names
//! its services, keeps the admin port on the host's loopback and passes the admin token.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::process::{temp_file, tollgate};
use crate::{SECRETS, examples, files, read, yaml_doc};

/// `tollgate check -c path` with the examples' secrets set: its exit status and output.
fn check(path: &Path) -> (bool, String) {
    let out = tollgate()
        .args(["check", "-c"])
        .arg(path)
        .envs(SECRETS.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn assert_checks(path: &Path) {
    let (ok, out) = check(path);
    assert!(ok, "tollgate check -c {} failed:\n{out}", path.display());
}

#[test]
fn every_example_config_passes_check() {
    // Cargo manifests (examples/axum-layer is a package of its own) are no configs.
    let tomls: Vec<_> = files(&examples(), ".toml")
        .into_iter()
        .filter(|p| p.file_name().is_none_or(|n| n != "Cargo.toml"))
        .collect();
    assert!(tomls.len() >= 9, "examples/ lost its configs: {tomls:?}");
    let known: BTreeSet<&str> = SECRETS.iter().map(|(n, _)| *n).collect();
    for path in &tomls {
        // A secret this test does not set would fail `check` with a message about the
        // environment, not the example: say which variable to add to SECRETS.
        let text = read(path);
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            for part in line.split("_env = \"").skip(1) {
                let var = part.split('"').next().unwrap();
                assert!(
                    known.contains(var),
                    "{} names {var}: add it to SECRETS in tests/examples/main.rs",
                    path.display()
                );
            }
        }
        assert_checks(path);
    }
}

#[test]
fn the_configmap_config_and_the_compose_mount_pass_check() {
    // The ConfigMap and its Redis variant.
    for file in [
        "kubernetes/configmap.yaml",
        "kubernetes/redis/configmap.yaml",
    ] {
        let cm = yaml_doc(&examples().join(file));
        assert_eq!(cm["kind"], "ConfigMap");
        let toml = cm["data"]["config.toml"]
            .as_str()
            .expect("the ConfigMap holds config.toml");
        assert_checks(&temp_file("configmap.toml", toml));
    }

    let compose = yaml_doc(&examples().join("compose/compose.yaml"));
    let volumes = compose["services"]["tollgate"]["volumes"]
        .as_array()
        .expect("the tollgate service mounts its config");
    let mount = volumes
        .iter()
        .filter_map(|v| v.as_str())
        .find(|v| v.contains(":/app/config.toml"))
        .expect("a volume at /app/config.toml, the image's config path");
    let source = mount.split(':').next().unwrap();
    assert_checks(&examples().join("compose").join(source));
}

#[test]
fn compose_yaml_names_its_services_and_keeps_admin_on_loopback() {
    let dir = examples().join("compose");
    let compose = yaml_doc(&dir.join("compose.yaml"));
    let services = compose["services"].as_object().expect("services");
    let names: BTreeSet<&str> = services.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["redis", "tollgate", "whoami"]));
    assert!(
        services["whoami"]["image"]
            .as_str()
            .unwrap()
            .starts_with("traefik/whoami")
    );
    assert!(
        services["redis"]["image"]
            .as_str()
            .unwrap()
            .starts_with("redis:")
    );

    let gw = &services["tollgate"];
    let context = dir.join(gw["build"]["context"].as_str().unwrap());
    let dockerfile = context.join(gw["build"]["dockerfile"].as_str().unwrap());
    assert!(
        read(&dockerfile).contains("\"serve\", \"--config\", \"/app/config.toml\""),
        "the image runs /app/config.toml, where compose.yaml mounts the config"
    );
    let cfg: toml::Table = read(&dir.join("tollgate.toml")).parse().unwrap();
    let port = |key: &str| {
        let addr = cfg["server"][key].as_str().unwrap();
        addr.rsplit(':').next().unwrap().to_string()
    };
    let published: Vec<&str> = gw["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let admin = published
        .iter()
        .find(|p| p.ends_with(&format!(":{}", port("admin_listen"))))
        .expect("the admin port is published");
    assert!(
        admin.starts_with("127.0.0.1:"),
        "the admin port is bound to the host's loopback only: {admin}"
    );
    assert!(
        published
            .iter()
            .any(|p| p.ends_with(&format!(":{}", port("listen")))),
        "the proxy port is published: {published:?}"
    );
    // The admin listener binds every interface in the container: it asks for the token,
    // which the service passes from the shell, required (`${VAR:?…}`).
    let token_env = cfg["server"]["admin_token_env"].as_str().unwrap();
    let passed = gw["environment"][token_env].as_str().unwrap_or_default();
    assert!(
        passed.starts_with(&format!("${{{token_env}:?")),
        "compose.yaml passes {token_env}, required: {passed:?}"
    );
    // The upstream and the store are the other two services, by name.
    let upstream = cfg["upstreams"]["whoami"]["urls"][0].as_str().unwrap();
    assert!(upstream.starts_with("http://whoami:"), "{upstream}");
    let store = cfg["store"]["urls"][0].as_str().unwrap();
    assert!(store.starts_with("redis://redis:"), "{store}");
}
