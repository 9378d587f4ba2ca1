#[zmesh::service(channel = "pump")]
struct Pump;

fn main() {}
