#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    async fn ready(&self) -> bool;
}

fn main() {}
