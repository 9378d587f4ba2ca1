#[zmesh_macros::service(channel = "pump")]
trait Pump {
    const MAX_BAR: f64;
    #[query]
    async fn pressure(&self) -> f64;
}

fn main() {}
