#![doc = include_str!("../README.md")]

mod check;
mod decide;
mod error;
mod load;
mod reads;
mod request;
mod shape;

pub use decide::{Options, Policies};
pub use error::{PolicyError, Problem};
pub use load::Source;
