//! What the kubelet would give a pod, for running an operator's binary on the host as its pod
//! would run: the environment and mounted files of a container, read from the objects a package or
//! a bundle made.

use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec, Secret};
use kube::Api;

/// Key `key` of Secret `name`, as text (a missing one fails the test).
pub async fn secret_data(secrets: &Api<Secret>, name: &str, key: &str) -> String {
    let secret = secrets.get(name).await.unwrap_or_else(|e| panic!("Secret {name}: {e}"));
    String::from_utf8(secret.data.unwrap()[key].0.clone()).unwrap()
}

/// The files the kubelet would mount for `container` of `pod` (in `namespace`): each mounted
/// volume's ConfigMap or Secret written under `dir/<volume>` (a volume claim: an empty
/// directory). Returns each mount path with its directory.
pub async fn mount_volumes(client: &kube::Client, namespace: &str, pod: &PodSpec, container: &Container, dir: &std::path::Path) -> Vec<(String, std::path::PathBuf)> {
    let mut mounts = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let local = dir.join(&mount.name);
        std::fs::create_dir_all(&local).unwrap();
        let volume = pod.volumes.iter().flatten().find(|v| v.name == mount.name);
        let files: Vec<(String, Vec<u8>)> = match (volume.and_then(|v| v.config_map.as_ref()), volume.and_then(|v| v.secret.as_ref())) {
            (Some(config_map), _) => {
                let data = Api::<ConfigMap>::namespaced(client.clone(), namespace).get(&config_map.name).await.unwrap_or_else(|e| panic!("ConfigMap {}: {e}", config_map.name)).data.unwrap_or_default();
                data.into_iter().map(|(k, v)| (k, v.into_bytes())).collect()
            }
            (_, Some(secret)) => {
                let name = secret.secret_name.clone().unwrap_or_default();
                let found = Api::<Secret>::namespaced(client.clone(), namespace).get_opt(&name).await.unwrap();
                assert!(found.is_some() || secret.optional == Some(true), "Secret {namespace}/{name}, which the pod mounts, is missing");
                found.and_then(|s| s.data).unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()
            }
            _ => Vec::new(),
        };
        for (file, bytes) in files {
            std::fs::write(local.join(file), bytes).unwrap();
        }
        mounts.push((mount.mount_path.clone(), local));
    }
    mounts
}

/// The environment the kubelet would give `container` of pod `pod_name` in `namespace`: values
/// (with `$(VAR)` references to earlier ones), the pod's name and namespace, ConfigMap and
/// Secret keys (a missing one fails the test, as the pod would not start).
pub async fn container_env(client: &kube::Client, namespace: &str, container: &Container, pod_name: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => env.iter().fold(value.clone(), |v, (name, earlier)| v.replace(&format!("$({name})"), earlier)),
            (None, Some(from)) => match (&from.field_ref, &from.config_map_key_ref, &from.secret_key_ref) {
                (Some(field), _, _) => match field.field_path.as_str() {
                    "metadata.name" => pod_name.to_string(),
                    "metadata.namespace" => namespace.to_string(),
                    other => panic!("{}: field {other} is not emulated", var.name),
                },
                (_, Some(key), _) => {
                    let data = Api::<ConfigMap>::namespaced(client.clone(), namespace).get(&key.name).await.unwrap_or_else(|e| panic!("{}: ConfigMap {}: {e}", var.name, key.name)).data.unwrap_or_default();
                    data.get(&key.key).unwrap_or_else(|| panic!("{}: ConfigMap {} has no {}", var.name, key.name, key.key)).clone()
                }
                (_, _, Some(key)) => secret_data(&Api::<Secret>::namespaced(client.clone(), namespace), &key.name, &key.key).await,
                _ => panic!("{}: this source is not emulated", var.name),
            },
            (None, None) => String::new(),
        };
        env.push((var.name.clone(), value));
    }
    env
}

/// The first container of a pod template, with the template's pod spec.
pub fn first_container(template: &PodTemplateSpec) -> (PodSpec, Container) {
    let pod = template.spec.clone().unwrap();
    let container = pod.containers[0].clone();
    (pod, container)
}
