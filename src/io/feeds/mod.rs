//! What vigil reads besides its probes: credit balances, published prices, providers' status
//! pages and models lists.

pub mod balance;
pub mod model_list_reader;
pub mod model_lists;
pub mod prices;
pub mod provider_status;
