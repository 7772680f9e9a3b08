//! Nodes kept on the server for a session, Curator's `nodes` family: the persistent node
//! (`PersistentNode`, kept through connection and session losses), and what is built on it,
//! group membership (`GroupMember`) and naming (a name whose data is an address).

mod member;
mod naming;
mod persistent;

pub use member::{Group, GroupView, Member, MemberEvent};
pub use naming::{NameWatch, Registered, Registration};
