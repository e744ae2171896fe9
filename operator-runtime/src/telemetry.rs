//! Logging and tracing. Logs go to stderr (filter with `RUST_LOG`, default `info`). When
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, every `tracing`
//! span — one per reconcile, with the resource's name and namespace — is also exported over
//! OTLP/HTTP to that collector, under `OTEL_SERVICE_NAME` (default: the operator's name).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, fmt};

/// Flushes exported spans when dropped (keep it alive for the life of `main`).
pub struct TelemetryGuard(Option<SdkTracerProvider>);

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take() {
            let _ = provider.shutdown();
        }
    }
}

fn otlp_configured() -> bool {
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"].iter().any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Installs the global subscriber; `service` names this process in exported traces.
pub fn init(service: &str) -> TelemetryGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter).with(fmt::layer().with_writer(std::io::stderr));
    if !otlp_configured() {
        registry.init();
        return TelemetryGuard(None);
    }
    // The workspace builds reqwest (the OTLP client) with rustls but no default crypto provider;
    // use ring, the provider kube already uses, unless the process chose one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = match opentelemetry_otlp::SpanExporter::builder().with_http().build() {
        Ok(exporter) => exporter,
        Err(e) => {
            registry.init();
            tracing::error!(error = %e, "OTLP exporter not started; traces are not exported");
            return TelemetryGuard(None);
        }
    };
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| service.to_string());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service.clone()).build())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer(service));
    registry.with(layer).init();
    opentelemetry::global::set_tracer_provider(provider.clone());
    TelemetryGuard(Some(provider))
}
