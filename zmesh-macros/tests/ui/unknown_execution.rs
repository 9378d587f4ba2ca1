#[zmesh_macros::service(channel = "pump", execution = round_robin)]
trait Pump {
    #[query]
    async fn pressure(&self) -> f64;
}

fn main() {}
