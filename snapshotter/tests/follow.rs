//! The follower against a real anvil (mined on demand, so every step is
//! deterministic): it refuses without a base and says why, builds a base
//! from a genesis file and deltas on it, repairs a reorg, a damaged delta
//! in the store and rides out a node outage. Also: the example config
//! parses.
