//! `lockkeeper serve`: runs Keeper in the foreground until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use lockkeeper_server::{Config, SaslUsers, Server, ServerFiles, SyncMode};

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum SyncFlag {
    Always,
    None,
}

/// Flags mirror ZooKeeper's zoo.cfg settings of the same meaning.
#[derive(clap::Args, Debug)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Port 0 picks a free port (printed at start).
    #[arg(long, default_value = "127.0.0.1:2181")]
    listen: SocketAddr,
    /// Directory for Keeper's data.
    #[arg(long, default_value = "lockkeeper-data")]
    data_dir: PathBuf,
    /// Base time unit in milliseconds; session timeouts are negotiated into 2..20 ticks.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    tick_time: u64,
    /// Lower bound of negotiated session timeouts in ms (default: 2 ticks).
    #[arg(long)]
    min_session_timeout: Option<u64>,
    /// Upper bound of negotiated session timeouts in ms (default: 20 ticks).
    #[arg(long)]
    max_session_timeout: Option<u64>,
    /// Most concurrent connections from one IP address; 0 means no limit.
    #[arg(long, default_value_t = 60)]
    max_client_cnxns: usize,
    /// Largest request frame in bytes (ZooKeeper's jute.maxbuffer).
    #[arg(long, default_value_t = 0xfffff, value_parser = clap::value_parser!(u64).range(1024..=(1 << 30)))]
    jute_maxbuffer: u64,
    /// How often empty container nodes and expired TTL nodes are removed, in ms.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    container_check_interval: u64,
    /// Comma-separated four-letter words to allow (ruok,srvr,stat,mntr,cons,dump,wchs,envi,conf), or "*".
    /// `isro` is always allowed, as ZooKeeper allows it with read-only mode enabled.
    #[arg(
        long = "4lw-whitelist",
        default_value = "srvr,stat,ruok,mntr",
        value_delimiter = ','
    )]
    four_letter_words: Vec<String>,
    /// When the transaction log is synced: "always" (every acknowledged write is on disk) or
    /// "none" (written but never synced: survives a crash of Keeper, not of the machine; for
    /// throwaway test servers).
    #[arg(long, value_enum, default_value = "always")]
    sync: SyncFlag,
    /// Take a snapshot after this many transactions (ZooKeeper's snapCount).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    snap_count: u64,
    /// Snapshots to keep, with the logs needed to recover from the oldest of them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    snap_retain: u64,
    /// The most memory, in bytes, one connection's queued replies and watch events may hold;
    /// past it the connection is closed (its session stays and may re-attach). The default,
    /// 16 MiB, is 16 replies of the largest node data, far more than a client that reads its
    /// socket ever has waiting, and caps what a client that stops reading can cost.
    #[arg(long, default_value_t = 16 << 20, value_parser = clap::value_parser!(u64).range(1..=(1 << 40)))]
    max_queued_bytes: u64,
    /// Connections the kernel may hold before Keeper accepts them (ZooKeeper's
    /// clientPortListenBacklog); the kernel caps it at net.core.somaxconn.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65535))]
    listen_backlog: u32,
    /// Digest of a super user that passes every ACL, as `super:<base64 sha1>`
    /// (ZooKeeper's DigestAuthenticationProvider.superDigest).
    #[arg(long)]
    super_digest: Option<String>,
    /// Serve Prometheus metrics (ZooKeeper's names) at http://ADDR/metrics. Binds only ADDR;
    /// port 0 picks a free port (printed at start). Off unless given.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Serve the metrics over TLS (https://ADDR/metrics) with --tls-cert and --tls-key; with
    /// --tls-client-ca a scraper must present a certificate that CA signed.
    #[arg(long, requires_all = ["metrics_listen", "tls_cert", "tls_key"])]
    metrics_tls: bool,
    /// A JAAS login configuration whose `Server` section lists the users SASL DIGEST-MD5
    /// authenticates, as ZooKeeper reads `java.security.auth.login.config`
    /// (`user_NAME="password"` options); their ids are the `sasl` ACL scheme's.
    #[arg(long, value_name = "FILE")]
    jaas_config: Option<PathBuf>,
    /// Also listen for TLS clients on ADDR (ZooKeeper's secureClientPort); needs --tls-cert and
    /// --tls-key. Port 0 picks a free port (printed at start).
    #[arg(long, value_name = "ADDR", requires_all = ["tls_cert", "tls_key"])]
    secure_listen: Option<SocketAddr>,
    /// The certificate chain (PEM, leaf first) of --secure-listen and --metrics-tls. Read
    /// again on SIGHUP.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1). Read again on SIGHUP.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA certificates (PEM) that sign client certificates: with it, every TLS client must
    /// present one, and its subject is its id under the `x509` ACL scheme. Read again on
    /// SIGHUP.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
}

pub(crate) async fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    for word in &args.four_letter_words {
        if word != "*" && !lockkeeper_server::FOUR_LETTER_WORDS.contains(&word.as_str()) {
            return Err(format!("unknown four-letter word {word:?} in --4lw-whitelist").into());
        }
    }
    if let Some(digest) = &args.super_digest
        && digest.split(':').count() != 2
    {
        return Err("--super-digest must look like super:<base64 sha1>".into());
    }
    let sasl_users = match &args.jaas_config {
        Some(path) => {
            Some(SaslUsers::from_jaas_file(path).map_err(|e| format!("--jaas-config {e}"))?)
        }
        None => None,
    };
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| format!("cannot create data dir {}: {e}", args.data_dir.display()))?;
    let config = Config {
        listen: args.listen,
        data_dir: args.data_dir,
        tick_time: Duration::from_millis(args.tick_time),
        min_session_timeout: args.min_session_timeout.map(Duration::from_millis),
        max_session_timeout: args.max_session_timeout.map(Duration::from_millis),
        max_client_cnxns: args.max_client_cnxns,
        jute_maxbuffer: args.jute_maxbuffer as usize,
        container_check_interval: Duration::from_millis(args.container_check_interval),
        four_letter_words: args.four_letter_words,
        super_digest: args.super_digest,
        sync: match args.sync {
            SyncFlag::Always => SyncMode::Always,
            SyncFlag::None => SyncMode::None,
        },
        snap_count: args.snap_count,
        snap_retain: args.snap_retain as usize,
        max_queued_bytes: args.max_queued_bytes,
        listen_backlog: args.listen_backlog,
        secure_listen: args.secure_listen,
        sasl_users,
        tls: match (args.tls_cert, args.tls_key) {
            (Some(cert), Some(key)) => Some(ServerFiles {
                cert,
                key,
                client_ca: args.tls_client_ca,
            }),
            _ => None,
        },
        ..Config::default()
    };
    // Every start error names what failed: the data dir held by another server (and its pid),
    // the damaged file and offset, or the address that cannot be bound.
    let mut server = Server::start(config)
        .await
        .map_err(|e| format!("cannot start: {e}"))?;
    // Before anything says the server is ready: a stop sent right after must find its handler.
    let stop = shutdown_signal()?;
    let mut reload = reload_signal()?;
    // Before the clients' line, which tells scripts the server is ready.
    if let Some(addr) = server.secure_addr() {
        println!("lockkeeper serving ZooKeeper clients over TLS on {addr}");
    }
    if let Some(addr) = args.metrics_listen {
        let (bound, scheme) = if args.metrics_tls {
            (server.serve_metrics_tls(addr).await, "https")
        } else {
            (server.serve_metrics(addr).await, "http")
        };
        let bound = bound.map_err(|e| format!("cannot start: {e}"))?;
        println!("lockkeeper serving Prometheus metrics on {scheme}://{bound}/metrics");
    }
    println!(
        "lockkeeper serving ZooKeeper clients on {}",
        server.local_addr()
    );
    crate::systemd::notify("READY=1");
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = reload.recv() => {
                // The files are read whole before any is used: a half-written renewal is
                // refused, and the files in use stay.
                match server.reload_tls() {
                    Ok(()) => tracing::info!("SIGHUP: TLS certificate, key and client CA reloaded"),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        tracing::info!("SIGHUP: no TLS files, nothing to reload");
                    }
                    Err(e) => tracing::error!(error = %e, "SIGHUP: TLS files not reloaded; the ones in use stay"),
                }
            }
        }
    }
    crate::systemd::notify("STOPPING=1");
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

/// SIGHUP from now on: reload the TLS files, instead of ending the process.
fn reload_signal() -> std::io::Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
}

/// Handles SIGTERM and SIGINT from now on, instead of their default (ending the process at
/// once); the future resolves at the first of them.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}
