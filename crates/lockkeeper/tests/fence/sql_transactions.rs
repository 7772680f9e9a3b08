//! A stale write inside a transaction takes the transaction's other writes down with it, on
//! SQLite and on a real PostgreSQL: the fenced write's refusal is an error, so `?` leaves the
//! function before the commit and the dropped transaction rolls back.
//!
//! Each test commits a write with token 10, then runs one transaction that first writes
//! elsewhere (a row in `side_effects`) and then makes the fenced write with token 5,
//! propagating its result with `?`. Neither the side effect nor the stale value may be
//! committed, and the error must name both tokens.

use lockkeeper::FencingToken;
use lockkeeper::fence::sql::{SqlError, SqlFence};

use crate::targets::TABLE;

const SIDE_EFFECTS: &str = "CREATE TABLE IF NOT EXISTS side_effects (note TEXT NOT NULL)";

/// The refusal must be `Stale` and name the token offered and the highest seen.
fn assert_stale(result: Result<(), SqlError>, name: &str) {
    match result {
        Err(SqlError::Stale {
            resource,
            token,
            highest,
        }) => {
            assert_eq!(resource, "orders", "{name}");
            assert_eq!(token, FencingToken::new(5), "{name}");
            assert_eq!(highest, FencingToken::new(10), "{name}");
        }
        other => panic!("{name}: want Err(Stale {{ token 5, highest 10 }}), got {other:?}"),
    }
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_a_stale_write_rolls_back_its_whole_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fence.db");
    let mut conn = rusqlite::Connection::open(&path).expect("open the SQLite file");
    let fence = SqlFence::new(TABLE).unwrap();
    fence.create_table_sqlite(&conn).unwrap();
    conn.execute_batch(SIDE_EFFECTS).unwrap();
    fence
        .write_sqlite(&conn, "orders", FencingToken::new(10), b"ten")
        .expect("the first write is accepted");

    /// The caller's unit of work: a write of its own, then the fenced one, then the commit.
    fn stale_work(conn: &mut rusqlite::Connection, fence: &SqlFence) -> Result<(), SqlError> {
        let tx = conn.transaction()?;
        tx.execute("INSERT INTO side_effects (note) VALUES ('old holder')", [])?;
        fence.write_sqlite(&tx, "orders", FencingToken::new(5), b"five")?;
        tx.commit()?;
        Ok(())
    }
    let result = stale_work(&mut conn, &fence);

    // Seen from a connection of its own: only what was committed.
    let reader = rusqlite::Connection::open(&path).expect("open the SQLite file again");
    let side_effects: i64 = reader
        .query_row("SELECT count(*) FROM side_effects", [], |row| row.get(0))
        .unwrap();
    assert_eq!(
        side_effects, 0,
        "sqlite: the transaction's other write was committed despite the stale fenced write"
    );
    assert_eq!(
        fence.read_sqlite(&reader, "orders").unwrap(),
        Some((FencingToken::new(10), b"ten".to_vec())),
        "sqlite: the fenced value changed"
    );
    assert_stale(result, "sqlite");
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_stale_write_rolls_back_its_whole_transaction() {
    use crate::targets::pg_connect;

    let server = lockkeeper_testkit::Postgres::start();
    let config = server.config();
    let mut client = pg_connect(&config).await;
    let fence = SqlFence::new(TABLE).unwrap();
    fence.create_table_postgres(&client).await.unwrap();
    client.batch_execute(SIDE_EFFECTS).await.unwrap();
    fence
        .write_postgres(&client, "orders", FencingToken::new(10), b"ten")
        .await
        .expect("the first write is accepted");

    /// The caller's unit of work: a write of its own, then the fenced one, then the commit.
    async fn stale_work(
        client: &mut tokio_postgres::Client,
        fence: &SqlFence,
    ) -> Result<(), SqlError> {
        let tx = client.transaction().await?;
        tx.execute("INSERT INTO side_effects (note) VALUES ('old holder')", &[])
            .await?;
        fence
            .write_postgres(&tx, "orders", FencingToken::new(5), b"five")
            .await?;
        tx.commit().await?;
        Ok(())
    }
    let result = stale_work(&mut client, &fence).await;

    // Seen from another connection (only committed rows) and from the same one, after the
    // rollback its dropped transaction queued.
    for (who, reader) in [
        ("another", &pg_connect(&config).await),
        ("the same", &client),
    ] {
        let side_effects: i64 = reader
            .query_one("SELECT count(*) FROM side_effects", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            side_effects, 0,
            "postgres ({who} connection): the transaction's other write was committed despite \
             the stale fenced write"
        );
        assert_eq!(
            fence.read_postgres(reader, "orders").await.unwrap(),
            Some((FencingToken::new(10), b"ten".to_vec())),
            "postgres ({who} connection): the fenced value changed"
        );
    }
    assert_stale(result, "postgres");
}
