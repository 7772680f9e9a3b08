//! The resource server: what the lock clients protect, run inside the orchestrator on a
//! loopback port, with an unfenced side and a fenced side.
//!
//! Clients speak one line per request and get one line back:
//! `enter CLIENT TOKEN` (the holder starts its turn; `TOKEN` is its fencing token, or `-` for
//! a lock that has none), `write CLIENT TOKEN`, `exit CLIENT`. Replies are `ok`, `refused`
//! (the fence turned the token away) or `error WHY`.
//!
//! Invariants:
//! - **Unfenced side**: a client is inside from its `enter` until its `exit` or until its
//!   connection closes (a killed holder's turn ends with its process). An `enter` while another
//!   client is inside overlaps that client's turn: two holders at once, which a lock exists to
//!   prevent. Each turn counts at most once however many enter during it, so a holder paused
//!   through many turns of others is one overlap.
//! - **Fenced side**: a [`LocalFence`] per run. `enter` presents the token as the holder's
//!   first write, as a careful resource user does; every `write` presents it again. A write the
//!   fence accepts from a client that is not the latest to have sent `enter` (someone entered
//!   after it) is a **stale write accepted**. With tokens that only grow the fence refuses all of
//!   those, so the count is nonzero only if a backend handed out a token that did not grow.
//! - Malformed lines get `error` naming the line; nothing a client sends panics the server.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkeeper::FencingToken;
use lockkeeper::fence::LocalFence;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The fence's resource id: one protected resource per run.
const RESOURCE_ID: &str = "resource";

/// What the resource saw during one run.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Turns begun (`enter` lines).
    pub turns: u64,
    /// Writes received, fenced or not.
    pub writes: u64,
    /// Turns some other client entered during (unfenced): each turn counts once.
    pub overlaps: u64,
    /// Writes (or entries) the fence accepted from a client someone had entered after.
    pub stale_accepted: u64,
    /// Entries and writes the fence refused.
    pub refused: u64,
    /// Whether any client presented a token (a lock without tokens leaves the fence unused).
    pub fenced: bool,
    /// The longest time between two consecutive `enter`s (or from the last one to when the
    /// counts were read): the lock's longest unavailability, plus at most one ordinary turn.
    pub max_gap: Duration,
}

#[derive(Default)]
struct State {
    /// Clients inside, each with whether its turn was overlapped already.
    inside: HashMap<String, bool>,
    latest: Option<String>,
    last_enter: Option<Instant>,
    counts: Counts,
    fence: LocalFence,
}

/// The resource server; stops accepting when dropped.
pub struct Resource {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl Resource {
    /// Binds 127.0.0.1 on a free port and serves clients until dropped.
    pub async fn start() -> std::io::Result<Resource> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, state.clone()));
                }
            }
        });
        Ok(Resource {
            addr,
            state,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The client holding the resource now: the latest to enter, if it is still inside.
    pub fn holder(&self) -> Option<String> {
        let state = lock(&self.state);
        state
            .latest
            .clone()
            .filter(|latest| state.inside.contains_key(latest))
    }

    /// The counts so far; the gap since the last `enter` counts as unavailability too.
    pub fn counts(&self) -> Counts {
        let state = lock(&self.state);
        let mut counts = state.counts.clone();
        if let Some(last) = state.last_enter {
            counts.max_gap = counts.max_gap.max(last.elapsed());
        }
        counts
    }
}

impl Drop for Resource {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// One client connection: requests in order; on close, the clients it spoke for leave.
async fn serve(stream: TcpStream, state: Arc<Mutex<State>>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut spoke_for = HashSet::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = handle(&state, &line, &mut spoke_for);
        if write
            .write_all(format!("{reply}\n").as_bytes())
            .await
            .is_err()
        {
            break;
        }
    }
    let mut state = lock(&state);
    for client in spoke_for {
        state.inside.remove(&client);
    }
}

fn handle(state: &Mutex<State>, line: &str, spoke_for: &mut HashSet<String>) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (verb, client, token) = match words.as_slice() {
        [verb @ ("enter" | "write"), client, token] => (*verb, *client, Some(*token)),
        ["exit", client] => ("exit", *client, None),
        _ => return format!("error malformed request {line:?}"),
    };
    let token = match token {
        None | Some("-") => None,
        Some(raw) => match raw.parse::<u64>() {
            Ok(value) => Some(FencingToken::new(value)),
            Err(_) => return format!("error token {raw:?} in {line:?} is not a number"),
        },
    };
    spoke_for.insert(client.to_owned());
    let mut state = lock(state);
    let state = &mut *state;
    match verb {
        "enter" => {
            let now = Instant::now();
            if let Some(last) = state.last_enter {
                state.counts.max_gap = state.counts.max_gap.max(now - last);
            }
            state.last_enter = Some(now);
            state.counts.turns += 1;
            for (other, overlapped) in &mut state.inside {
                if other != client && !*overlapped {
                    *overlapped = true;
                    state.counts.overlaps += 1;
                }
            }
            state.inside.insert(client.to_owned(), false);
            state.latest = Some(client.to_owned());
            fenced(state, client, token)
        }
        "write" => {
            state.counts.writes += 1;
            fenced(state, client, token)
        }
        _ => {
            state.inside.remove(client);
            "ok".into()
        }
    }
}

/// Presents `token` to the fence; counts a stale acceptance.
fn fenced(state: &mut State, client: &str, token: Option<FencingToken>) -> String {
    let Some(token) = token else {
        return "ok".into();
    };
    state.counts.fenced = true;
    match state.fence.write(RESOURCE_ID, token, || ()) {
        Ok(outcome) if outcome.is_accepted() => {
            if state.latest.as_deref() != Some(client) {
                state.counts.stale_accepted += 1;
            }
            "ok".into()
        }
        Ok(_) => {
            state.counts.refused += 1;
            "refused".into()
        }
        Err(err) => format!("error {err}"),
    }
}
