#[zmesh_macros::service(channel = "pump", retries = 3)]
trait Pump {
    #[query]
    async fn pressure(&self) -> f64;
}

fn main() {}
