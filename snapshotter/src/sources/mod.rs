//! Where account state comes from.

pub mod genesis;
