//! Where the operator's builds run, chosen once per process.
//!
//! In a cluster (deploy/all, deploy/<component>, the OLM bundles) they run in the renderer pod
//! ([`kubeflow_manifests::remote`]), and the operator signs its requests with a key it keeps in a
//! Secret of its own namespace: made here the first time, read back afterwards, never replaced
//! (a Secret that does not hold a valid key pair is reported). The renderer's pods take the public
//! half from the same Secret. Elsewhere (a host process, `make demo`, the tests) the renderer named
//! by `KFOP_RENDERER_URL` with the seed in `KFOP_RENDERER_NKEY_FILE`, else kustomize here, in the
//! kernel sandbox.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kubeflow_manifests::remote::{CALLER_PUBLIC_KEY, CALLER_SEED_KEY, CallerKey};
use kubeflow_manifests::{RemoteRenderer, Renderer};

static RENDERER: tokio::sync::OnceCell<Renderer> = tokio::sync::OnceCell::const_new();

/// Sets the renderer every build uses (the operator's `main`, from the caller Secret); once.
pub fn set_renderer(renderer: Renderer) -> Result<(), String> {
    RENDERER.set(renderer).map_err(|_| "the renderer is already chosen".to_string())
}

/// The renderer every build uses: the one [`set_renderer`] set, else the one
/// [`Renderer::locate`] finds (looked for again after a failure, kept after a success).
pub async fn renderer(work_root: std::path::PathBuf) -> Result<&'static Renderer, String> {
    RENDERER
        .get_or_try_init(|| async move {
            let (renderer, no_v5) = Renderer::locate(work_root).await?;
            if let Some(e) = no_v5 {
                tracing::info!(error = %e, "no kustomize v5: the packages that need it fail, each saying so");
            }
            Ok(renderer)
        })
        .await
}

/// The caller key in Secret `name` of `namespace`: read when it exists, else made and stored
/// there (by whichever replica comes first; the other reads that one).
pub async fn caller_key(client: &kube::Client, namespace: &str, name: &str) -> Result<CallerKey, String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let full = format!("{namespace}/{name}");
    for _ in 0..2 {
        if let Some(secret) = secrets.get_opt(name).await.map_err(|e| format!("reading Secret {full}: {e}"))? {
            let data = secret.data.unwrap_or_default();
            return CallerKey::from_secret_data(&full, data.get(CALLER_SEED_KEY).map(|b| b.0.as_slice()), data.get(CALLER_PUBLIC_KEY).map(|b| b.0.as_slice()));
        }
        let key = CallerKey::generate();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                labels: Some([("app.kubernetes.io/part-of".to_string(), "kubeflow-operator".to_string())].into()),
                ..Default::default()
            },
            string_data: Some([(CALLER_SEED_KEY.to_string(), key.seed().to_string()), (CALLER_PUBLIC_KEY.to_string(), key.public_key().to_string())].into()),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(secret = %full, caller = key.public_key(), "made the renderer's caller key");
                return Ok(key);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => return Err(format!("creating Secret {full}: {e}")),
        }
    }
    Err(format!("Secret {full} was made and is gone again"))
}

/// The renderer at `url`, signing with the key in Secret `secret` of the operator's namespace
/// (`POD_NAMESPACE`, else the client's), retried while the API server does not answer (a minute
/// or so), so that a pod that cannot reach it restarts and says why.
pub async fn remote_from_secret(url: &str, secret: &str, work_root: std::path::PathBuf) -> Result<Renderer, String> {
    let client = kube::Client::try_default().await.map_err(|e| format!("cannot build a Kubernetes client: {e}"))?;
    let namespace = std::env::var("POD_NAMESPACE").ok().filter(|n| !n.is_empty()).unwrap_or_else(|| client.default_namespace().to_string());
    let mut delays = operator_runtime::retry::exponential(std::time::Duration::from_millis(500), std::time::Duration::from_secs(15));
    delays.max_elapsed_time = Some(std::time::Duration::from_secs(60));
    let key = loop {
        match caller_key(&client, &namespace, secret).await {
            Ok(key) => break key,
            Err(e) => match backoff::backoff::Backoff::next_backoff(&mut delays) {
                Some(delay) => {
                    tracing::warn!(error = %e, "the renderer's caller key; trying again");
                    tokio::time::sleep(delay).await;
                }
                None => return Err(e),
            },
        }
    };
    Renderer::remote(RemoteRenderer::new(url, key.seed())?, work_root)
}
