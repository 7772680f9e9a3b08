//! The Redis fence keeps its highest tokens in Redis itself, so it is only as durable as the
//! server: these tests pin the check made when a fence is built (a server that does not fsync
//! every write is refused, naming its address and settings, unless the caller opts out) and
//! the limit that check exists for (a restart of a server without persistence makes the fence
//! forget, and a lower token gets through).
//!
//! Real redis-servers throughout: testkit's throwaway one (no persistence), and restartable
//! nodes with `appendonly yes` + `appendfsync always`, or with `CONFIG` renamed as managed
//! Redis services do.

use lockkeeper::fence::{Outcome, RedisFence};
use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper::{Error, FencingToken};
use lockkeeper_testkit::{NodeOptions, RedisCluster, RedisNode, RedisSentinel, RedisServer};

async fn connect(url: &str) -> Redis {
    Redis::connect(url).await.expect("connect to redis-server")
}

/// The build must fail with `NotDurable` naming `address`, and its message must carry
/// every one of `found`.
fn assert_refused(result: lockkeeper::Result<RedisFence>, address: &str, found: &[&str]) {
    assert_refused_among(result, &[address.to_owned()], found);
}

/// [`assert_refused`] for several servers: the one named must be among `addresses`; it is
/// returned.
fn assert_refused_among(
    result: lockkeeper::Result<RedisFence>,
    addresses: &[String],
    found: &[&str],
) -> String {
    let err = match result {
        Err(err @ Error::NotDurable { .. }) => err,
        Err(other) => panic!("want NotDurable for {addresses:?}, got another error: {other}"),
        Ok(_) => panic!("a fence was built on {addresses:?}, which do not persist every write"),
    };
    let Error::NotDurable {
        address,
        found: settings,
    } = &err
    else {
        unreachable!()
    };
    assert!(
        addresses.contains(address),
        "{err}: not one of {addresses:?}"
    );
    let message = err.to_string();
    eprintln!("refused as it should be: {message}");
    assert!(
        message.contains(address.as_str()),
        "{message:?} does not name {address}"
    );
    for what in found {
        assert!(
            settings.contains(what) && message.contains(what),
            "{message:?} does not say {what:?}"
        );
    }
    // The message says what would do and how to opt out.
    for hint in ["appendfsync always", "accept_unpersisted_server"] {
        assert!(
            message.contains(hint),
            "{message:?} does not mention {hint}"
        );
    }
    address.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_refuses_a_server_without_persistence() {
    let server = RedisServer::start();
    let redis = connect(&server.url()).await;
    assert_refused(
        RedisFence::new(&redis).await,
        &server.addr().to_string(),
        &["appendonly no"],
    );

    // The append-only file alone is not enough: `everysec` can lose the last second.
    let enabled: String = redis
        .command(redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("yes"))
        .await
        .expect("CONFIG SET appendonly yes");
    assert_eq!(enabled, "OK");
    assert_refused(
        RedisFence::new(&redis).await,
        &server.addr().to_string(),
        &["appendonly yes", "appendfsync everysec"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_accepts_a_server_that_fsyncs_every_write() {
    let node = RedisNode::start_with(NodeOptions::new().durable(true));
    let redis = connect(&node.url()).await;
    let fence = RedisFence::new(&redis)
        .await
        .expect("appendonly yes + appendfsync always is accepted");
    assert_eq!(
        fence
            .write("orders", FencingToken::new(3), b"three")
            .await
            .unwrap(),
        Outcome::Accepted
    );
    // The keys it names are the keys it wrote: the token, and the value beside it.
    let get = |key: String| {
        let redis = redis.clone();
        async move {
            let mut get = redis::cmd("GET");
            get.arg(&key);
            redis.command::<Option<Vec<u8>>>(&get).await.unwrap()
        }
    };
    assert_eq!(
        get(fence.value_key("orders")).await.as_deref(),
        Some(&b"three"[..])
    );
    assert_eq!(
        get(fence.token_key("orders")).await.as_deref(),
        Some(&b"3"[..])
    );
    // The layout other clients (and operators) read: the value beside the token's key.
    assert_eq!(
        fence.value_key("orders"),
        format!("{}:value", fence.token_key("orders"))
    );
    assert!(fence.token_key("orders").ends_with(":fence:{orders}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_refuses_when_config_is_unavailable() {
    // Managed services rename or disable CONFIG: the settings are then unknown, which is no
    // reason to trust them.
    let node = RedisNode::start_with(
        NodeOptions::new()
            .durable(true)
            .arg("--rename-command")
            .arg("CONFIG")
            .arg("LOCKKEEPER-TEST-CONFIG"),
    );
    let redis = connect(&node.url()).await;
    assert_refused(
        RedisFence::new(&redis).await,
        &node.addr().to_string(),
        &["unknown", "CONFIG GET"],
    );
    // The opt-out does not need CONFIG.
    let fence = RedisFence::builder(&redis)
        .accept_unpersisted_server()
        .build()
        .await
        .expect("the opt-out builds without CONFIG");
    assert_eq!(
        fence
            .write("orders", FencingToken::new(1), b"one")
            .await
            .unwrap(),
        Outcome::Accepted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_opt_out_accepts_a_server_without_persistence() {
    let server = RedisServer::start();
    let redis = connect(&server.url()).await;
    let fence = RedisFence::builder(&redis)
        .accept_unpersisted_server()
        .build()
        .await
        .expect("the opt-out accepts a server without persistence");
    assert_eq!(
        fence
            .write("orders", FencingToken::new(10), b"ten")
            .await
            .unwrap(),
        Outcome::Accepted
    );
    assert_eq!(
        fence
            .write("orders", FencingToken::new(9), b"nine")
            .await
            .unwrap(),
        Outcome::Refused {
            highest: FencingToken::new(10)
        },
        "while the server runs, the fence works as any other"
    );
}

/// The limit itself: after a restart of a server without persistence, the fence has forgotten
/// token 10 and accepts token 9. If this ever fails, the fence's docs (and docs/guide/fencing.md) are
/// wrong about the limit and must change with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_forgets_its_tokens_when_a_server_without_persistence_restarts() {
    let node = RedisNode::start();
    let fence = |redis: Redis| async move {
        RedisFence::builder(&redis)
            .accept_unpersisted_server()
            .build()
            .await
            .expect("the opt-out")
    };
    let before = fence(connect(&node.url()).await).await;
    assert_eq!(
        before
            .write("orders", FencingToken::new(10), b"ten")
            .await
            .unwrap(),
        Outcome::Accepted
    );

    node.restart(); // SIGKILL, then the same port with an empty data set
    let after = fence(connect(&node.url()).await).await;
    assert_eq!(
        after.read("orders").await.unwrap(),
        None,
        "the restarted server kept the token"
    );
    assert_eq!(
        after
            .write("orders", FencingToken::new(9), b"nine")
            .await
            .unwrap(),
        Outcome::Accepted,
        "a lower token was refused after a restart without persistence: the documented limit \
         no longer holds; update RedisFence's docs"
    );
    assert_eq!(
        after.read("orders").await.unwrap(),
        Some((FencingToken::new(9), b"nine".to_vec()))
    );
}

/// What the check buys: a server that fsyncs every write remembers the highest token across a
/// crash and restart, and still refuses the lower one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_remembers_its_tokens_when_a_persisting_server_restarts() {
    let node = RedisNode::start_with(NodeOptions::new().durable(true));
    let before = RedisFence::new(&connect(&node.url()).await)
        .await
        .expect("a persisting server");
    assert_eq!(
        before
            .write("orders", FencingToken::new(10), b"ten")
            .await
            .unwrap(),
        Outcome::Accepted
    );

    node.restart(); // SIGKILL, then the append-only file is replayed
    let after = RedisFence::new(&connect(&node.url()).await)
        .await
        .expect("a persisting server");
    assert_eq!(
        after
            .write("orders", FencingToken::new(9), b"nine")
            .await
            .unwrap(),
        Outcome::Refused {
            highest: FencingToken::new(10)
        }
    );
    assert_eq!(
        after.read("orders").await.unwrap(),
        Some((FencingToken::new(10), b"ten".to_vec()))
    );
}

/// On a cluster every primary is asked, and the one that does not fsync every write is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_on_a_cluster_checks_every_primary() {
    let cluster = RedisCluster::start();
    let addresses: Vec<String> = cluster.addrs().iter().map(ToString::to_string).collect();
    let redis = Redis::connect_cluster(&cluster.urls(), RedisOptions::default())
        .await
        .expect("connect to the cluster");
    assert_refused_among(
        RedisFence::new(&redis).await,
        &addresses,
        &["appendonly no"],
    );

    let set = |index: usize, name: &str, value: &str| {
        let reply = cluster.command(index, &["CONFIG", "SET", name, value]);
        assert_eq!(
            reply.text(),
            Some("OK"),
            "CONFIG SET {name} {value}: {reply:?}"
        );
    };
    for index in 0..addresses.len() {
        set(index, "appendonly", "yes");
        set(index, "appendfsync", "always");
    }
    RedisFence::new(&redis)
        .await
        .expect("every primary fsyncs every write");

    // One primary that stops doing so is enough to refuse, and it is the one named.
    set(1, "appendfsync", "everysec");
    let named = assert_refused_among(
        RedisFence::new(&redis).await,
        &addresses,
        &["appendonly yes", "appendfsync everysec"],
    );
    assert_eq!(named, addresses[1]);
}

/// Behind Sentinel, the master it names now is asked, and named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_behind_sentinel_checks_the_current_master() {
    let set = RedisSentinel::start(1);
    let redis = Redis::connect_sentinel(
        &set.sentinel_urls(),
        set.master_name(),
        RedisOptions::default(),
    )
    .await
    .expect("connect through Sentinel");
    assert_refused(
        RedisFence::new(&redis).await,
        &set.current_master().to_string(),
        &["appendonly no"],
    );
}

/// A server that cannot be asked at all is a connection error, not a verdict on its settings:
/// the caller should retry, not reconfigure a server it never heard from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_on_a_server_that_cannot_be_asked_is_a_connection_error() {
    let node = RedisNode::start_with(NodeOptions::new().durable(true));
    let redis = connect(&node.url()).await;
    node.kill();
    match RedisFence::new(&redis).await {
        Err(Error::Redis(err)) => eprintln!("a connection error, as it should be: {err}"),
        Err(other) => panic!("want a connection error from a killed server, got: {other}"),
        Ok(_) => panic!("a fence was built on a server that was not there"),
    }
}
