//! The SQL fence: a row per resource carrying the highest token next to the value, written by
//! one conditional statement, so the database's row lock makes the check and the write atomic.
//!
//! The table (PostgreSQL; SQLite takes the same with `BLOB` for `BYTEA`):
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS fenced (
//!     id          TEXT PRIMARY KEY,
//!     value       BYTEA NOT NULL,
//!     fence_token BIGINT NOT NULL
//! );
//! ```
//!
//! The write: insert the row, or update it only if the stored token is not higher. A statement
//! that changed no row was refused.
//!
//! ```sql
//! INSERT INTO fenced (id, value, fence_token) VALUES ($1, $2, $3)
//! ON CONFLICT (id) DO UPDATE SET value = excluded.value, fence_token = excluded.fence_token
//! WHERE fenced.fence_token <= excluded.fence_token;
//! ```
//!
//! One upsert rather than `UPDATE ... WHERE fence_token <= $3` followed by an `INSERT` when no
//! row matched: between those two statements another writer can insert the row, and the
//! insert then fails on the key instead of being compared. `ON CONFLICT` takes the row lock
//! and re-evaluates the `WHERE` on the row as it is now, on PostgreSQL (9.5+) and SQLite
//! (3.24+) alike. For a table of your own whose rows already exist, the plain conditional
//! update is enough: `UPDATE orders SET ..., fence_token = $2 WHERE id = $1 AND fence_token <=
//! $2`, refused when it updates no row. Other writes in the same transaction as the fenced
//! statement commit or roll back with it.
//!
//! Invariant of the helpers: **a refusal is an error**, [`SqlError::Stale`] naming the token
//! offered and the highest seen. The fenced write usually shares a transaction with the
//! caller's other writes, and a refusal reported as a value is easy to drop while those
//! commit: a stale holder's side effects would land even though its fenced write did not.
//! As an error, `?` leaves before the commit, and the transaction, dropped uncommitted, rolls
//! back (`tokio_postgres::Transaction` and `rusqlite::Transaction` both do). Whoever writes
//! the SQL by hand must do the same: treat "no row changed" as a reason to roll back.
//!
//! Tokens are stored as `BIGINT`: a token above `i64::MAX` is refused as an invalid argument
//! (ZooKeeper's czxids and Redis's counters never get there).
//!
//! The helpers run these statements through `tokio-postgres` (feature `postgres`) and
//! `rusqlite` (feature `sqlite`); without either feature the SQL is still here to copy.

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use super::check_resource;
use crate::FencingToken;

/// A failed SQL fence call, a refused (stale) write included: unlike the other fences', the
/// SQL fence's write shares a transaction with other writes, which must not commit when it is
/// refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// The fence refused the write: `resource` already holds a write with the higher token
    /// `highest`, so the holder of `token` has been superseded (its lock was lost, maybe while
    /// it was paused). Nothing of the fenced write was written. An error so that `?` rolls the
    /// enclosing transaction back: the stale holder's other writes in it must not commit
    /// either.
    #[error(
        "stale write to {resource:?} refused: fencing token {token} is lower than {highest}, \
         the highest the fence has seen"
    )]
    Stale {
        /// The resource id written to.
        resource: String,
        /// The token the refused write carried.
        token: FencingToken,
        /// The highest token the fence had seen when it refused (the current holder's, or a
        /// later one).
        highest: FencingToken,
    },

    /// A wrong argument (the table name, the resource id, a token beyond `BIGINT`), named in
    /// the message. Nothing was sent to the database.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The database refused or failed the statement.
    #[cfg(feature = "postgres")]
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),

    /// The database refused or failed the statement.
    #[cfg(feature = "sqlite")]
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// The shared resource-id check, whose only failure is an invalid argument.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn check_id(resource: &str) -> Result<(), SqlError> {
    check_resource("fence resource id", resource).map_err(|err| match err {
        crate::Error::InvalidArgument(what) => SqlError::InvalidArgument(what),
        other => SqlError::InvalidArgument(other.to_string()),
    })
}

/// The fence's table: one row per resource id.
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn demo(db: tokio_postgres::Client, token: lockkeeper::FencingToken) -> Result<(), lockkeeper::fence::sql::SqlError> {
/// use lockkeeper::fence::sql::{SqlError, SqlFence};
///
/// let fence = SqlFence::new("fenced")?;
/// fence.create_table_postgres(&db).await?;
/// match fence.write_postgres(&db, "orders", token, b"v2").await {
///     Ok(()) => {}
///     Err(SqlError::Stale { highest, .. }) => eprintln!("a newer holder ({highest}) wrote first"),
///     Err(other) => return Err(other),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqlFence {
    table: String,
}

impl SqlFence {
    /// A fence on `table`, a plain SQL identifier (letters, digits and `_`, not starting with
    /// a digit, at most 63 bytes) so that it can be put in a statement unquoted.
    pub fn new(table: &str) -> Result<SqlFence, SqlError> {
        let plain = table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let starts_well = table
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
        if !plain || !starts_well || table.len() > 63 {
            return Err(SqlError::InvalidArgument(format!(
                "fence table name {table:?} must be 1 to 63 letters, digits or '_', not \
                 starting with a digit"
            )));
        }
        Ok(SqlFence {
            table: table.to_owned(),
        })
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// `CREATE TABLE IF NOT EXISTS` for the table; `blob` is the binary type's name (`BYTEA`
    /// on PostgreSQL, `BLOB` on SQLite).
    pub fn create_table_sql(&self, blob: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (id TEXT PRIMARY KEY, value {blob} NOT NULL, \
             fence_token BIGINT NOT NULL)",
            self.table
        )
    }

    /// The fenced write, with parameters `$1` id, `$2` value, `$3` token (SQLite reads
    /// `$1`..`$3` as numbered parameters too). It changes one row when accepted, none when
    /// refused.
    pub fn write_sql(&self) -> String {
        let t = &self.table;
        format!(
            "INSERT INTO {t} (id, value, fence_token) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET value = excluded.value, \
             fence_token = excluded.fence_token WHERE {t}.fence_token <= excluded.fence_token"
        )
    }

    /// The current token and value of `$1`.
    pub fn read_sql(&self) -> String {
        format!(
            "SELECT fence_token, value FROM {} WHERE id = $1",
            self.table
        )
    }
}

/// The checks before a write: a resource id, a token that fits `BIGINT`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn check_write(resource: &str, token: FencingToken) -> Result<i64, SqlError> {
    check_id(resource)?;
    i64::try_from(token.get()).map_err(|_| {
        SqlError::InvalidArgument(format!(
            "fencing token {token} for {resource:?} does not fit the table's BIGINT"
        ))
    })
}

/// A token read back from the table (never negative: only [`check_write`]ed tokens are
/// stored).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn stored(token: i64) -> FencingToken {
    FencingToken::new(token.max(0).unsigned_abs())
}

/// The refusal of `token`'s write to `resource`, given the row read back after it (which
/// exists with a higher token: a refused upsert found the row, and tokens only grow).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn stale(resource: &str, token: FencingToken, row: Option<(FencingToken, Vec<u8>)>) -> SqlError {
    SqlError::Stale {
        resource: resource.to_owned(),
        token,
        highest: row.map_or(token, |(highest, _)| highest),
    }
}

#[cfg(feature = "postgres")]
impl SqlFence {
    /// Creates the table if it does not exist.
    pub async fn create_table_postgres(
        &self,
        client: &impl tokio_postgres::GenericClient,
    ) -> Result<(), SqlError> {
        client
            .batch_execute(&self.create_table_sql("BYTEA"))
            .await?;
        Ok(())
    }

    /// Writes `value` for `resource` if `token` is at least the stored token;
    /// [`SqlError::Stale`] if a higher token wrote first. `client` may be a transaction: the
    /// fenced write then commits with the rest of it, and a refusal propagated with `?`
    /// drops the transaction uncommitted, which rolls the rest back.
    ///
    /// ```no_run
    /// # #[cfg(feature = "postgres")]
    /// # async fn demo(mut db: tokio_postgres::Client, token: lockkeeper::FencingToken) -> Result<(), lockkeeper::fence::sql::SqlError> {
    /// use lockkeeper::fence::sql::SqlFence;
    ///
    /// let fence = SqlFence::new("fenced")?;
    /// let tx = db.transaction().await?;
    /// tx.execute("UPDATE stock SET reserved = reserved + 1 WHERE sku = $1", &[&"A-7"])
    ///     .await?;
    /// // A newer holder wrote first: Err(SqlError::Stale { .. }), `?` returns before the
    /// // commit, and the dropped transaction takes the stock update back too.
    /// fence.write_postgres(&tx, "orders", token, b"v2").await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_postgres(
        &self,
        client: &impl tokio_postgres::GenericClient,
        resource: &str,
        token: FencingToken,
        value: &[u8],
    ) -> Result<(), SqlError> {
        let raw = check_write(resource, token)?;
        let changed = client
            .execute(&self.write_sql(), &[&resource, &value, &raw])
            .await?;
        if changed > 0 {
            return Ok(());
        }
        // Refused: the row exists with a higher token, which can only have grown since.
        let highest = self.read_postgres(client, resource).await?;
        Err(stale(resource, token, highest))
    }

    /// The stored token and value of `resource`, if written.
    pub async fn read_postgres(
        &self,
        client: &impl tokio_postgres::GenericClient,
        resource: &str,
    ) -> Result<Option<(FencingToken, Vec<u8>)>, SqlError> {
        check_id(resource)?;
        let row = client.query_opt(&self.read_sql(), &[&resource]).await?;
        Ok(row.map(|row| (stored(row.get(0)), row.get(1))))
    }
}

#[cfg(feature = "sqlite")]
impl SqlFence {
    /// Creates the table if it does not exist.
    pub fn create_table_sqlite(&self, conn: &rusqlite::Connection) -> Result<(), SqlError> {
        conn.execute_batch(&self.create_table_sql("BLOB"))?;
        Ok(())
    }

    /// Writes `value` for `resource` if `token` is at least the stored token;
    /// [`SqlError::Stale`] if a higher token wrote first. `conn` may be inside a transaction
    /// (`rusqlite::Transaction` derefs to a connection): a refusal propagated with `?` drops
    /// the transaction uncommitted, which rolls the rest of it back.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")]
    /// # fn main() -> Result<(), lockkeeper::fence::sql::SqlError> {
    /// use lockkeeper::FencingToken;
    /// use lockkeeper::fence::sql::{SqlError, SqlFence};
    ///
    /// /// The holder's work: its own write, then the fenced one, committed together or not at all.
    /// fn ship(db: &mut rusqlite::Connection, fence: &SqlFence, token: FencingToken) -> Result<(), SqlError> {
    ///     let tx = db.transaction()?;
    ///     tx.execute("INSERT INTO shipments (item) VALUES ('A-7')", [])?;
    ///     fence.write_sqlite(&tx, "orders", token, b"shipped")?; // Stale: returns, rolls back
    ///     tx.commit()?;
    ///     Ok(())
    /// }
    ///
    /// let mut db = rusqlite::Connection::open_in_memory()?;
    /// db.execute_batch("CREATE TABLE shipments (item TEXT NOT NULL)")?;
    /// let fence = SqlFence::new("fenced")?;
    /// fence.create_table_sqlite(&db)?;
    /// ship(&mut db, &fence, FencingToken::new(2))?; // the current holder
    /// let late = ship(&mut db, &fence, FencingToken::new(1)); // a holder that was paused
    /// assert!(matches!(late, Err(SqlError::Stale { highest, .. }) if highest.get() == 2));
    /// let shipments: i64 = db.query_row("SELECT count(*) FROM shipments", [], |row| row.get(0))?;
    /// assert_eq!(shipments, 1, "the late holder's shipment was rolled back with its write");
    /// # Ok(()) }
    /// # #[cfg(not(feature = "sqlite"))]
    /// # fn main() {}
    /// ```
    pub fn write_sqlite(
        &self,
        conn: &rusqlite::Connection,
        resource: &str,
        token: FencingToken,
        value: &[u8],
    ) -> Result<(), SqlError> {
        let raw = check_write(resource, token)?;
        let changed = conn.execute(&self.write_sql(), rusqlite::params![resource, value, raw])?;
        if changed > 0 {
            return Ok(());
        }
        let highest = self.read_sqlite(conn, resource)?;
        Err(stale(resource, token, highest))
    }

    /// The stored token and value of `resource`, if written.
    pub fn read_sqlite(
        &self,
        conn: &rusqlite::Connection,
        resource: &str,
    ) -> Result<Option<(FencingToken, Vec<u8>)>, SqlError> {
        use rusqlite::OptionalExtension;
        check_id(resource)?;
        let row = conn
            .query_row(&self.read_sql(), [resource], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, Vec<u8>>(1)?))
            })
            .optional()?;
        Ok(row.map(|(token, value)| (stored(token), value)))
    }
}
