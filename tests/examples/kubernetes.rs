//! The Kubernetes manifests pass `kubernetes-validate --strict` and say what the README
//! promises: non-root, read-only root, probes on the admin port, the token from a Secret,
//! the ConfigMap's config mounted where the pod reads it, the proxy port alone in the Service.

use std::process::Command;

use crate::{examples, files, yaml_doc};

#[test]
fn the_kubernetes_manifests_validate_and_keep_their_promises() {
    let dir = examples().join("kubernetes");
    let manifests = files(&dir, ".yaml");
    assert_eq!(manifests.len(), 3, "{manifests:?}");
    let run = Command::new("kubernetes-validate")
        .arg("--strict")
        .args(&manifests)
        .output();
    let out = match run {
        Ok(out) => out,
        Err(e) => panic!(
            "kubernetes-validate is missing ({e}): pip install kubernetes-validate \
             (scripts/test.sh installs it)"
        ),
    };
    assert!(
        out.status.success(),
        "kubernetes-validate --strict failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The config's own ports and variables, which the manifests must agree with.
    let cm = yaml_doc(&dir.join("configmap.yaml"));
    let cfg: toml::Table = cm["data"]["config.toml"].as_str().unwrap().parse().unwrap();
    let port = |key: &str| -> u64 {
        let addr = cfg["server"][key].as_str().unwrap();
        addr.rsplit(':').next().unwrap().parse().unwrap()
    };
    let (proxy_port, admin_port) = (port("listen"), port("admin_listen"));
    let token_env = cfg["server"]["admin_token_env"].as_str().unwrap();

    let deploy = yaml_doc(&dir.join("deployment.yaml"));
    let pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    for kind in ["requests", "limits"] {
        for what in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][what].is_string(),
                "resources.{kind}.{what}"
            );
        }
    }
    let named_port = |name: &str| -> u64 {
        let ports = c["ports"].as_array().unwrap();
        let p = ports.iter().find(|p| p["name"] == name).unwrap();
        p["containerPort"].as_u64().unwrap()
    };
    assert_eq!(named_port("proxy"), proxy_port);
    assert_eq!(named_port("admin"), admin_port);
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(
            c[probe]["httpGet"]["port"], "admin",
            "{probe} on the admin port"
        );
    }
    let env = c["env"].as_array().unwrap();
    let token = env
        .iter()
        .find(|e| e["name"] == token_env)
        .unwrap_or_else(|| panic!("the container sets {token_env}, the config's admin_token_env"));
    assert!(
        token["valueFrom"]["secretKeyRef"]["name"].is_string(),
        "the admin token comes from a Secret"
    );
    // The config the pod runs is the ConfigMap's.
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let config_path = args[args.iter().position(|a| *a == "--config").unwrap() + 1];
    let mount = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    assert_eq!(config_path, format!("{mount}/config.toml"));
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        cm["metadata"]["name"]
    );

    let svc = yaml_doc(&dir.join("service.yaml"));
    let ports = svc["spec"]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "the Service publishes the proxy port only");
    assert_eq!(ports[0]["targetPort"], "proxy");
    assert_eq!(
        svc["spec"]["selector"],
        deploy["spec"]["template"]["metadata"]["labels"]
    );
}
