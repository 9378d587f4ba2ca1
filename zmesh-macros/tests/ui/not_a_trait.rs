#[zmesh_macros::service(channel = "pump")]
struct Pump;

fn main() {}
