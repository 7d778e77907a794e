//! `[sessions]`: session projections (DESIGN §5.4); quantity parsing for now.

pub mod quantity;
pub mod retention;
