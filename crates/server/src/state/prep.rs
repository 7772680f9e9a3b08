//! Prep: turns a write request into a [`Txn`], or into ZooKeeper's error for it.
//!
//! Every check ZooKeeper's `PrepRequestProcessor` makes happens here, in the same order, so the
//! same bad request gets the same error code. Prep reads the tree through a view that
//! overlays the effects of earlier ops in the same multi; a multi is validated whole before
//! anything is applied, which is what makes it all-or-nothing.

use std::collections::HashMap;
use std::sync::Arc;

use lockkeeper_proto::request::CreateOp;
use lockkeeper_proto::{
    Acl, CreateMode, ErrorCode, MultiOp, OpCode, PathVersionRequest, SetAclRequest, SetDataRequest,
    perms,
};

use crate::state::acl::AuthIds;
use crate::state::path;
use crate::state::tree::{DataTree, MAX_TTL, Owner};
use crate::state::txn::Txn;

/// Who is asking.
pub(crate) struct Ctx<'a> {
    pub session_id: i64,
    pub auth: &'a AuthIds,
}

/// A rejected write: one code, or for a multi, ZooKeeper's per-op codes (Ok before the failing
/// op, its error, then RuntimeInconsistency for the rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejected {
    Op(ErrorCode),
    Multi(Vec<ErrorCode>),
}

/// The parts of a node prep looks at, possibly changed by earlier ops of a multi.
#[derive(Clone)]
struct Meta {
    version: i32,
    aversion: i32,
    child_creations: i32,
    num_children: i32,
    ephemeral_owner: i64,
    acl: Arc<[Acl]>,
}

struct View<'t> {
    tree: &'t DataTree,
    changes: HashMap<String, Option<Meta>>,
}

impl View<'_> {
    fn get(&self, p: &str) -> Option<Meta> {
        if let Some(change) = self.changes.get(p) {
            return change.clone();
        }
        self.tree.get(p).map(|n| Meta {
            version: n.version,
            aversion: n.aversion,
            child_creations: n.child_creations,
            num_children: n.num_children,
            ephemeral_owner: n.ephemeral_owner,
            acl: n.acl.clone(),
        })
    }

    fn put(&mut self, p: &str, meta: Option<Meta>) {
        self.changes.insert(p.to_string(), meta);
    }
}

pub(crate) fn create(tree: &DataTree, ctx: &Ctx, op: &CreateOp) -> Result<Txn, ErrorCode> {
    create_in(
        &mut View {
            tree,
            changes: HashMap::new(),
        },
        ctx,
        op,
    )
}

pub(crate) fn delete(
    tree: &DataTree,
    ctx: &Ctx,
    req: &PathVersionRequest,
) -> Result<Txn, ErrorCode> {
    delete_in(
        &mut View {
            tree,
            changes: HashMap::new(),
        },
        ctx,
        req,
    )
}

pub(crate) fn set_data(tree: &DataTree, ctx: &Ctx, req: &SetDataRequest) -> Result<Txn, ErrorCode> {
    set_data_in(
        &mut View {
            tree,
            changes: HashMap::new(),
        },
        ctx,
        req,
    )
}

pub(crate) fn set_acl(tree: &DataTree, ctx: &Ctx, req: &SetAclRequest) -> Result<Txn, ErrorCode> {
    set_acl_in(
        &mut View {
            tree,
            changes: HashMap::new(),
        },
        ctx,
        req,
    )
}

pub(crate) fn multi(tree: &DataTree, ctx: &Ctx, ops: &[MultiOp]) -> Result<Txn, Rejected> {
    let mut view = View {
        tree,
        changes: HashMap::new(),
    };
    let mut txns = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let prepared = match op {
            MultiOp::Create(c) => create_in(&mut view, ctx, c),
            MultiOp::Delete(d) => delete_in(&mut view, ctx, d),
            MultiOp::SetData(s) => set_data_in(&mut view, ctx, s),
            MultiOp::Check(c) => check_in(&view, ctx, c),
        };
        match prepared {
            Ok(txn) => txns.push(txn),
            Err(code) => {
                let mut codes = vec![ErrorCode::Ok; i];
                codes.push(code);
                codes.resize(ops.len(), ErrorCode::RuntimeInconsistency);
                return Err(Rejected::Multi(codes));
            }
        }
    }
    Ok(Txn::Multi(txns))
}

fn bad_path(p: &str) -> Result<(), ErrorCode> {
    path::validate(p).map_err(|_| ErrorCode::BadArguments)
}

/// ZooKeeper's `checkAndIncVersion`: -1 matches any version.
fn next_version(current: i32, expected: i32) -> Result<i32, ErrorCode> {
    if expected != -1 && expected != current {
        return Err(ErrorCode::BadVersion);
    }
    Ok(current.wrapping_add(1))
}

fn create_in(view: &mut View, ctx: &Ctx, op: &CreateOp) -> Result<Txn, ErrorCode> {
    let mode = CreateMode::try_from(op.flags).map_err(|_| ErrorCode::BadArguments)?;
    // TTL rules: a TTL mode needs a TTL in range; other modes must not be given one.
    let ttl = if op.op == OpCode::CreateTtl {
        op.ttl
    } else {
        -1
    };
    if mode.is_ttl() {
        if !(1..=MAX_TTL).contains(&ttl) {
            return Err(ErrorCode::BadArguments);
        }
    } else if ttl >= 0 {
        return Err(ErrorCode::BadArguments);
    }
    // As in ZooKeeper, the flags decide the mode whichever create opcode carried them.
    if op.path.contains('\0') {
        return Err(ErrorCode::BadArguments);
    }
    // ZooKeeper takes everything before the last slash as the parent, so creating "/" finds the
    // root as its own parent and ends in NodeExists.
    let parent_path = match op.path.as_str() {
        "/" => "/".to_string(),
        p => path::parent(p).ok_or(ErrorCode::BadArguments)?.to_string(),
    };
    let acl = ctx.auth.fixup(&op.acl)?;
    let parent = view.get(&parent_path).ok_or(ErrorCode::NoNode)?;
    ctx.auth.check(&parent.acl, perms::CREATE)?;
    let p = if mode.is_sequential() {
        format!("{}{:010}", op.path, parent.child_creations)
    } else {
        op.path.clone()
    };
    bad_path(&p)?;
    if view.get(&p).is_some() {
        return Err(ErrorCode::NodeExists);
    }
    if matches!(Owner::decode(parent.ephemeral_owner), Owner::Ephemeral(_)) {
        return Err(ErrorCode::NoChildrenForEphemerals);
    }
    let ephemeral_owner = match mode {
        m if m.is_ephemeral() => ctx.session_id,
        CreateMode::Container => crate::state::tree::CONTAINER_OWNER,
        m if m.is_ttl() => Owner::ttl(ttl),
        _ => 0,
    };
    view.put(
        &parent_path,
        Some(Meta {
            child_creations: parent.child_creations.wrapping_add(1),
            num_children: parent.num_children + 1,
            ..parent
        }),
    );
    view.put(
        &p,
        Some(Meta {
            version: 0,
            aversion: 0,
            child_creations: 0,
            num_children: 0,
            ephemeral_owner,
            acl: acl.clone().into(),
        }),
    );
    Ok(Txn::Create {
        path: p,
        data: op.data.clone(),
        acl,
        ephemeral_owner,
    })
}

/// Paths ZooKeeper refuses to delete: the root and its own subtree's fixed nodes.
fn is_special(p: &str) -> bool {
    matches!(
        p,
        "/" | "/zookeeper" | "/zookeeper/quota" | "/zookeeper/config"
    )
}

fn delete_in(view: &mut View, ctx: &Ctx, req: &PathVersionRequest) -> Result<Txn, ErrorCode> {
    if req.path.contains('\0') || is_special(&req.path) {
        return Err(ErrorCode::BadArguments);
    }
    let parent_path = path::parent(&req.path)
        .ok_or(ErrorCode::BadArguments)?
        .to_string();
    let parent = view.get(&parent_path).ok_or(ErrorCode::NoNode)?;
    ctx.auth.check(&parent.acl, perms::DELETE)?;
    let node = view.get(&req.path).ok_or(ErrorCode::NoNode)?;
    next_version(node.version, req.version)?;
    if node.num_children > 0 {
        return Err(ErrorCode::NotEmpty);
    }
    view.put(
        &parent_path,
        Some(Meta {
            num_children: parent.num_children - 1,
            ..parent
        }),
    );
    view.put(&req.path, None);
    Ok(Txn::Delete {
        path: req.path.clone(),
    })
}

fn set_data_in(view: &mut View, ctx: &Ctx, req: &SetDataRequest) -> Result<Txn, ErrorCode> {
    bad_path(&req.path)?;
    let node = view.get(&req.path).ok_or(ErrorCode::NoNode)?;
    ctx.auth.check(&node.acl, perms::WRITE)?;
    let version = next_version(node.version, req.version)?;
    view.put(&req.path, Some(Meta { version, ..node }));
    Ok(Txn::SetData {
        path: req.path.clone(),
        data: req.data.clone(),
        version,
    })
}

fn set_acl_in(view: &mut View, ctx: &Ctx, req: &SetAclRequest) -> Result<Txn, ErrorCode> {
    bad_path(&req.path)?;
    let acl = ctx.auth.fixup(&req.acl)?;
    let node = view.get(&req.path).ok_or(ErrorCode::NoNode)?;
    ctx.auth.check(&node.acl, perms::ADMIN)?;
    let aversion = next_version(node.aversion, req.version)?;
    view.put(
        &req.path,
        Some(Meta {
            aversion,
            acl: acl.clone().into(),
            ..node
        }),
    );
    Ok(Txn::SetAcl {
        path: req.path.clone(),
        acl,
        aversion,
    })
}

fn check_in(view: &View, ctx: &Ctx, req: &PathVersionRequest) -> Result<Txn, ErrorCode> {
    bad_path(&req.path)?;
    let node = view.get(&req.path).ok_or(ErrorCode::NoNode)?;
    ctx.auth.check(&node.acl, perms::READ)?;
    next_version(node.version, req.version)?;
    Ok(Txn::Check {
        path: req.path.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create_op(path: &str, mode: CreateMode) -> CreateOp {
        CreateOp {
            op: if mode == CreateMode::Container {
                OpCode::CreateContainer
            } else {
                OpCode::Create
            },
            path: path.into(),
            data: None,
            acl: crate::state::acl::open_acl(),
            flags: mode.code(),
            ttl: 0,
        }
    }

    fn run(tree: &mut DataTree, txn: Result<Txn, ErrorCode>, zxid: i64) {
        crate::state::txn::apply(tree, &txn.unwrap(), zxid, 0, &mut Vec::new());
    }

    #[test]
    fn errors_follow_zookeepers_checks() {
        let auth = AuthIds::default();
        let ctx = Ctx {
            session_id: 7,
            auth: &auth,
        };
        let mut tree = DataTree::new();
        assert_eq!(
            create(&tree, &ctx, &create_op("/a/b", CreateMode::Persistent)),
            Err(ErrorCode::NoNode)
        );
        assert_eq!(
            create(&tree, &ctx, &create_op("a", CreateMode::Persistent)),
            Err(ErrorCode::BadArguments)
        );
        // As in ZooKeeper, the parent is looked up before the full path is validated.
        assert_eq!(
            create(&tree, &ctx, &create_op("/a//b", CreateMode::Persistent)),
            Err(ErrorCode::NoNode)
        );
        assert_eq!(
            create(
                &tree,
                &ctx,
                &create_op("/zookeeper/..", CreateMode::Persistent)
            ),
            Err(ErrorCode::BadArguments)
        );
        let txn = create(&tree, &ctx, &create_op("/e", CreateMode::Ephemeral));
        run(&mut tree, txn, 1);
        assert_eq!(
            create(&tree, &ctx, &create_op("/e", CreateMode::Persistent)),
            Err(ErrorCode::NodeExists)
        );
        assert_eq!(
            create(&tree, &ctx, &create_op("/e/c", CreateMode::Persistent)),
            Err(ErrorCode::NoChildrenForEphemerals)
        );
        assert_eq!(
            delete(
                &tree,
                &ctx,
                &PathVersionRequest {
                    path: "/e".into(),
                    version: 3
                }
            ),
            Err(ErrorCode::BadVersion)
        );
        assert_eq!(
            delete(
                &tree,
                &ctx,
                &PathVersionRequest {
                    path: "/".into(),
                    version: -1
                }
            ),
            Err(ErrorCode::BadArguments)
        );
        assert_eq!(
            delete(
                &tree,
                &ctx,
                &PathVersionRequest {
                    path: "/zookeeper".into(),
                    version: -1
                }
            ),
            Err(ErrorCode::BadArguments)
        );
    }

    #[test]
    fn sequential_names_come_from_child_creations() {
        let auth = AuthIds::default();
        let ctx = Ctx {
            session_id: 7,
            auth: &auth,
        };
        let mut tree = DataTree::new();
        let txn = create(&tree, &ctx, &create_op("/p", CreateMode::Persistent));
        run(&mut tree, txn, 1);
        let Txn::Create { path, .. } = create(
            &tree,
            &ctx,
            &create_op("/p/s-", CreateMode::PersistentSequential),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(path, "/p/s-0000000000");
        let txn = create(&tree, &ctx, &create_op("/p/x", CreateMode::Persistent));
        run(&mut tree, txn, 2);
        let req = PathVersionRequest {
            path: "/p/x".into(),
            version: -1,
        };
        let txn = delete(&tree, &ctx, &req);
        run(&mut tree, txn, 3);
        let Txn::Create { path, .. } = create(
            &tree,
            &ctx,
            &create_op("/p/", CreateMode::PersistentSequential),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(path, "/p/0000000001");
    }

    #[test]
    fn multi_sees_its_own_earlier_ops_and_reports_per_op_codes() {
        let auth = AuthIds::default();
        let ctx = Ctx {
            session_id: 7,
            auth: &auth,
        };
        let tree = DataTree::new();
        let ok = multi(
            &tree,
            &ctx,
            &[
                MultiOp::Create(create_op("/m", CreateMode::Persistent)),
                MultiOp::Create(create_op("/m/c", CreateMode::Persistent)),
                MultiOp::Check(PathVersionRequest {
                    path: "/m".into(),
                    version: 0,
                }),
                MultiOp::Delete(PathVersionRequest {
                    path: "/m/c".into(),
                    version: 0,
                }),
            ],
        );
        assert!(ok.is_ok());
        let failed = multi(
            &tree,
            &ctx,
            &[
                MultiOp::Create(create_op("/m", CreateMode::Persistent)),
                MultiOp::Create(create_op("/m", CreateMode::Persistent)),
                MultiOp::Create(create_op("/n", CreateMode::Persistent)),
            ],
        );
        assert_eq!(
            failed,
            Err(Rejected::Multi(vec![
                ErrorCode::Ok,
                ErrorCode::NodeExists,
                ErrorCode::RuntimeInconsistency
            ]))
        );
    }
}
