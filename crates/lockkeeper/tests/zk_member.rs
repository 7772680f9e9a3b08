//! Group membership, against Keeper and Apache ZooKeeper: Curator's `GroupMember` layout
//! (`{group}/{id}`, ephemeral, data = payload), members that come back after a session loss
//! or a deletion, a node of another session that is never taken over, bad input refused by
//! name, and one group shared with unmodified Curator 5.4 in a JVM, where a member whose
//! process is killed (a JVM, or a lockkeeper member in a child process) leaves every view.

mod support;

#[allow(dead_code)]
#[path = "curator/jvm.rs"]
mod jvm;
#[allow(dead_code)]
#[path = "curator/zk.rs"]
mod zk;

use std::collections::BTreeMap;
use std::time::Duration;

use jvm::Jvm;
use lockkeeper::Error;
use lockkeeper::zk::{ConnectionState, Group, GroupView, MemberEvent, Session};
use lockkeeper_testkit::both;
use lockkeeper_testkit::test_child::{self, ChildProcess};
use lockkeeper_zk_client::{CreateMode, CreateOptions, Stat};
use support::{Partition, for_each_backend, session};
use tokio::time::Instant;
use zk::{JVM_START, STEP, runtime};

/// How long a view may take to catch up: a killed member's session must expire first.
const CATCH_UP: Duration = Duration::from_secs(60);

/// The members as `id=data,id=data` (by id), the form the Java side prints.
fn render(members: &BTreeMap<String, Vec<u8>>) -> String {
    members
        .iter()
        .map(|(id, data)| format!("{id}={}", String::from_utf8_lossy(data)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Waits (bounded) until a fresh read of `group` is `want`.
async fn members_become(group: &Group, want: &str) {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        let now = render(&group.members().await.expect("members"));
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: members are {now:?}, want {want:?}",
            group.path()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next change of `view`, within [`CATCH_UP`].
async fn next_event(view: &mut GroupView) -> MemberEvent {
    view.next_timeout(CATCH_UP)
        .await
        .expect("next_timeout")
        .unwrap_or_else(|| panic!("{}: no change within {CATCH_UP:?}", view.path()))
}

fn joined(id: &str, data: &str) -> MemberEvent {
    MemberEvent::Joined {
        id: id.into(),
        data: data.into(),
    }
}

fn updated(id: &str, old: &str, data: &str) -> MemberEvent {
    MemberEvent::Updated {
        id: id.into(),
        old: old.into(),
        data: data.into(),
    }
}

fn left(id: &str, data: &str) -> MemberEvent {
    MemberEvent::Left {
        id: id.into(),
        data: data.into(),
    }
}

/// The node at `path` as a plain read sees it.
async fn node(observer: &Session, path: &str) -> Option<(Vec<u8>, Stat)> {
    match observer.client().expect("client").get_data(path).await {
        Ok(found) => Some(found),
        Err(lockkeeper_zk_client::Error::NoNode) => None,
        Err(err) => panic!("read {path}: {err}"),
    }
}

/// Waits (bounded) until `path` holds `data` as an ephemeral of `owner`.
async fn node_becomes(observer: &Session, path: &str, data: &[u8], owner: impl Fn() -> i64) {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        let found = node(observer, path).await;
        if let Some((now, stat)) = &found {
            if now == data && stat.ephemeral_owner == owner() {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{path} is {found:?}, want {:?} owned by 0x{:x}",
            String::from_utf8_lossy(data),
            owner()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_update_and_leave_in_curators_layout() {
    for_each_backend(|connect| async move {
        let a = session(&connect).await;
        let b = session(&connect).await;
        let path = "/groups/basic/members";
        let group = a.group(path).unwrap();
        assert!(group.members().await.unwrap().is_empty(), "no group yet");
        let mut view = b.group(path).unwrap().watch().await.unwrap();
        assert!(view.members().is_empty());

        let one = group.join("one", "1").await.unwrap();
        assert_eq!(next_event(&mut view).await, joined("one", "1"));
        let two = b.group(path).unwrap().join("two", "2").await.unwrap();
        assert_eq!(next_event(&mut view).await, joined("two", "2"));
        assert!(one.is_present() && two.is_present());
        assert_eq!(two.path(), "/groups/basic/members/two");
        assert_eq!(render(&group.members().await.unwrap()), "one=1,two=2");

        // The layout: {group}/{id}, ephemeral of the member's session, data = payload.
        let (data, stat) = node(&a, "/groups/basic/members/two").await.unwrap();
        assert_eq!(data, b"2");
        assert_eq!(stat.ephemeral_owner, b.session_id());

        two.update("2b").await.unwrap();
        assert_eq!(two.data(), b"2b");
        assert_eq!(render(&group.members().await.unwrap()), "one=1,two=2b");
        assert_eq!(next_event(&mut view).await, updated("two", "2", "2b"));
        assert_eq!(render(&view.members()), "one=1,two=2b");

        two.leave().await.unwrap();
        assert_eq!(render(&group.members().await.unwrap()), "one=1");
        assert_eq!(next_event(&mut view).await, left("two", "2b"));
        assert_eq!(render(&view.members()), "one=1");
        // Left for good: nothing re-creates it.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(render(&group.members().await.unwrap()), "one=1");

        // A dropped member leaves in the background.
        drop(one);
        members_become(&group, "").await;
        assert_eq!(next_event(&mut view).await, left("one", "1"));
        assert!(
            view.next_timeout(Duration::from_millis(300))
                .await
                .unwrap()
                .is_none(),
            "nothing else changed"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_group_paths_and_member_ids_are_refused_by_name() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        for path in [
            "",
            "groups",
            "groups/a",
            "/",
            "/groups/",
            "/a//b",
            "/zookeeper/g",
        ] {
            match s.group(path) {
                Err(Error::InvalidArgument(message)) => {
                    assert!(message.contains("group path"), "{message}");
                    assert!(message.contains(&format!("{path:?}")), "{message}");
                }
                other => panic!("group {path:?}: {other:?}"),
            }
        }
        let group = s.group("/groups/bad").unwrap();
        for id in ["", "a/b", "/", ".", "..", "a\nb"] {
            match group.join(id, "x").await {
                Err(Error::InvalidArgument(message)) => {
                    assert!(message.contains("member id"), "{message}");
                    assert!(message.contains(&format!("{id:?}")), "{message}");
                    assert!(message.contains("\"/groups/bad\""), "{message}");
                }
                other => panic!("join {id:?}: {other:?}"),
            }
        }
        // Nothing was sent: the group's node was never created.
        assert!(node(&s, "/groups/bad").await.is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_deleted_behind_its_back_comes_back() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let other = session(&connect).await;
        let member = s
            .group("/groups/deleted")
            .unwrap()
            .join("m", "mine")
            .await
            .unwrap();
        let path = "/groups/deleted/m";
        other.client().unwrap().delete(path, None).await.unwrap();
        node_becomes(&other, path, b"mine", || s.session_id()).await;
        tokio::time::timeout(CATCH_UP, member.present())
            .await
            .expect("present again once re-created");
        member.leave().await.unwrap();
        assert!(node(&other, path).await.is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sessions_node_with_our_id_is_never_taken_over() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let other = session(&connect).await;
        let group = s.group("/groups/taken").unwrap();
        let path = "/groups/taken/x";
        let ephemeral = CreateOptions::new(CreateMode::Ephemeral);
        let client = other.client().unwrap();
        client
            .mkdir("/groups/taken", &CreateOptions::new(CreateMode::Persistent))
            .await
            .unwrap();
        client.create(path, b"theirs", &ephemeral).await.unwrap();

        // Joining with a taken id is refused, and the other node is left alone.
        match group.join("x", "ours").await {
            Err(Error::Conflict { path: at, .. }) => assert_eq!(at, path),
            other => panic!("joining a taken id: {other:?}"),
        }
        assert_eq!(node(&s, path).await.unwrap().0, b"theirs");
        // Joining when free waits for it, leaving it alone meanwhile, data and owner.
        let member = group.join_when_free("x", "ours").await.unwrap();
        assert!(!member.is_present(), "took over another session's node");
        member.update("ours2").await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (data, stat) = node(&s, path).await.unwrap();
        assert_eq!(
            (data.as_slice(), stat.ephemeral_owner),
            (&b"theirs"[..], other.session_id())
        );

        // Leaving does not delete it either.
        member.leave().await.unwrap();
        let (data, _) = node(&s, path).await.unwrap();
        assert_eq!(data, b"theirs", "leaving deleted another session's node");

        // Once the other session's node goes, ours is created, with the latest data.
        let member = group.join_when_free("x", "ours").await.unwrap();
        member.update("ours3").await.unwrap();
        assert!(!member.is_present());
        // The session ends on the server once its last client handle is gone.
        drop(client);
        other.close().await;
        tokio::time::timeout(CATCH_UP, member.present())
            .await
            .expect("created once the other node was gone");
        node_becomes(&s, path, b"ours3", || s.session_id()).await;
        member.leave().await.unwrap();
        assert!(node(&s, path).await.is_none());
    })
    .await;
}

/// Waits (bounded) for `state` on `states`.
async fn state_comes(states: &mut lockkeeper::zk::StateStream, state: ConnectionState) {
    let seen = tokio::time::timeout(CATCH_UP, async {
        while let Some(now) = states.next().await {
            if now == state {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "{state:?} never came");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_rejoins_after_its_session_is_lost() {
    for_each_backend(|connect| async move {
        let partition = Partition::start(&connect).await;
        let s = session(&partition.connect_string()).await;
        let observer = session(&connect).await;
        let path = "/groups/phoenix/p";
        let member = s
            .group("/groups/phoenix")
            .unwrap()
            .join("p", "v1")
            .await
            .unwrap();
        let first = s.session_id();
        node_becomes(&observer, path, b"v1", || first).await;

        let mut states = s.states();
        partition.cut();
        state_comes(&mut states, ConnectionState::Lost).await;
        assert!(!member.is_present(), "present after its session was lost");
        partition.heal();
        state_comes(&mut states, ConnectionState::Reconnected).await;
        assert_ne!(s.session_id(), first, "a new session after Lost");

        // Back, in the new session, with the same data.
        tokio::time::timeout(CATCH_UP, member.present())
            .await
            .expect("the member is back");
        node_becomes(&observer, path, b"v1", || s.session_id()).await;
        member.update("v2").await.unwrap();
        node_becomes(&observer, path, b"v2", || s.session_id()).await;

        member.leave().await.unwrap();
        assert!(node(&observer, path).await.is_none());
        drop(partition);
    })
    .await;
}

/// The Java side's view, as `id=data,...`.
fn curator_view(java: &mut Jvm, path: &str, id: &str) -> String {
    let answer = java.request(&format!("members {path} {id}"), STEP);
    match answer.strip_prefix("OK ") {
        Some(view) => view.to_owned(),
        None if answer == "OK" => String::new(),
        None => panic!("members: {answer}\n{}", java.transcript()),
    }
}

/// Waits (bounded) until Curator's `GroupMember` cache shows `want`.
fn curator_sees(java: &mut Jvm, path: &str, id: &str, want: &str) {
    let deadline = std::time::Instant::now() + CATCH_UP;
    loop {
        let view = curator_view(java, path, id);
        if view == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Curator's member {id} sees {view:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The lockkeeper member of the interop test that runs in a child process, to be SIGKILLed.
fn child_member() {
    let connect = std::env::var("ZK_CONNECT").expect("ZK_CONNECT");
    let rt = runtime();
    rt.block_on(async {
        let s = session(&connect).await;
        let _member = s
            .group("/groups/interop")
            .unwrap()
            .join("rust-2", "r2")
            .await
            .unwrap();
        // Until killed; bounded so a lost child cannot outlive the test for long.
        tokio::time::sleep(Duration::from_secs(300)).await;
    });
    std::process::exit(3);
}

/// lockkeeper members (in this process and in a child) and a Curator `GroupMember` (in a JVM)
/// on one path: everyone sees the same members and the same updates; a killed member's
/// process leaves every view.
#[test]
fn curator_and_lockkeeper_members_share_one_group() {
    if test_child::role().is_some() {
        return child_member();
    }
    for server in both() {
        let connect = server.connect_string();
        let on = server.name();
        eprintln!("--- against {on}");
        let path = "/groups/interop";
        let rt = runtime();
        let mut java = Jvm::spawn("Members", &[&connect, "4000"]);
        java.expect_line("READY", JVM_START);
        assert_eq!(java.request(&format!("join {path} java-1 j1"), STEP), "OK");
        let s = rt.block_on(session(&connect));
        let group = s.group(path).unwrap();
        let me = rt.block_on(group.join("rust-1", "r1")).unwrap();
        let mut child = ChildProcess::spawn(
            "curator_and_lockkeeper_members_share_one_group",
            "member",
            &[("ZK_CONNECT", connect.clone())],
        );

        let all = "java-1=j1,rust-1=r1,rust-2=r2";
        rt.block_on(members_become(&group, all));
        curator_sees(&mut java, path, "java-1", all);
        let mut view = rt.block_on(group.watch()).unwrap();
        assert_eq!(render(&view.members()), all);

        // Updates from either side reach both views.
        assert_eq!(
            java.request(&format!("update {path} java-1 j1b"), STEP),
            "OK"
        );
        rt.block_on(me.update("r1b")).unwrap();
        let all = "java-1=j1b,rust-1=r1b,rust-2=r2";
        rt.block_on(members_become(&group, all));
        curator_sees(&mut java, path, "java-1", all);
        let mut updates = [
            rt.block_on(next_event(&mut view)),
            rt.block_on(next_event(&mut view)),
        ];
        updates.sort_by_key(|event| format!("{event:?}"));
        assert_eq!(
            updates,
            [
                updated("java-1", "j1", "j1b"),
                updated("rust-1", "r1", "r1b")
            ]
        );

        // A lockkeeper member's process killed: gone from Curator's view and ours.
        child.kill();
        let rest = "java-1=j1b,rust-1=r1b";
        rt.block_on(members_become(&group, rest));
        curator_sees(&mut java, path, "java-1", rest);
        assert_eq!(rt.block_on(next_event(&mut view)), left("rust-2", "r2"));

        // The JVM killed (SIGKILL by its PID, on drop): gone from lockkeeper's view.
        drop(java);
        rt.block_on(members_become(&group, "rust-1=r1b"));
        assert_eq!(rt.block_on(next_event(&mut view)), left("java-1", "j1b"));
        assert_eq!(render(&view.members()), "rust-1=r1b");

        rt.block_on(me.leave()).unwrap();
        rt.block_on(members_become(&group, ""));
        drop(child);
    }
}
