//! `multi` (writes applied all or none) and `multiRead` (reads answered together).
//!
//! A write batch that fails reports the first operation that failed and why; ZooKeeper rolls
//! back the ones before it and does not try the ones after. Each operation's path is checked
//! as it is added, so a bad one is refused before anything is sent.

use std::future::Future;

use lockkeeper_proto::{
    Create2Response, ErrorResponse, GetDataResponse, Jute, MultiHeader, MultiOp,
    PathVersionRequest, PathWatchRequest, ReadOp, Reader, Request, SetDataRequest, Stat,
    StatResponse, StringsResponse,
};

use crate::client::{Client, CreateOptions};
use crate::error::{Error, Result};

/// What one write of a batch did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiWriteResult {
    /// The created node's path (with its sequence number), and its stat when the server
    /// gives one (ZooKeeper answers a create inside a multi with the path alone).
    Create {
        /// The path created, without the chroot.
        path: String,
        /// The new node's stat, if the server sent it.
        stat: Option<Stat>,
    },
    /// The node was deleted.
    Delete,
    /// The node's data was replaced.
    SetData {
        /// The node's stat after the change.
        stat: Stat,
    },
    /// The node had the expected version.
    Check,
}

/// Why a write batch was not applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MultiWriteError {
    /// Operation `index` (from 0) failed with `source`; nothing was applied.
    #[error("operation {index} of the batch failed: {source}")]
    OperationFailed {
        /// The position of the failed operation in the batch, from 0.
        index: usize,
        /// Why it failed.
        source: Error,
    },
    /// The batch as a whole failed (no answer, or an answer that cannot be read).
    #[error("{source}")]
    RequestFailed {
        /// Why the batch failed.
        source: Error,
    },
}

/// A batch of writes; [`commit`](MultiWriter::commit) sends it.
pub struct MultiWriter<'c> {
    client: &'c Client,
    ops: Vec<MultiOp>,
}

impl<'c> MultiWriter<'c> {
    pub(crate) fn new(client: &'c Client) -> MultiWriter<'c> {
        MultiWriter {
            client,
            ops: Vec::new(),
        }
    }

    /// Adds a create; a bad path or options are refused here, naming the path.
    pub fn add_create(&mut self, path: &str, data: &[u8], options: &CreateOptions) -> Result<()> {
        let path = self
            .client
            .server_path(path, options.mode.is_sequential())?;
        self.ops.push(MultiOp::Create(options.request(path, data)?));
        Ok(())
    }

    /// Adds a delete, at `version` if given.
    pub fn add_delete(&mut self, path: &str, version: Option<i32>) -> Result<()> {
        let path = self.client.server_path(path, false)?;
        self.ops.push(MultiOp::Delete(PathVersionRequest {
            path,
            version: version.unwrap_or(-1),
        }));
        Ok(())
    }

    /// Adds a data replacement, at `version` if given.
    pub fn add_set_data(&mut self, path: &str, data: &[u8], version: Option<i32>) -> Result<()> {
        let path = self.client.server_path(path, false)?;
        self.ops.push(MultiOp::SetData(SetDataRequest {
            path,
            data: Some(bytes::Bytes::copy_from_slice(data)),
            version: version.unwrap_or(-1),
        }));
        Ok(())
    }

    /// Fails the batch unless the node's version is `version` (`-1`: unless it exists).
    pub fn add_check_version(&mut self, path: &str, version: i32) -> Result<()> {
        let path = self.client.server_path(path, false)?;
        self.ops
            .push(MultiOp::Check(PathVersionRequest { path, version }));
        Ok(())
    }

    /// Sends the batch now (an empty batch too: the server answers it with no results).
    pub fn commit(
        &mut self,
    ) -> impl Future<Output = Result<Vec<MultiWriteResult>, MultiWriteError>> + Send + 'static {
        let ops = std::mem::take(&mut self.ops);
        let reply = self.client.send_batch(Ok(Request::Multi(ops)));
        let client = self.client.clone();
        async move {
            // A failed batch comes back as an error header *and* a body naming the operation.
            let reply = reply.await?;
            let results = read_write_results(&client, reply.body);
            match (reply.error, results) {
                // An error the body does not place is the batch's.
                (Some(source), Ok(_)) => Err(MultiWriteError::RequestFailed { source }),
                (Some(source), Err(MultiWriteError::RequestFailed { .. })) => {
                    Err(MultiWriteError::RequestFailed { source })
                }
                (_, results) => results,
            }
        }
    }
}

fn read_write_results(
    client: &Client,
    body: bytes::Bytes,
) -> Result<Vec<MultiWriteResult>, MultiWriteError> {
    let mut r = Reader::new(body);
    let mut results = Vec::new();
    for index in 0.. {
        let header = MultiHeader::read(&mut r).map_err(unreadable)?;
        if header.done {
            break;
        }
        let result = match lockkeeper_proto::OpCode::try_from(header.op) {
            Ok(lockkeeper_proto::OpCode::Create) => {
                let path = String::read(&mut r).map_err(unreadable)?;
                MultiWriteResult::Create {
                    path: client.client_path(&path),
                    stat: None,
                }
            }
            Ok(
                lockkeeper_proto::OpCode::Create2
                | lockkeeper_proto::OpCode::CreateContainer
                | lockkeeper_proto::OpCode::CreateTtl,
            ) => {
                let created = Create2Response::read(&mut r).map_err(unreadable)?;
                MultiWriteResult::Create {
                    path: client.client_path(&created.path),
                    stat: Some(created.stat),
                }
            }
            Ok(lockkeeper_proto::OpCode::Delete) => MultiWriteResult::Delete,
            Ok(lockkeeper_proto::OpCode::SetData) => MultiWriteResult::SetData {
                stat: StatResponse::read(&mut r).map_err(unreadable)?.stat,
            },
            Ok(lockkeeper_proto::OpCode::Check) => MultiWriteResult::Check,
            Ok(lockkeeper_proto::OpCode::Error) => {
                let err = ErrorResponse::read(&mut r).map_err(unreadable)?.err;
                // Operations before the failure report Ok, those after RuntimeInconsistency:
                // the first real error is the cause.
                match Error::from_code(err) {
                    None => continue,
                    Some(Error::Server(lockkeeper_proto::ErrorCode::RuntimeInconsistency)) => {
                        continue;
                    }
                    Some(source) => {
                        return Err(MultiWriteError::OperationFailed { index, source });
                    }
                }
            }
            _ => {
                return Err(unreadable(format!("a result of type {}", header.op)));
            }
        };
        results.push(result);
    }
    Ok(results)
}

fn unreadable(err: impl std::fmt::Display) -> MultiWriteError {
    MultiWriteError::RequestFailed {
        source: Error::Protocol(format!("an unreadable multi reply: {err}")),
    }
}

impl From<Error> for MultiWriteError {
    fn from(source: Error) -> MultiWriteError {
        MultiWriteError::RequestFailed { source }
    }
}

impl From<MultiWriteError> for Error {
    /// The cause alone: which operation failed is lost.
    fn from(err: MultiWriteError) -> Error {
        match err {
            MultiWriteError::OperationFailed { source, .. }
            | MultiWriteError::RequestFailed { source } => source,
        }
    }
}

/// What one read of a [`MultiReader`] batch found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiReadResult {
    /// A getData's answer.
    Data {
        /// The node's data.
        data: Vec<u8>,
        /// The node's stat.
        stat: Stat,
    },
    /// A getChildren's answer.
    Children {
        /// The children's names (not full paths).
        children: Vec<String>,
    },
    /// This read failed (the others are answered on their own).
    Error {
        /// Why it failed.
        err: Error,
    },
}

/// A batch of reads; [`commit`](MultiReader::commit) sends it.
pub struct MultiReader<'c> {
    client: &'c Client,
    ops: Vec<ReadOp>,
}

impl<'c> MultiReader<'c> {
    pub(crate) fn new(client: &'c Client) -> MultiReader<'c> {
        MultiReader {
            client,
            ops: Vec::new(),
        }
    }

    fn add(&mut self, path: &str, op: fn(PathWatchRequest) -> ReadOp) -> Result<()> {
        let path = self.client.server_path(path, false)?;
        self.ops.push(op(PathWatchRequest { path, watch: false }));
        Ok(())
    }

    /// Adds a read of a node's data and stat.
    pub fn add_get_data(&mut self, path: &str) -> Result<()> {
        self.add(path, ReadOp::GetData)
    }

    /// Adds a listing of a node's children.
    pub fn add_get_children(&mut self, path: &str) -> Result<()> {
        self.add(path, ReadOp::GetChildren)
    }

    /// Sends the batch now.
    pub fn commit(
        &mut self,
    ) -> impl Future<Output = Result<Vec<MultiReadResult>>> + Send + 'static {
        let ops = std::mem::take(&mut self.ops);
        let reply = self.client.send_batch(Ok(Request::MultiRead(ops)));
        async move {
            let reply = reply.await?;
            if let Some(err) = reply.error {
                return Err(err);
            }
            let mut r = Reader::new(reply.body);
            let unreadable = |err: lockkeeper_proto::DecodeError| {
                Error::Protocol(format!("an unreadable multiRead reply: {err}"))
            };
            let mut results = Vec::new();
            loop {
                let header = MultiHeader::read(&mut r).map_err(unreadable)?;
                if header.done {
                    return Ok(results);
                }
                results.push(match lockkeeper_proto::OpCode::try_from(header.op) {
                    Ok(lockkeeper_proto::OpCode::GetData) => {
                        let got = GetDataResponse::read(&mut r).map_err(unreadable)?;
                        MultiReadResult::Data {
                            data: got.data.map(|d| d.to_vec()).unwrap_or_default(),
                            stat: got.stat,
                        }
                    }
                    Ok(lockkeeper_proto::OpCode::GetChildren) => MultiReadResult::Children {
                        children: StringsResponse::read(&mut r).map_err(unreadable)?.strings,
                    },
                    Ok(lockkeeper_proto::OpCode::Error) => {
                        let err = ErrorResponse::read(&mut r).map_err(unreadable)?.err;
                        MultiReadResult::Error {
                            err: Error::from_code(err).unwrap_or(Error::UnknownCode(0)),
                        }
                    }
                    _ => {
                        return Err(Error::Protocol(format!(
                            "a multiRead result of type {}",
                            header.op
                        )));
                    }
                });
            }
        }
    }
}
