#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query(conflate)]
    async fn pressure(&self) -> f64;
}

fn main() {}
