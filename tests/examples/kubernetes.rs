//! The Kubernetes manifests pass `kubernetes-validate --strict` and say what the README
//! promises: non-root, read-only root, probes on the admin port, the token from a Secret,
//! the ConfigMap's config mounted where the pod reads it, the proxy port alone in the
//! Service; the disruption budget lets a drain go on; the Redis variant replaces the
//! ConfigMap the pods mount and names `redis/redis.yaml`'s Service; a stop (readiness 503
//! for `drain_delay`, then `shutdown_grace`) fits in the pod's termination grace period.

use std::process::Command;

use crate::{examples, files, yaml_doc, yaml_docs};

#[test]
fn the_kubernetes_manifests_validate_and_keep_their_promises() {
    let dir = examples().join("kubernetes");
    let manifests = files(&dir, ".yaml");
    let names: Vec<String> = manifests
        .iter()
        .map(|p| p.strip_prefix(&dir).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "configmap.yaml",
            "deployment.yaml",
            "pdb.yaml",
            "redis/configmap.yaml",
            "redis/redis.yaml",
            "service.yaml"
        ],
        "every manifest is validated here: add a new one to this list"
    );
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
    // The admin listener binds the pod's every interface: `check` wants the token.
    let token_env = cfg["server"]["admin_token_env"]
        .as_str()
        .expect("admin_listen is off loopback: the config names admin_token_env");

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

#[test]
fn the_budget_and_the_redis_variant_fit_the_deployment() {
    let dir = examples().join("kubernetes");
    let deploy = yaml_doc(&dir.join("deployment.yaml"));
    let labels = &deploy["spec"]["template"]["metadata"]["labels"];
    let replicas = deploy["spec"]["replicas"].as_u64().unwrap();

    let pdb = yaml_doc(&dir.join("pdb.yaml"));
    assert_eq!(pdb["kind"], "PodDisruptionBudget");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);
    let min = pdb["spec"]["minAvailable"].as_u64().unwrap();
    assert!(
        (1..replicas).contains(&min),
        "one pod keeps serving and a drain can still go on: minAvailable {min} of {replicas}"
    );

    // The variant is the ConfigMap the pods mount, under the same name, with a store.
    let base = yaml_doc(&dir.join("configmap.yaml"));
    let variant = yaml_doc(&dir.join("redis/configmap.yaml"));
    assert_eq!(variant["metadata"]["name"], base["metadata"]["name"]);
    assert_eq!(
        pod_config_map(&deploy),
        variant["metadata"]["name"].as_str().unwrap()
    );
    let cfg: toml::Table = variant["data"]["config.toml"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(cfg["store"]["kind"].as_str(), Some("redis"));
    for (name, p) in cfg["policies"].as_table().unwrap() {
        assert_eq!(p["site"].as_str(), Some("central"), "policies.{name}");
    }
    assert!(cfg["server"]["admin_token_env"].is_str());
    let url = cfg["store"]["urls"][0].as_str().unwrap();
    let (host, port) = url
        .strip_prefix("redis://")
        .and_then(|a| a.split_once(':'))
        .unwrap_or_else(|| panic!("{url}: redis://HOST:PORT"));

    // redis.yaml: the Service the URL names, in front of its Deployment, which only the
    // tollgate pods may reach.
    let docs = yaml_docs(&dir.join("redis/redis.yaml"));
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("redis.yaml has a {k}"))
    };
    let (svc, redis, policy) = (kind("Service"), kind("Deployment"), kind("NetworkPolicy"));
    assert_eq!(svc["metadata"]["name"].as_str(), Some(host));
    assert_eq!(svc["spec"]["ports"][0]["port"].to_string(), port);
    assert_eq!(
        svc["spec"]["selector"],
        redis["spec"]["template"]["metadata"]["labels"]
    );
    let c = &redis["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    let image = c["image"].as_str().unwrap();
    assert!(
        image.split_once(':').is_some_and(|(_, t)| t.contains('.')),
        "{image}: an exact tag"
    );
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        redis["spec"]["template"]["metadata"]["labels"]
    );
    assert_eq!(
        &policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"],
        labels
    );
}

/// The kubelet kills a pod `terminationGracePeriodSeconds` after SIGTERM: a stop takes
/// `drain_delay` + `shutdown_grace`, and the delay must outlast the readiness probe's
/// failing (period × threshold) so the endpoints drop the pod before its listeners close.
#[test]
fn a_stop_fits_in_the_termination_grace_period() {
    let dir = examples().join("kubernetes");
    let deploy = yaml_doc(&dir.join("deployment.yaml"));
    let pod = &deploy["spec"]["template"]["spec"];
    let kill_after = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let probe = &pod["containers"][0]["readinessProbe"];
    let noticed =
        probe["periodSeconds"].as_u64().unwrap() * probe["failureThreshold"].as_u64().unwrap();
    assert!(
        pod["containers"][0]["lifecycle"]["preStop"].is_null(),
        "drain_delay does a preStop sleep's work (and the slim image's shell is no part of it)"
    );
    for file in ["configmap.yaml", "redis/configmap.yaml"] {
        let cm = yaml_doc(&dir.join(file));
        let cfg: toml::Table = cm["data"]["config.toml"].as_str().unwrap().parse().unwrap();
        let secs = |key: &str| {
            let text = cfg["server"][key]
                .as_str()
                .unwrap_or_else(|| panic!("{file}: [server] {key}"));
            humantime::parse_duration(text).unwrap().as_secs()
        };
        let (delay, grace) = (secs("drain_delay"), secs("shutdown_grace"));
        assert!(
            delay >= noticed,
            "{file}: drain_delay {delay}s < the probe's {noticed}s"
        );
        assert!(
            delay + grace < kill_after,
            "{file}: drain_delay {delay}s + shutdown_grace {grace}s >= terminationGracePeriodSeconds {kill_after}"
        );
    }
}

/// The ConfigMap a Deployment's pods mount their config from.
fn pod_config_map(deploy: &serde_json::Value) -> &str {
    deploy["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
        .as_str()
        .unwrap()
}
