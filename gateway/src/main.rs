//! The `celeriant-gateway` binary: configuration, backend, serve, graceful shutdown; or
//! `verify`, an offline check of an embedded store; or `repair-sequence`, an offline repair of
//! one device's sequence record.

use std::sync::Arc;
use std::time::Duration;

use celeriant_gateway::backend::Backend;
use celeriant_gateway::backend::celeriant::{CeleriantBackend, CeleriantOptions};
use celeriant_gateway::backend::embedded::{EmbeddedOptions, EmbeddedStore, repair, verify};
use celeriant_gateway::config::{AuthMode, BackendKind, Command, Config};
use celeriant_gateway::proxy::TrustedProxies;
use celeriant_gateway::serve::{ServeOptions, fit_to_open_file_limit, serve};
use celeriant_gateway::{AppState, app};
use clap::Parser;

/// jemalloc rather than the system allocator: after a burst of large pages (each page is one
/// buffer of up to a batch's size) glibc's malloc kept the memory (200 pages of 5.6 MB took
/// the resident size from 25 to 206 MB, and it stayed), jemalloc gives it back.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options: freed pages go back to the system about a second after they were freed
/// (`dirty_decay_ms`, without the intermediate "muzzy" stage), and a background thread does it
/// even when the gateway is idle after the burst (no allocation left to trigger the decay).
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

#[tokio::main]
async fn main() {
    celeriant_gateway::log::init();
    let config = Config::parse();
    match config.command {
        Some(Command::Verify) => std::process::exit(verify::run(&config.data_dir)),
        Some(Command::RepairSequence {
            type_id,
            id,
            client,
            dry_run,
        }) => {
            let target = repair::Target {
                org: config.org_id,
                type_id,
                id,
                client,
            };
            std::process::exit(repair::run(&config.data_dir, target, dry_run));
        }
        None => {}
    }
    if let Err(e) = run(config).await {
        eprintln!("celeriant-gateway: {e}");
        std::process::exit(1);
    }
}

async fn run(config: Config) -> Result<(), String> {
    // Refuse a dangerous configuration before opening anything.
    config.check()?;
    let backend: Arc<dyn Backend> = match config.backend {
        BackendKind::Embedded => Arc::new(EmbeddedStore::open(
            &config.data_dir,
            EmbeddedOptions::from_config(&config),
        )?),
        BackendKind::Celeriant => {
            if config.celeriant_addrs.is_empty() {
                return Err("--backend celeriant needs at least one --celeriant-addr".into());
            }
            let most = celeriant_gateway::backend::celeriant::revocations::MAX_REVOCATIONS;
            if config.max_revocations > most {
                return Err(format!(
                    "--max-revocations is at most {most} with --backend celeriant (the whole \
                     list is one Celeriant request)"
                ));
            }
            Arc::new(
                CeleriantBackend::connect(CeleriantOptions {
                    addresses: config.celeriant_addrs.clone(),
                    api_key: config.celeriant_api_key.clone(),
                    request_timeout: Duration::from_millis(config.limits.request_timeout_ms),
                })
                .await?
                .with_watch(
                    Some(config.org_id),
                    Duration::from_secs(config.celeriant_watch_renew_secs),
                )
                .with_org(config.org_id)
                .with_members_ttl(Duration::from_millis(config.members_cache_ms))
                .with_tips_rate(
                    config.limits.rate_per_client,
                    config.limits.burst_per_client,
                ),
            )
        }
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let port_file = config.port_file.clone();
    // From here on `listen` is the bound address (the port chosen for port 0): the CORS
    // layer derives the gateway's own origins from it.
    let config = Config {
        listen: addr,
        ..config
    };
    let limits = config.limits.clone();
    celeriant_gateway::observe::install(&config)?;
    let metrics_listener = match config.ops.metrics_listen {
        Some(at) => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| format!("cannot listen on {at} (--metrics-listen): {e}"))?,
        ),
        None => None,
    };
    let state = AppState::new(config, backend.clone())?;
    if let Some(listener) = metrics_listener {
        let at = listener.local_addr().map_err(|e| e.to_string())?;
        let router = celeriant_gateway::observe::listener_app(state.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "metrics listener stopped");
            }
        });
        tracing::info!("metrics on http://{at}/metrics");
        println!("celeriant-gateway metrics on http://{at}/metrics");
    }
    if state.auth.mode == AuthMode::None {
        tracing::warn!("--auth none: clientId is taken at face value; local experiments only");
    }
    if let Some(faults) = &state.faults {
        let report = faults.report();
        tracing::warn!(seed = report.seed, rates = ?report.rates, "fault injection enabled");
    }
    let options = ServeOptions {
        trusted_proxies: TrustedProxies::new(&state.config.ops.trusted_proxies),
        max_connections: fit_to_open_file_limit(limits.max_connections as usize),
        max_connections_per_ip: limits.max_connections_per_ip as usize,
        header_read_timeout: Duration::from_millis(limits.header_read_timeout_ms),
        idle_timeout: Duration::from_millis(limits.idle_timeout_ms),
        min_page_rate: limits.min_page_rate_bytes_per_sec,
        shutdown_grace: Duration::from_millis(limits.request_timeout_ms) + Duration::from_secs(1),
    };
    if let Some(secret) = state.faults_secret.as_ref().filter(|s| s.generated()) {
        // Handed to whoever started the gateway, before the port file says it is up; never logged.
        match &state.config.faults_secret_out {
            Some(path) => secret.write_to(path)?,
            None => println!(
                "celeriant-gateway faults secret (send it as the {} header): {}",
                celeriant_gateway::auth::faults_secret::HEADER,
                secret.expose()
            ),
        }
    }
    if let Some(path) = port_file {
        std::fs::write(&path, addr.to_string())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    tracing::info!(
        backend = backend.name(),
        max_connections = options.max_connections,
        "celeriant-gateway listening on http://{addr}"
    );
    println!("celeriant-gateway listening on http://{addr}");
    let watch = state.watch.clone();
    let shutdown = async move {
        shutdown_signal().await;
        // Change streams never finish on their own: end them so shutdown does not wait.
        watch.close();
    };
    serve(listener, app(state), options, shutdown).await;
    tracing::info!("celeriant-gateway stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down: finishing requests in progress");
}
