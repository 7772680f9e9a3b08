//! ZooKeeper recipes.
