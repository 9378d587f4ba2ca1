#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    #[idempotent]
    async fn pressure(&self) -> f64;
}

fn main() {}
