#[zmesh_macros::service(channel = "valves", execution = keyed("valve"))]
trait Valves {
    #[idempotent]
    async fn open(&self, valve: u32) -> bool;
}

fn main() {}
