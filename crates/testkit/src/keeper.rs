//! Keeper started in-process for one test.
//!
//! The server runs on a thread of its own with its own tokio runtime, so `Keeper::start()` is an
//! ordinary blocking call that works the same from a `#[test]` and from a `#[tokio::test]`
//! (whose runtime may have a single thread that must not be blocked by the server's tasks).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lockkeeper_server::{Config, Server};
use tempfile::TempDir;
use tokio::sync::oneshot;

use crate::TestServer;
use crate::ports::free_port;

/// How long a start or a shutdown may take before the test is told something is stuck.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Ports [`Keeper::start`] tries before it gives up.
const START_PORTS: usize = 8;
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A running in-process Keeper, stopped (and its thread joined) when dropped.
pub struct Keeper {
    addr: SocketAddr,
    /// Boxed: a `Keeper` stays small beside the other servers in the tests' enums.
    config: Box<Config>,
    running: Mutex<Option<Running>>,
    /// The data directory made by [`Keeper::start`]: held, never read; dropping it (after the
    /// server stops) removes the directory.
    _data: Option<TempDir>,
}

struct Running {
    shutdown: oneshot::Sender<()>,
    thread: JoinHandle<()>,
}

impl Keeper {
    /// The configuration tests use: a free loopback port, `data_dir`, 2 s ticks, containers and
    /// TTL nodes reaped every second, every four-letter word allowed.
    ///
    /// The port is a reserved one from [`free_port`], not port 0: [`Keeper::restart`] binds the
    /// same port again, and a port of the kernel's ephemeral range may meanwhile become some
    /// client connection's local port.
    pub fn test_config(data_dir: &Path) -> Config {
        Config {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())),
            data_dir: data_dir.to_path_buf(),
            tick_time: Duration::from_millis(2000),
            container_check_interval: Duration::from_secs(1),
            four_letter_words: vec!["*".to_string()],
            // Tests restart Keeper, they do not power off the machine: no fsync needed.
            sync: lockkeeper_server::SyncMode::None,
            ..Config::default()
        }
    }

    /// Starts Keeper with [`Keeper::test_config`] on a fresh temporary data directory.
    pub fn start() -> Keeper {
        Keeper::start_configured(|_| {})
    }

    /// [`Keeper::start`] with a secure listener beside the plain one, on a free port, serving
    /// TLS with `tls` ([`Keeper::secure_addr`]).
    pub fn start_tls(tls: lockkeeper_server::ServerFiles) -> Keeper {
        Keeper::start_configured(|config| {
            config.secure_listen = Some(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())));
            config.tls = Some(tls.clone());
        })
    }

    /// [`Keeper::start`] with [`Keeper::test_config`] changed by `edit` (which may run more
    /// than once: a start on a port someone else took is tried again on another).
    pub fn start_configured(edit: impl Fn(&mut Config)) -> Keeper {
        let data = tempfile::Builder::new()
            .prefix("lockkeeper-keeper-")
            .tempdir()
            .expect("create a temporary data directory for Keeper");
        // The port was free when it was picked, but a program that knows nothing of the test
        // kit's reservations may bind it first: another port will do.
        for _ in 0..START_PORTS {
            let mut config = Keeper::test_config(data.path());
            edit(&mut config);
            match try_launch(config.clone()) {
                Ok((addr, running)) => {
                    return Keeper {
                        addr,
                        config: Box::new(config),
                        running: Mutex::new(Some(running)),
                        _data: Some(data),
                    };
                }
                Err(LaunchError::AddrInUse(e)) => {
                    eprintln!("Keeper on {}: {e}; trying another port", config.listen);
                }
                Err(e) => panic!("Keeper failed to start: {e}"),
            }
        }
        panic!("Keeper failed to start: {START_PORTS} ports in a row were taken")
    }

    /// Starts Keeper with exactly `config` (its data directory is the caller's to keep).
    /// Returns once the server is listening; panics if it cannot start.
    pub fn start_with(config: Config) -> Keeper {
        let (addr, running) = launch(config.clone());
        Keeper {
            addr,
            config: Box::new(config),
            running: Mutex::new(Some(running)),
            _data: None,
        }
    }

    /// The configuration it was started with (`listen` says port 0 if the caller's did; see
    /// [`TestServer::addr`]).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The secure listener's address; panics if it was started without one.
    pub fn secure_addr(&self) -> SocketAddr {
        self.config
            .secure_listen
            .expect("started with a secure listener (Keeper::start_tls)")
    }

    /// The data directory (transaction log and snapshots).
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    /// Shuts the server down and starts it again on the same address with the same data
    /// directory, as a restart-durability test needs.
    pub fn restart(&mut self) {
        self.stop_server();
        let mut config = (*self.config).clone();
        config.listen = self.addr;
        // The old listener is closed; only a bind race with another process can delay us.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match try_launch(config.clone()) {
                Ok((_, running)) => {
                    *self
                        .running
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(running);
                    return;
                }
                Err(LaunchError::AddrInUse(e)) if Instant::now() < deadline => {
                    eprintln!("Keeper restart on {}: {e}; retrying", self.addr);
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("Keeper restart on {} failed: {e}", self.addr),
            }
        }
    }

    /// Stops the server now (dropping does the same).
    pub fn stop(self) {}

    fn stop_server(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(Running { shutdown, thread }) = running else {
            return;
        };
        let _ = shutdown.send(());
        let deadline = Instant::now() + STOP_TIMEOUT;
        while !thread.is_finished() {
            if Instant::now() > deadline {
                // Leave the thread behind rather than hang the test suite; say so loudly.
                eprintln!(
                    "Keeper on {} did not shut down within {STOP_TIMEOUT:?}; leaving its thread",
                    self.addr
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Err(panic) = thread.join()
            && !std::thread::panicking()
        {
            panic!("Keeper's server thread panicked: {}", panic_message(&panic));
        }
    }
}

impl TestServer for Keeper {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn connect_string(&self) -> String {
        self.addr.to_string()
    }
    fn name(&self) -> &'static str {
        "keeper"
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop_server();
    }
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper")
            .field("addr", &self.addr)
            .field("data_dir", &self.config.data_dir)
            .finish()
    }
}

/// Why a start failed; a taken address is worth retrying on restart, nothing else is.
enum LaunchError {
    AddrInUse(std::io::Error),
    Other(String),
}

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchError::AddrInUse(e) => write!(f, "Server::start returned {e}"),
            LaunchError::Other(message) => f.write_str(message),
        }
    }
}

fn launch(config: Config) -> (SocketAddr, Running) {
    try_launch(config).unwrap_or_else(|e| panic!("Keeper failed to start: {e}"))
}

/// Runs the server on its own thread; returns once it listens, or why it could not.
fn try_launch(config: Config) -> Result<(SocketAddr, Running), LaunchError> {
    let (ready_tx, ready_rx) = mpsc::channel::<std::io::Result<SocketAddr>>();
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("keeper-test-server".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("keeper-test-worker")
                .enable_all()
                .build()
                .expect("build the test server's tokio runtime");
            runtime.block_on(async move {
                match Server::start(config).await {
                    Ok(server) => {
                        let _ = ready_tx.send(Ok(server.local_addr()));
                        // Either an explicit stop or the Keeper handle being dropped.
                        let _ = shutdown_rx.await;
                        server.shutdown().await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
            runtime.shutdown_timeout(Duration::from_secs(10));
        })
        .map_err(|e| LaunchError::Other(format!("spawn the server thread: {e}")))?;

    match ready_rx.recv_timeout(START_TIMEOUT) {
        Ok(Ok(addr)) => Ok((
            addr,
            Running {
                shutdown: shutdown_tx,
                thread,
            },
        )),
        Ok(Err(e)) => {
            let _ = thread.join();
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Err(LaunchError::AddrInUse(e))
            } else {
                Err(LaunchError::Other(format!("Server::start returned {e}")))
            }
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(LaunchError::Other(match thread.join() {
            Err(panic) => format!("Server::start panicked: {}", panic_message(&panic)),
            Ok(()) => "the server thread ended without reporting".into(),
        })),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            drop(shutdown_tx);
            Err(LaunchError::Other(format!(
                "Server::start did not return within {START_TIMEOUT:?}"
            )))
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}
